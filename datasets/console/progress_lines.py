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

from imagesets.console import cli_process

INTERVAL = 5.0  # seconds between two lines of one bar

# tqdm's cursor moves for nested bars ("\x1b[A" up) and any other CSI sequence.
_ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class LineStream:
  """A file for tqdm: each bar's state, at most one line per `interval` seconds a bar."""

  def __init__(self, stream, interval: float = INTERVAL, clock=time.monotonic):
    self._stream, self._interval, self._clock = stream, interval, clock
    self._last_line: dict[str, float] = {}  # bar (its text before ":") -> time of its last line
    self._pending: dict[str, str] = {}  # bar -> its latest state not printed yet
    self._last_drawn = ""   # the bar whose state came last
    self._newline = False   # a bare newline came last (a bar's close, or a move)

  def write(self, text: str) -> int:
    text = _ESCAPES.sub("", text)
    if not text.strip():
      # A bar's closing newline, or tqdm moving down to draw a bar at another position:
      # which one is known from what comes next (another bar's state: a move).
      self._newline = self._newline or "\n" in text
      return len(text)
    if self._newline:
      self._newline = False
      drawn = text.split("\r")[-1].split("\n")[0].strip()
      if not ("\r" in text and drawn and _bar(drawn) != self._last_drawn):
        self._print_pending()
    if "\r" not in text:  # a plain line: after the bars' states it follows
      self._print_pending()
      return self._stream.write(text)
    for part in text.split("\r"):  # tqdm redraws a bar after "\r"
      *ended, current = part.split("\n")
      for line in ended:  # a newline ends a bar (tqdm's close): its last state is printed
        if line.strip():
          self._pending.pop(_bar(line.strip()), None)
          self._emit(line.strip())
        else:
          self._print_pending()
      if current.strip():
        self._update(current.strip())
    return len(text)

  def _update(self, state: str) -> None:
    bar = self._last_drawn = _bar(state)
    if bar not in self._last_line:
      # a new bar: those before it may have ended without a newline (leave=False), and
      # their last states are printed before this one's first
      self._print_pending()
    now = self._clock()
    if now - self._last_line.get(bar, -self._interval) >= self._interval:
      self._pending.pop(bar, None)
      self._emit(state)
    else:
      self._pending[bar] = state

  def _print_pending(self) -> None:
    for state in list(self._pending.values()):
      self._emit(state)
    self._pending.clear()

  def _emit(self, state: str) -> None:
    self._last_line[_bar(state)] = self._clock()
    self._stream.write(state + "\n")

  def finish(self) -> None:
    """Prints the last states not printed yet (bars closed without a newline)."""
    self._newline = False
    self._print_pending()
    self._stream.flush()

  def flush(self) -> None:
    self._stream.flush()

  def isatty(self) -> bool:
    return False

  def fileno(self) -> int:
    return self._stream.fileno()

  def __getattr__(self, name):
    return getattr(self._stream, name)


def _bar(state: str) -> str:
  """Which bar a state is of: its text before the first ":" (tqdm's description)."""
  return state.split(":", 1)[0]


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
