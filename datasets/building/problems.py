"""One error that lists every problem in a source, found in one pass.

Builders collect problems while they scan their input and raise once at the end,
so a user fixes all bad files in one go instead of one per build.
"""

import dataclasses
import sys
import threading
from typing import Iterable

import imagesets.console.cli_process as cli_process


@dataclasses.dataclass(frozen=True, order=True)
class Problem:
  where: str   # what the user can find: a path relative to the source, an image id, ...
  reason: str


class InvalidSourceError(ValueError):
  """The source data has problems; `.problems` lists every one of them."""

  def __init__(self, problems: Iterable[Problem], *, source: str, fix: str):
    self.problems = sorted(problems)
    self.source = source
    lines = "\n".join(f"  {p.where}: {p.reason}" for p in self.problems)
    super().__init__(
        f"{len(self.problems)} problem(s) in {source}:\n{lines}\nFix: {fix}")


def raise_if_any(problems: Iterable[Problem], *, source: str, fix: str) -> None:
  problems = list(problems)
  if problems:
    raise InvalidSourceError(problems, source=source, fix=fix)


def one_line_if_uncaught(error: BaseException) -> BaseException:
  """Marks `error` as one the user fixes from its message: if it ends a command-line
  program (`tfds build`, ours), it prints as one `error: ...` line instead of a traceback;
  any other exception keeps its traceback. Returns `error`.

  The hook that prints it is installed once, and only in a command-line process
  (`cli_process`): in a training script or a test runner, sys.excepthook stays the user's.
  It keeps no error alive (it looks at a mark on the exception it is given)."""
  error.one_line_if_uncaught = True
  if cli_process.is_cli_process():
    _install_hook()
  return error


_hook_lock = threading.Lock()
_hook_installed = False


def _install_hook() -> None:
  global _hook_installed
  with _hook_lock:
    if _hook_installed:
      return
    previous = sys.excepthook

    def hook(kind, value, traceback):
      if getattr(value, "one_line_if_uncaught", False):
        print(f"error: {value}", file=sys.stderr)
      else:
        previous(kind, value, traceback)

    sys.excepthook = hook
    _hook_installed = True
