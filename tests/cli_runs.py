"""The `imagesets` command in tests, two ways, one result type (`CompletedProcess`):

* `command(...)`: the installed console script in a subprocess, as a user runs it. For
  what only a process shows: start-up, signals, exit statuses of the interpreter, what
  TensorFlow prints at import, environment variables read at start.
* `in_process(...)`: `cli.main` called in this process with its output captured: the
  same parsing, messages and exit codes without starting Python and TensorFlow again
  (seconds a call on a busy machine). The command changes nothing process-wide here:
  only a command-line process is changed for its life (`imagesets.console.cli_process`).
"""

import contextlib
import io
import os
import subprocess

from conftest import BIN


def command(*args, env=None, cwd=None, timeout=300) -> subprocess.CompletedProcess:
  return subprocess.run([str(BIN / "imagesets"), *map(str, args)], capture_output=True,
                        text=True, env={**os.environ, **(env or {})}, cwd=cwd,
                        timeout=timeout)


@contextlib.contextmanager
def _environment(env, cwd):
  saved_env, saved_cwd = dict(os.environ), os.getcwd()
  os.environ.update(env or {})
  if cwd is not None:
    os.chdir(cwd)
  try:
    yield
  finally:
    os.chdir(saved_cwd)
    os.environ.clear()
    os.environ.update(saved_env)


def in_process(*args, env=None, cwd=None) -> subprocess.CompletedProcess:
  from imagesets.cli import main as cli
  args = [str(a) for a in args]
  out, err = io.StringIO(), io.StringIO()
  with _environment(env, cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
      status = cli.main(args)
    except SystemExit as exit_:   # (argparse's usage errors)
      status = exit_.code if isinstance(exit_.code, int) else 1
  return subprocess.CompletedProcess(["imagesets", *args], status, out.getvalue(),
                                     err.getvalue())
