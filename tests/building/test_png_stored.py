import io

import numpy as np
import PIL.Image
import pytest
import tensorflow as tf

from imagesets.building import png_stored


@pytest.mark.parametrize("shape", [(224, 224, 3), (1, 1, 3), (300, 70, 4), (17, 33), (5, 9, 1), (400, 500, 3)])
def test_decoders_return_the_exact_pixels(shape):
  pixels = np.random.default_rng(sum(shape)).integers(0, 256, shape, dtype=np.uint8)
  encoded = png_stored.encode(pixels)
  expected = pixels if pixels.ndim == 3 else pixels[:, :, None]
  np.testing.assert_array_equal(tf.io.decode_png(encoded).numpy(), expected)
  np.testing.assert_array_equal(np.array(PIL.Image.open(io.BytesIO(encoded))).reshape(expected.shape), expected)


def test_size_is_raw_pixels_plus_small_overhead():
  pixels = np.zeros((224, 224, 3), np.uint8)
  # One filter byte per row, 5 bytes per 64 KiB stored block, fixed chunk framing.
  assert 224 * 224 * 3 < len(png_stored.encode(pixels)) < 224 * 224 * 3 + 224 + 400


def test_bytes_are_a_function_of_pixels_only():
  pixels = np.arange(64 * 48 * 3, dtype=np.uint32).astype(np.uint8).reshape(64, 48, 3)
  assert png_stored.encode(pixels) == png_stored.encode(pixels.copy())
  assert png_stored.encode(pixels) != png_stored.encode(pixels[::-1])


@pytest.mark.parametrize("bad", [np.zeros((4, 4, 3), np.float32), np.zeros((4, 4, 5), np.uint8), np.zeros((0, 4, 3), np.uint8)])
def test_rejects_what_png_cannot_hold(bad):
  with pytest.raises(ValueError, match="png_stored.encode"):
    png_stored.encode(bad)
