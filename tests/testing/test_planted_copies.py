"""planted_copies: each kind of copy is what its name says."""

import io

import numpy as np
import PIL.Image

from imagesets_testing import planted_copies
from imagesets_testing import sample_images


def _decoded(data: bytes) -> np.ndarray:
  return np.asarray(PIL.Image.open(io.BytesIO(data)).convert("RGB"))


def test_every_kind():
  pixels = sample_images.photo(120, 160, seed=5)
  original = _decoded(planted_copies.original(pixels))
  made = {kind: make(pixels) for kind, make in planted_copies.KINDS.items()}
  assert made["exact"] != planted_copies.original(pixels)
  assert np.array_equal(_decoded(made["exact"]), original)       # other bytes, same pixels
  assert made["png"].startswith(b"\x89PNG") and np.array_equal(_decoded(made["png"]), original)
  assert not np.array_equal(_decoded(made["jpeg_q60"]), original)
  assert _decoded(made["resized_50"]).shape == (60, 80, 3)
  assert _decoded(made["crop_5"]).shape == (114, 152, 3)          # 5 % of each side's length
