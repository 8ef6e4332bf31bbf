"""Text from files and buckets, made safe to print: a light module (no numpy, PIL or scipy),
for commands that show names and nothing else (`imagesets list`)."""

# What Python does not call printable is shown escaped: C0 and C1 controls and DEL (a name
# from a report, a version or a bucket must not drive the terminal: titles, clearing the
# screen, colours), and format and separator characters, whose bidirectional overrides
# (U+202E) and zero-width marks make a shown name read as another.


def printable(text) -> str:
  """`text` with every character Python does not call printable escaped (\\xNN,
  \\uNNNN, \\UNNNNNNNN), for a terminal."""
  text = str(text)
  # (most names need no escaping: one test of the whole text)
  return text if text.isprintable() else "".join(
      c if c.isprintable() else _escaped(ord(c)) for c in text)


def _escaped(code: int) -> str:
  return (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000
          else f"\\U{code:08x}")
