"""Segmentation masks stored as palette indices: read, check, re-encode.

Datasets like PASCAL VOC ship masks as palette ("P" mode) PNGs: each pixel is a class
index and the palette only says how to colour it. `tf.io.decode_png` expands the
palette and returns colours, not classes (tensorflow#28256), so we read the indices
with PIL and re-encode them as a single-channel grey PNG, which every decoder returns
as the indices themselves.
"""

import io
import os

import numpy as np
import PIL.Image

# Modes whose pixel values are the indices themselves.
INDEX_MODES = ("P", "L")
# Masks are large flat regions: zlib shrinks them ~50x. A fixed level and a fresh image
# without the source's palette or text chunks make the bytes a function of the indices
# (and of Pillow's zlib build, which a pinned environment fixes).
_PNG_OPTIONS = {"format": "PNG", "compress_level": 9, "optimize": False}


def pascal_palette() -> np.ndarray:
  """The PASCAL VOC colormap, (256, 3) uint8: index 0 black, 1 dark red, ... 255 cream."""
  index = np.arange(256)
  palette = np.zeros((256, 3), np.uint8)
  for bit in range(8):
    for channel in range(3):
      palette[:, channel] |= (((index >> (3 * bit + channel)) & 1) << (7 - bit)).astype(np.uint8)
  return palette


def read_indices(path: os.PathLike) -> tuple[np.ndarray | None, str | None]:
  """(H x W uint8 indices, None) or (None, why the file is not an index mask)."""
  try:
    with PIL.Image.open(path) as mask:
      mode = mask.mode
      if mode in INDEX_MODES:
        return np.array(mask), None
  except (OSError, ValueError) as error:  # PIL's UnidentifiedImageError is an OSError
    return None, f"unreadable mask ({error})"
  if mode in ("RGB", "RGBA"):
    return None, (f"colour ({mode}) mask: its pixels are colours, not class indices; "
                  "use the palette-indexed PNG from the original dataset")
  return None, f"mode {mode!r} mask: expected one 8-bit index per pixel (PIL mode P or L)"


def unexpected_values(indices: np.ndarray, allowed: np.ndarray) -> np.ndarray:
  """The sorted distinct values of `indices` that are not in `allowed`."""
  present = np.flatnonzero(np.bincount(indices.ravel(), minlength=256))
  return present[~np.isin(present, allowed)]


def encode(indices: np.ndarray) -> bytes:
  """H x W uint8 indices -> single-channel PNG bytes that decode to the same values."""
  indices = np.asarray(indices)
  if indices.dtype != np.uint8 or indices.ndim != 2:
    raise ValueError(f"encode needs an H x W uint8 array, got {indices.dtype} {indices.shape}.")
  out = io.BytesIO()
  PIL.Image.fromarray(indices).save(out, **_PNG_OPTIONS)  # uint8 H x W: mode L
  return out.getvalue()
