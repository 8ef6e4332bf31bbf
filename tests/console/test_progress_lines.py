"""Progress bars in a log: one plain line every few seconds, never carriage returns."""

import io
import sys

from tqdm import tqdm

from imagesets.console import progress_lines


class Clock:
  def __init__(self):
    self.now = 0.0

  def __call__(self):
    return self.now


def test_a_bar_prints_a_line_per_interval_and_its_last_state():
  out, clock = io.StringIO(), Clock()
  stream = progress_lines.LineStream(out, interval=5, clock=clock)
  bar = tqdm(total=100, desc="copy", file=stream, mininterval=0, miniters=1, ncols=60)
  for step in range(100):
    clock.now = step * 0.5  # 50 s in all: a line at 0, 5, ..., 45 s and the final one
    bar.update(1)
  bar.close()
  stream.write("a log line\n")
  lines = out.getvalue().splitlines()
  assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()
  assert all(line.startswith("copy:") for line in lines[:-1]) and lines[-1] == "a log line"
  assert 9 <= len(lines) - 1 <= 12, lines
  assert "100/100" in lines[-2]


def test_a_bar_closed_without_a_newline_keeps_its_last_state_when_the_next_one_draws():
  # (leave=False bars one after another in one block: a build's fingerprints, then its
  # page's thumbnails)
  out, clock = io.StringIO(), Clock()
  stream = progress_lines.LineStream(out, interval=5, clock=clock)
  for desc in ("fingerprinting", "thumbnails"):
    with tqdm(total=16, desc=desc, file=stream, leave=False, ncols=60) as bar:
      for _ in range(16):
        bar.update(1)  # (within tqdm's display interval: only the refresh draws the end)
      bar.refresh()
  stream.finish()
  lines = out.getvalue().splitlines()
  assert [line.split(":")[0] for line in lines] == ["fingerprinting"] * 2 + ["thumbnails"] * 2
  assert "0/16" in lines[0] and "16/16" in lines[1], lines
  assert "0/16" in lines[2] and "16/16" in lines[3], lines


def test_two_bars_drawing_in_turn_each_print_a_line_per_interval():
  # (a download's bar beside its extraction's, a build's beside TFDS's)
  out, clock = io.StringIO(), Clock()
  stream = progress_lines.LineStream(out, interval=5, clock=clock)
  bars = [tqdm(total=60, desc=name, file=stream, mininterval=0, miniters=1, ncols=60)
          for name in ("download", "extract")]
  for step in range(60):
    clock.now = step * 0.5  # 30 s: a line of each bar at 0, 5, ..., 25 s
    for bar in bars:
      bar.update(1)
  for bar in bars:
    bar.close()
  stream.finish()
  lines = out.getvalue().splitlines()
  for name in ("download", "extract"):
    own = [line for line in lines if line.startswith(name + ":")]
    assert 6 <= len(own) <= 9, lines
    assert "60/60" in own[-1], own


def test_on_a_terminal_bars_are_left_alone():
  class Terminal(io.StringIO):
    def isatty(self):
      return True
  terminal = Terminal()
  assert progress_lines.for_bars(terminal) is terminal
  assert isinstance(progress_lines.for_bars(io.StringIO()), progress_lines.LineStream)


def test_a_build_outside_a_command_line_program_leaves_sys_stderr_alone(monkeypatch):
  """In a training script or a notebook, sys.stderr is the user's, also during a build."""
  stream = io.StringIO()  # not a terminal: a command-line program would get lines
  monkeypatch.setattr(sys, "stderr", stream)
  with progress_lines.log_friendly_stderr():
    assert sys.stderr is stream
  monkeypatch.setattr(sys, "argv", ["/venv/bin/tfds", "build"])
  with progress_lines.log_friendly_stderr():
    assert isinstance(sys.stderr, progress_lines.LineStream)
  assert sys.stderr is stream
