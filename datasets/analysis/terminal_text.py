"""Text from files and buckets, made safe to print: a light module (no numpy, PIL or scipy),
for commands that show names and nothing else (`imagesets list`)."""

# What Python does not call printable is shown escaped: C0 and C1 controls and DEL (a name
# from a report, a version or a bucket must not drive the terminal: titles, clearing the
# screen, colours), and format and separator characters, whose bidirectional overrides
# (U+202E) and zero-width marks make a shown name read as another.


def printable(text) -> str:
  """`text` with every character Python does not call printable escaped (\\xNN,
  \\uNNNN, \\UNNNNNNNN) but joiners and spaces (`_KEPT`), for a terminal."""
  text = str(text)
  # (most names need no escaping: one test of the whole text)
  return text if text.isprintable() else "".join(
      c if c.isprintable() or c in _KEPT or (c.isspace() and c not in _BREAKS and c > "\x7f")
      else _escaped(ord(c)) for c in text)


# Kept although Python does not call them printable: the zero-width non-joiner and joiner
# (Persian and Indic words, emoji sequences) and the spaces of other scripts; not the
# line and paragraph separators, nor NEL (a C1 control).
_KEPT = frozenset("\u200c\u200d")
_BREAKS = frozenset("\x85\u2028\u2029")


def _escaped(code: int) -> str:
  return (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000
          else f"\\U{code:08x}")
