"""Progress bars that suit a log: when stderr is not a terminal (CI logs, `nohup`, a file),
a bar prints one plain line every few seconds instead of redrawing itself with carriage
returns and cursor moves (which a log shows as one huge line of garbage).

`LineStream` wraps a stream for tqdm (TFDS's bars and ours); bars of our own get one
from `for_bars()`. TFDS's bars write to `sys.stderr` and take no stream: for them,
`log_friendly_stderr()` puts a LineStream in place of `sys.stderr` for a block (a build),
only when stderr is not a terminal, and only in a command-line program's own process, on
its main thread (`tfds build`, `imagesets build`): in a training script or a notebook,
`sys.stderr` is the user's, and TFDS's bars there look as they do for any other dataset.
Lines without a carriage return pass through unchanged.
"""

import contextlib
import re
import sys
import threading
import time

from imagesets import cli_process

INTERVAL = 5.0  # seconds between two lines of one bar

# tqdm's cursor moves for nested bars ("\x1b[A" up) and any other CSI sequence.
_ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class LineStream:
  """A file for tqdm: each bar's state, at most one line per `interval` seconds."""

  def __init__(self, stream, interval: float = INTERVAL, clock=time.monotonic):
    self._stream, self._interval, self._clock = stream, interval, clock
    self._last_line: dict[str, float] = {}  # bar (its text before ":") -> time of its last line
    self._pending = ""  # the latest state not printed yet

  def write(self, text: str) -> int:
    text = _ESCAPES.sub("", text)
    if not text.strip():  # a bar's closing newline, or tqdm moving between nested bars
      if "\n" in text and self._pending:
        self._emit(self._pending)
        self._pending = ""
      return len(text)
    if "\r" not in text and not self._pending:
      return self._stream.write(text)
    for part in text.split("\r"):  # tqdm redraws a bar after "\r"
      *ended, current = part.split("\n")
      for line in ended:  # a newline ends a bar (tqdm's close): its last state is printed
        state = line.strip() or self._pending
        if state:
          self._emit(state)
        self._pending = ""
      if current.strip():
        self._update(current.strip())
    return len(text)

  def _update(self, state: str) -> None:
    bar = state.split(":", 1)[0]
    if self._pending and self._pending.split(":", 1)[0] != bar:
      # another bar draws: the one before it has ended (a bar closed without a newline),
      # and its last state is printed before it is lost
      self._emit(self._pending)
      self._pending = ""
    now = self._clock()
    if now - self._last_line.get(bar, -self._interval) >= self._interval:
      self._emit(state)
      self._pending = ""
    else:
      self._pending = state

  def _emit(self, state: str) -> None:
    self._last_line[state.split(":", 1)[0]] = self._clock()
    self._stream.write(state + "\n")

  def finish(self) -> None:
    """Prints the last state not printed yet (bars closed without a newline)."""
    if self._pending:
      self._emit(self._pending)
      self._pending = ""
    self._stream.flush()

  def flush(self) -> None:
    self._stream.flush()

  def isatty(self) -> bool:
    return False

  def fileno(self) -> int:
    return self._stream.fileno()

  def __getattr__(self, name):
    return getattr(self._stream, name)


def for_bars(stream=None):
  """The stream a progress bar should write to: `stream` (default stderr) itself on a
  terminal, a LineStream over it otherwise."""
  stream = stream or sys.stderr
  return stream if _is_terminal(stream) else LineStream(stream)


def _is_terminal(stream) -> bool:
  try:
    return stream.isatty()
  except (AttributeError, ValueError):
    return False


@contextlib.contextmanager
def log_friendly_stderr():
  """Inside the block, bars that write to sys.stderr print lines if it is not a terminal;
  only in a command-line process, on its main thread (see the module's doc)."""
  if (not cli_process.is_cli_process()
      or threading.current_thread() is not threading.main_thread()
      or _is_terminal(sys.stderr) or isinstance(sys.stderr, LineStream)):
    yield
    return
  original = sys.stderr
  sys.stderr = LineStream(original)
  try:
    yield
  finally:
    sys.stderr.finish()
    sys.stderr = original
