"""sample_images: deterministic photo-like pictures with a checkable "up"."""

import io

import numpy as np
import PIL.Image

from imagesets_testing import sample_images


def test_photos_are_seeded_and_red_on_top():
  a = sample_images.photo(60, 80, seed=3)
  assert a.shape == (60, 80, 3) and a.dtype == np.uint8
  np.testing.assert_array_equal(a, sample_images.photo(60, 80, seed=3))
  assert not np.array_equal(a, sample_images.photo(60, 80, seed=4))
  top, bottom = a[:10].astype(int), a[-10:].astype(int)
  assert (top[..., 0] - top[..., 2]).mean() > (bottom[..., 0] - bottom[..., 2]).mean()


def test_jpegs_compress_like_photos_not_noise():
  data = sample_images.jpeg(375, 500, seed=1)
  assert 20_000 < len(data) < 120_000  # flower_photos averages ~62 KB
  assert PIL.Image.open(io.BytesIO(data)).size == (500, 375)


def test_sideways_jpeg_carries_orientation_6():
  upright = sample_images.photo(40, 30)
  image = PIL.Image.open(io.BytesIO(sample_images.sideways_jpeg(upright)))
  assert image.size == (40, 30)  # stored landscape
  assert image.getexif()[sample_images.EXIF_ORIENTATION] == 6
