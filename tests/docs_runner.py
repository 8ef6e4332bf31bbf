"""Runs one Python block of the docs in this process (test_docs.py's Python reader).

Imports nothing heavy: a block's own imports then see the reader's environment (HOME,
so TFDS's default data_dir is the reader's ~/tensorflow_datasets).
"""

import contextlib
import io
import os
import traceback


def run_python(code: str, env: dict[str, str], cwd: str) -> tuple[bool, str]:
  """(succeeded, stdout + stderr) of `code` run as a script in a fresh namespace."""
  os.environ.clear()
  os.environ.update(env)
  os.chdir(cwd)
  out = io.StringIO()
  ok = True
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
    try:
      exec(compile(code, "<block>", "exec"), {"__name__": "__main__"})  # pylint: disable=exec-used
    except SystemExit as exit_:
      ok = exit_.code in (None, 0)
    except BaseException:  # pylint: disable=broad-except
      traceback.print_exc()
      ok = False
  return ok, out.getvalue()
