"""Text from files and buckets, made safe to print: a light module (no numpy, PIL or scipy),
for commands that show names and nothing else (`imagesets list`)."""

# C0 and C1 controls and DEL, shown escaped: a name from a report, a version or a bucket
# must not drive the terminal (titles, clearing the screen, colours).
_CONTROLS = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7f, 0xa0)]}


def printable(text) -> str:
  """`text` with control characters escaped (\\xNN), for a terminal."""
  text = str(text)
  # (controls are not printable: most names need no translation, which costs a
  # dictionary lookup a character)
  return text if text.isprintable() else text.translate(_CONTROLS)
