"""terminal_text: names shown escaped, from a module light enough for `imagesets list`."""

import subprocess
import sys

from imagesets.analysis import duplicates
from imagesets.analysis import terminal_text


def test_controls_are_escaped_and_other_text_is_kept():
  assert terminal_text.printable("ev\x1b[41mil\x07 \u0085é") == "ev\\x1b[41mil\\x07 \\x85é"
  assert terminal_text.printable(12) == "12" and duplicates.printable is terminal_text.printable


def test_bidirectional_overrides_and_zero_width_marks_are_escaped():
  """A name must not read as another: "cat\u202egpj.exe" shows as "catexe.jpg" on a
  terminal that honours the override."""
  assert terminal_text.printable("cat\u202egpj.exe") == "cat\\u202egpj.exe"
  assert terminal_text.printable("a\u200bb\u2066c\U000e0001") == (
      "a\\u200bb\\u2066c\\U000e0001")
  assert terminal_text.printable("été 夏.jpg") == "été 夏.jpg"
  # (a Persian word's zero-width non-joiner, an emoji's joiner, other scripts' spaces: kept)
  for name in ("می\u200cخواهم.jpg", "👩\u200d💻.png", "a\u00a0b\u3000c.jpg"):
    assert terminal_text.printable(name) == name
  assert terminal_text.printable("a\u2028b\x85c") == "a\\u2028b\\x85c"


def test_it_imports_nothing_beyond_the_package():
  """Only itself (and its folder) beyond what `import imagesets` loads: not the grouping's
  scipy and imagehash, ~250 modules (`duplicates`)."""
  added = subprocess.run(
      [sys.executable, "-c", "import sys, imagesets; before = set(sys.modules); "
       "from imagesets.analysis import terminal_text; "
       "print(sorted(set(sys.modules) - before))"],
      capture_output=True, text=True, check=True).stdout.strip()
  assert added in ("['imagesets.analysis', 'imagesets.analysis.terminal_text']",
                   "['imagesets.analysis.terminal_text']")
