"""Keeps TensorFlow's start-up noise off the terminal; errors and anything unknown still show.

Loading TensorFlow prints a dozen lines that say nothing to a user of this package:
"All log messages before absl::InitializeLog()...", "Could not find cuda drivers",
"This TensorFlow binary is optimized to use...", and on the first device probe
"failed call to cuInit" (an ERROR line on every machine without a GPU). Most come from
C++ static initialisers, before any Python switch can act, so `TF_CPP_MIN_LOG_LEVEL`
alone does not stop them.

`import imagesets` does not load TensorFlow (the command line's help, `list`, `fetch` and
`publish` never need it); it calls `install_import_hooks()`, so that whenever TensorFlow
(or TFDS) loads later, by our code or the user's, and the user has not asked for its
logs, it

* sets `TF_CPP_MIN_LOG_LEVEL=1` (TensorFlow's own switch: C++ INFO lines off, warnings
  and errors still printed), and
* loads TensorFlow with the process's stderr (fd 2) sent to a temporary file, then
  writes back every captured line except the known start-up lines in `NOISE`.

Then, or at `import imagesets` if TensorFlow was imported first, `probe_devices()` finds
the devices behind the same filter (the first probe prints a "failed call to cuInit"
ERROR line on every machine without a GPU). What TensorFlow printed before `import
imagesets` has been printed; import imagesets first to keep that quiet too.

Everything comes back with `-v`/`--verbose` on the command line, `IMAGESETS_VERBOSE=1`,
or a `TF_CPP_MIN_LOG_LEVEL` of the user's own (which is then left as it is). When
TensorFlow is already loaded (`tfds build` loads it before any of our code), only the
device probe is filtered.
"""

import contextlib
import importlib.abc
import os
import re
import sys
import tempfile
from typing import Callable

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


def verbose() -> bool:
  """The user wants TensorFlow's own start-up output."""
  return (os.environ.get("IMAGESETS_VERBOSE", "") not in ("", "0")
          or bool({"-v", "--verbose"} & set(sys.argv[1:])))


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
# (Grain workers, Beam workers, process pools) inherit quiet start-ups too, while a level
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
  """Loads TensorFlow now, without its start-up noise unless it is wanted."""
  with _quiet_loading():
    import tensorflow  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import


class _OnImport(importlib.abc.MetaPathFinder):
  """Runs code around the first import of a module, whoever imports it."""

  def __init__(self, name: str, around: Callable, after: Callable[[], None]):
    self.name, self.around, self.after = name, around, after

  def find_spec(self, fullname, path=None, target=None):
    if fullname != self.name:
      return None
    sys.meta_path.remove(self)  # once; the other finders find the module itself
    spec = next((spec for finder in sys.meta_path if hasattr(finder, "find_spec")
                 for spec in [finder.find_spec(fullname, path, target)] if spec), None)
    if spec is None or not hasattr(spec.loader, "exec_module"):
      return spec
    exec_module = spec.loader.exec_module

    def wrapped(module):
      with self.around():
        exec_module(module)
      self.after()
    spec.loader.exec_module = wrapped  # this module's own loader instance
    return spec


def when_imported(name: str, after: Callable[[], None], around: Callable = contextlib.nullcontext):
  """Runs `after()` once `name` is imported: now if it is, else right after its import."""
  if name in sys.modules:
    after()
  else:
    sys.meta_path.insert(0, _OnImport(name, around, after))


def install_import_hooks() -> None:
  """TensorFlow and TFDS load quietly whenever they load (by our code or the user's), and
  the devices are probed quietly right after TensorFlow loads (now, if it already has)."""
  for name in ("tensorflow", "tensorflow_datasets"):  # TFDS loads libraries that print too
    if name not in sys.modules and not any(
        isinstance(f, _OnImport) and f.name == name for f in sys.meta_path):
      when_imported(name, probe_devices if name == "tensorflow" else lambda: None,
                    around=_quiet_loading)
  if "tensorflow" in sys.modules:
    probe_devices()


def probe_devices() -> None:
  """Finds the devices now, without the "no GPU here" noise (for our commands)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  if _quiet():
    with _filtered_stderr():
      tf.config.list_physical_devices()
