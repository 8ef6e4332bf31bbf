"""Segmentation masks stored as palette indices: read, check, store as grey PNG.

Datasets like PASCAL VOC ship masks as palette ("P" mode) PNGs: each pixel is a class
index and the palette only says how to colour it. `tf.io.decode_png` expands the
palette and returns colours, not classes (tensorflow#28256). An 8-bit palette PNG and
an 8-bit grey PNG store their pixels identically (one filtered byte per pixel in IDAT),
so we turn one into the other by rewriting the header and dropping the palette and the
other ancillary chunks, without touching the compressed data: every decoder then
returns the indices themselves. This keeps the source's compression (masks are flat
regions that zlib shrinks ~50x), costs no re-compression, and makes the bytes a
function of the source file only, never of a zlib version. Masks of other bit depths
are re-encoded with PIL instead.
"""

import dataclasses
import io
import os
import pathlib

import numpy as np
import PIL.Image

from imagesets.building import png_chunks

# Modes whose pixel values are the indices themselves.
INDEX_MODES = ("P", "L")
_GREY, _PALETTE = 0, 3  # PNG colour types
_KEPT_CHUNKS = (b"IDAT", b"IEND")  # besides IHDR; PLTE, tRNS, gAMA, tEXt, ... are dropped
# The fallback encoder: a fixed level on a fresh image (no source palette or text chunks)
# gives bytes that depend on the indices and on Pillow's zlib build only.
_PNG_OPTIONS = {"format": "PNG", "compress_level": 6, "optimize": False}


@dataclasses.dataclass(frozen=True, eq=False)
class IndexMask:
  indices: np.ndarray  # H x W uint8, as np.array(PIL.Image.open(source))
  png: bytes           # single-channel PNG that decodes to `indices`


def read(path: os.PathLike) -> tuple[IndexMask | None, str | None]:
  """(mask, None), or (None, why the file is not an index mask)."""
  try:
    data = pathlib.Path(path).read_bytes()
    with PIL.Image.open(io.BytesIO(data)) as mask:
      mode = mask.mode
      if mode in INDEX_MODES:
        indices = np.array(mask)  # decodes everything: corrupt data fails here
        return IndexMask(indices, as_grey_png(data) or encode(indices)), None
  except (OSError, ValueError, SyntaxError) as error:  # what PIL raises for broken files
    return None, f"unreadable mask ({error})"
  if mode in ("RGB", "RGBA"):
    return None, (f"colour ({mode}) mask: its pixels are colours, not class indices; "
                  "use the palette-indexed PNG from the original dataset")
  return None, f"mode {mode!r} mask: expected one 8-bit index per pixel (PIL mode P or L)"


def unexpected_values(indices: np.ndarray, allowed: np.ndarray) -> np.ndarray:
  """The sorted distinct values of `indices` that are not in `allowed`."""
  present = np.flatnonzero(np.bincount(indices.ravel(), minlength=256))
  return present[~np.isin(present, allowed)]


def as_grey_png(data: bytes) -> bytes | None:
  """An 8-bit palette or grey PNG as an 8-bit grey PNG with the same IDAT; else None.

  Expects a file that decodes (`read` decodes it first); it only re-frames chunks. A
  copied chunk with a wrong CRC gives None too: PIL does not check IDAT's CRC, libpng
  (`tf.io.decode_png`) refuses it, so such a file is re-encoded from its decoded indices.
  """
  if not data.startswith(png_chunks.SIGNATURE):
    return None
  chunks = [(kind, data[start:end]) for kind, start, end in png_chunks.chunks(data)]
  if not chunks or chunks[0][0] != b"IHDR" or chunks[-1][0] != b"IEND":
    return None
  header = bytearray(chunks[0][1][8:21])
  depth, colour = header[8], header[9]
  if depth != 8 or colour not in (_GREY, _PALETTE):
    return None
  kept = [raw for kind, raw in chunks if kind in _KEPT_CHUNKS]
  if not all(map(png_chunks.crc_matches, kept)):
    return None
  header[9] = _GREY
  # IDAT and IEND are copied whole: same type and data, so their (checked) CRCs stay valid.
  return b"".join([png_chunks.SIGNATURE, png_chunks.chunk(b"IHDR", bytes(header))] + kept)


def encode(indices: np.ndarray) -> bytes:
  """H x W uint8 indices -> single-channel PNG bytes that decode to the same values."""
  indices = np.asarray(indices)
  if indices.dtype != np.uint8 or indices.ndim != 2:
    raise ValueError(f"encode needs an H x W uint8 array, got {indices.dtype} {indices.shape}.")
  out = io.BytesIO()
  PIL.Image.fromarray(indices).save(out, **_PNG_OPTIONS)  # uint8 H x W: mode L
  return out.getvalue()
