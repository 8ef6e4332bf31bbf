"""Progress bars in a log: one plain line every few seconds, never carriage returns."""

import io
import subprocess
import sys

from tqdm import tqdm

from conftest import REPO
from imagesets import progress_lines


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


def test_a_build_whose_stderr_is_a_pipe_logs_lines(tmp_path):
  script = (f"import imagesets, tensorflow_datasets as tfds\n"
            f"tfds.builder('synthetic_images/tiny', data_dir={str(tmp_path)!r}).download_and_prepare()\n")
  result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
  assert result.returncode == 0, result.stderr
  assert "\r" not in result.stderr and "\x1b[A" not in result.stderr, result.stderr[-2000:]
  assert "Generating splits...:" in result.stderr
  assert "" not in result.stderr.splitlines()  # no blank lines between nested bars


def test_on_a_terminal_bars_are_left_alone():
  class Terminal(io.StringIO):
    def isatty(self):
      return True
  terminal = Terminal()
  assert progress_lines.for_bars(terminal) is terminal
  assert isinstance(progress_lines.for_bars(io.StringIO()), progress_lines.LineStream)
