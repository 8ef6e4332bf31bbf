"""terminal_text: names shown escaped, from a module light enough for `imagesets list`."""

import subprocess
import sys

from imagesets.analysis import duplicates
from imagesets.analysis import terminal_text


def test_controls_are_escaped_and_other_text_is_kept():
  assert terminal_text.printable("ev\x1b[41mil\x07 \u0085é") == "ev\\x1b[41mil\\x07 \\x85é"
  assert terminal_text.printable(12) == "12" and duplicates.printable is terminal_text.printable


def test_it_imports_nothing_heavy():
  loaded = subprocess.run(
      [sys.executable, "-c", "import sys; from imagesets.analysis import terminal_text; "
       "print(sorted(m for m in ('PIL', 'scipy', 'imagehash', 'tensorflow') if m in sys.modules))"],
      capture_output=True, text=True, check=True).stdout.strip()
  assert loaded == "[]"
