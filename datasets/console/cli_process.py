"""Is this process a command-line program (`tfds build`, `imagesets ...`), or someone else's
(a training script, a notebook, a test runner, a Beam worker)?

Only a command-line program's own process may be changed for its whole life (an excepthook
that prints one line, stderr that suits a log): in anyone else's process, importing,
building and reading with imagesets change nothing.
"""

import os
import sys

_PROGRAMS = ("tfds", "imagesets")  # console scripts: sys.argv[0] is their path
_MAIN_MODULES = ("tensorflow_datasets.scripts.cli", "imagesets.cli")  # python -m ...


def is_cli_process() -> bool:
  program = os.path.basename(sys.argv[0]) if sys.argv else ""
  main = getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", "") or ""
  return program in _PROGRAMS or main.startswith(_MAIN_MODULES)
