"""Keeps TensorFlow's start-up noise off our commands' terminal; errors and anything unknown
still show.

Loading TensorFlow prints a dozen lines that say nothing to a user of this package:
"All log messages before absl::InitializeLog()...", "Could not find cuda drivers",
"This TensorFlow binary is optimized to use...", and on the first device probe
"failed call to cuInit" (an ERROR line on every machine without a GPU). Most come from
C++ static initialisers, before any Python switch can act, so `TF_CPP_MIN_LOG_LEVEL`
alone does not stop them.

Only our own commands (`imagesets build`/`verify`, the demo) are quieted, and only in
their own process: `load_tensorflow()`, called before anything loads TensorFlow there,

* sets `TF_CPP_MIN_LOG_LEVEL=1` (TensorFlow's own switch: C++ INFO lines off after
  start-up, warnings and errors still printed; child processes inherit it), and
* loads TensorFlow with the process's stderr (fd 2) sent to a temporary file, inside
  that call only, then writes back every captured line except the known start-up lines
  in `NOISE`;

and `probe_devices()` finds the devices behind the same filter. `import imagesets` in
someone else's process (a training script, a notebook, a test runner) changes nothing:
TensorFlow's logs there are the user's to configure, and `imagesets.quiet_tensorflow()`
gives that process the same filter when its author asks for it.

Everything comes back with `-v`/`--verbose` on the command line, `IMAGESETS_VERBOSE=1`,
or a `TF_CPP_MIN_LOG_LEVEL` of the user's own (which is then left as it is).
"""

import contextlib
import os
import re
import sys
import tempfile

from imagesets.console import cli_process

# Known, harmless start-up lines (matched anywhere in a line).
NOISE = re.compile("|".join([
    r"All log messages before absl::InitializeLog\(\) is called are written to STDERR",
    r"cudart_stub\.cc.*Could not find cuda drivers",
    r"cpu_feature_guard\.cc.*This TensorFlow binary is optimized",
    r"^To enable the following instructions: .* rebuild TensorFlow with the appropriate",
    r"oneDNN custom operations are on",
    r"failed call to cuInit",
    r"Unable to register cu(DNN|FFT|BLAS) factory",
    r"computation placer already registered",
    r"TF-TRT Warning: Could not find TensorRT",
]))


def in_our_command() -> bool:
  """This process is the `imagesets` command (not someone's process that imports us)."""
  argv = getattr(sys, "argv", None) or [""]
  return os.path.basename(argv[0] or "") == "imagesets"


def verbose() -> bool:
  """The user wants TensorFlow's own start-up output (a `-v` counts on our command lines
  only: in a user's script it is the script's own flag)."""
  return (os.environ.get("IMAGESETS_VERBOSE", "") not in ("", "0")
          or (cli_process.is_cli_process() and bool({"-v", "--verbose"} & set(sys.argv[1:]))))


@contextlib.contextmanager
def _filtered_stderr():
  """Sends fd 2 to a file inside the block, then writes back all but the NOISE lines."""
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile(mode="w+b") as captured:
    os.dup2(captured.fileno(), 2)
    try:
      yield
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      captured.seek(0)
      kept = [line for line in captured.read().decode("utf-8", "replace").splitlines(True)
              if not NOISE.search(line)]
      if kept:
        sys.stderr.write("".join(kept))
        sys.stderr.flush()


def _quiet() -> bool:
  return not verbose() and os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1") == "1"


# Set with TF_CPP_MIN_LOG_LEVEL when we chose that level, so that our child processes
# inherit it as ours (not as a level the user set), while a level
# the user set is left alone.
_OURS = "IMAGESETS_SET_TF_LOG_LEVEL"


def _quiet_loading():
  """Filters fd 2 while TensorFlow loads, unless its logs are wanted (see the docstring)."""
  users_level = "TF_CPP_MIN_LOG_LEVEL" in os.environ and _OURS not in os.environ
  if verbose() or users_level:
    return contextlib.nullcontext()
  os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
  os.environ[_OURS] = "1"
  return _filtered_stderr()


def load_tensorflow() -> None:
  """Loads TensorFlow now, without its start-up noise unless it is wanted (for our
  commands, before anything of theirs imports it; a no-op once it is loaded)."""
  if "tensorflow" in sys.modules:
    return
  with _quiet_loading():
    import tensorflow  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import


def quiet_tensorflow() -> None:
  """Our commands' quiet in your own process (a training script, a notebook): loads
  TensorFlow and finds its devices now, without the known start-up lines (`NOISE`), and
  sets TF_CPP_MIN_LOG_LEVEL=1 for the process and its children (TensorFlow's C++ INFO
  lines off; its warnings and errors, and every other line, still show). Everything shows
  with IMAGESETS_VERBOSE=1 or a TF_CPP_MIN_LOG_LEVEL of your own. Call it before anything
  imports TensorFlow:

      import imagesets
      imagesets.quiet_tensorflow()
      import tensorflow as tf
  """
  load_tensorflow()
  probe_devices()


def probe_devices() -> None:
  """Finds the devices now, without the "no GPU here" noise (for our commands)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  if _quiet():
    with _filtered_stderr():
      tf.config.list_physical_devices()
