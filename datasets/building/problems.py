"""One error that lists every problem in a source, found in one pass.

Builders collect problems while they scan their input and raise once at the end,
so a user fixes all bad files in one go instead of one per build.
"""

import dataclasses
import sys
from typing import Iterable


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
  """If `error` ends the program (e.g. under the `tfds` CLI), print it as `error: ...`
  instead of a traceback; any other exception keeps its traceback. Returns `error`."""
  previous = sys.excepthook

  def hook(kind, value, traceback):
    if value is error:
      print(f"error: {error}", file=sys.stderr)
    else:
      previous(kind, value, traceback)

  sys.excepthook = hook
  return error
