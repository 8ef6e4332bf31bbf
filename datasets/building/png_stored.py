"""A PNG encoder with uncompressed (stored) deflate blocks.

For random-noise pixels, compression gains nothing (measured in
benchmarks/synthetic_encoding.py) and costs time. Writing stored blocks by hand
also makes the bytes a pure function of the pixels: no zlib version or
compression level can change them, so shards are identical on every machine.
"""

import struct
import zlib

import numpy as np

from imagesets.building import png_chunks

_COLOR_TYPES = {1: 0, 2: 4, 3: 2, 4: 6}  # channels -> grey, grey+alpha, RGB, RGBA
_MAX_STORED_BLOCK = 0xFFFF


def _stored_zlib_stream(raw: bytes) -> bytes:
  """A zlib stream (RFC 1950) made of deflate stored blocks (RFC 1951, BTYPE=00)."""
  out = [b"\x78\x01"]
  for start in range(0, len(raw), _MAX_STORED_BLOCK):
    block = raw[start : start + _MAX_STORED_BLOCK]
    final = start + _MAX_STORED_BLOCK >= len(raw)
    out.append(struct.pack("<BHH", int(final), len(block), len(block) ^ 0xFFFF))
    out.append(block)
  out.append(struct.pack(">I", zlib.adler32(raw)))
  return b"".join(out)


def encode(image: np.ndarray) -> bytes:
  """Encodes a uint8 HxW or HxWxC (C in 1..4) array as an uncompressed PNG."""
  image = np.asarray(image)
  if image.dtype != np.uint8:
    raise ValueError(f"png_stored.encode needs uint8 pixels, got {image.dtype}.")
  if image.ndim == 2:
    image = image[:, :, None]
  if image.ndim != 3 or image.shape[2] not in _COLOR_TYPES or 0 in image.shape:
    raise ValueError(f"png_stored.encode needs an HxWxC image with C in 1..4, got {image.shape}.")
  height, width, channels = image.shape
  rows = image.reshape(height, width * channels)
  filtered = np.concatenate([np.zeros((height, 1), np.uint8), rows], axis=1)  # filter 0 = None
  header = struct.pack(">IIBBBBB", width, height, 8, _COLOR_TYPES[channels], 0, 0, 0)
  return b"".join([
      png_chunks.SIGNATURE,
      png_chunks.chunk(b"IHDR", header),
      png_chunks.chunk(b"IDAT", _stored_zlib_stream(filtered.tobytes())),
      png_chunks.chunk(b"IEND", b""),
  ])
