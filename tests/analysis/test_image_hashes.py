"""image_hashes: one fingerprint per image; the same pixels give the same digest whatever the
bytes; copies are a few bits apart, distinct photos many."""

import io
import itertools

import numpy as np
import PIL.Image
import pytest

from imagesets.analysis import duplicates
from imagesets.analysis import image_hashes
from imagesets_testing import photo_crops
from imagesets_testing import planted_copies
from imagesets_testing import sample_images


def _photo(seed):
  return sample_images.photo(180 + seed % 7 * 10, 240 + seed % 5 * 12, seed=seed)


def test_same_pixels_other_bytes_give_the_same_digest_and_facts():
  pixels = _photo(1)
  original = image_hashes.of_bytes(planted_copies.original(pixels))
  with_exif = image_hashes.of_bytes(planted_copies.exact(pixels))
  as_png = image_hashes.of_bytes(planted_copies.png(pixels))
  assert planted_copies.original(pixels) != planted_copies.exact(pixels)
  assert original.pixels == with_exif.pixels
  # A PNG of the JPEG's pixels: decoded in full, not at the JPEG's small scale, so a near
  # copy for the fingerprint; `pixel_digest` (full decodes) still calls them the same.
  assert as_png.pixels != original.pixels
  assert (image_hashes.pixel_digest(planted_copies.png(pixels))
          == image_hashes.pixel_digest(planted_copies.original(pixels)))
  assert (as_png.format, original.format) == ("png", "jpeg")
  assert (original.height, original.width) == pixels.shape[:2]
  assert image_hashes.of_bytes(planted_copies.jpeg_q60(pixels)).pixels != original.pixels


def test_copies_are_within_the_threshold_and_distinct_photos_far_beyond_it():
  photos = [_photo(seed) for seed in range(12)]
  hashes = [image_hashes.of_bytes(planted_copies.original(p)).perceptual for p in photos]
  for kind, make in planted_copies.KINDS.items():
    for pixels, original in zip(photos, hashes):
      copy = image_hashes.of_bytes(make(pixels)).perceptual
      assert image_hashes.distance(copy, original) <= duplicates.THRESHOLD, kind
  distinct = [image_hashes.distance(a, b) for a, b in itertools.combinations(hashes, 2)]
  assert min(distinct) > duplicates.THRESHOLD + 4
  assert 50 < np.median(distinct) < 80  # of 128 bits: about half differ


def test_a_jpeg_is_fingerprinted_at_a_small_decode_with_its_full_size():
  data = sample_images.jpeg(375, 500, seed=2)
  small, fmt, _, size = image_hashes.decode_small(data)
  assert (small.shape, fmt, size) == ((94, 125, 3), "jpeg", (375, 500))  # DCT scaled 1/4
  fingerprint = image_hashes.of_bytes(data)
  assert (fingerprint.height, fingerprint.width) == (375, 500)
  assert image_hashes.decode_small(sample_images.jpeg(60, 80, seed=2))[0].shape == (60, 80, 3)
  # The same small pixels at another size are another picture.
  assert fingerprint.pixels != image_hashes._digest(small, b"", (376, 500))


def test_fingerprints_round_trip_through_json():
  fingerprint = image_hashes.of_bytes(sample_images.jpeg(30, 40, seed=3))
  assert image_hashes.Fingerprint.from_json(fingerprint.to_json()) == fingerprint


def _png(array: np.ndarray) -> bytes:
  out = io.BytesIO()
  PIL.Image.fromarray(array).save(out, "PNG")
  return out.getvalue()


def test_alpha_and_deep_values_tell_pictures_apart_opaque_pictures_keep_one_digest():
  # Converting to 8-bit RGB alone called an opaque and a transparent PNG, or 16-bit
  # greys of 300 and 60000, the same pixels (review-27b finding 5).
  rgb = np.random.default_rng(0).integers(0, 256, (40, 30, 3), np.uint8)
  opaque = np.dstack([rgb, np.full((40, 30), 255, np.uint8)])
  clear = np.dstack([rgb, np.zeros((40, 30), np.uint8)])
  assert image_hashes.pixel_digest(_png(opaque)) != image_hashes.pixel_digest(_png(clear))
  assert image_hashes.pixel_digest(_png(opaque)) == image_hashes.pixel_digest(_png(rgb))
  low, high = (np.full((20, 20), v, np.uint16) for v in (300, 60000))
  assert PIL.Image.open(io.BytesIO(_png(low))).mode.startswith("I")
  assert image_hashes.pixel_digest(_png(low)) != image_hashes.pixel_digest(_png(high))


def test_exact_copies_of_recent_bytes_are_not_decoded_again(monkeypatch):
  """A fingerprint is a function of the bytes: the same bytes again (a folder's copies of a
  file) are served from the last ones seen, without a decode; other bytes of the same
  pixels are decoded (their fingerprint is the same but their bytes say nothing of it)."""
  decodes = []
  monkeypatch.setattr(image_hashes, "decode_small", lambda data, _d=image_hashes.decode_small:
                      decodes.append(len(data)) or _d(data))
  monkeypatch.setattr(image_hashes, "_SAME_BYTES_KEPT", 3)
  photos = [p.pixels for p in photo_crops.pictures(5, seed=7, share_in_bursts=0)]
  files = [planted_copies.original(p) for p in photos]
  first = [image_hashes.of_bytes(data) for data in files[:3]]
  assert [image_hashes.of_bytes(data) for data in files[:3]] == first and len(decodes) == 3
  assert image_hashes.of_bytes(planted_copies.exact(photos[0])).pixels == first[0].pixels
  assert len(decodes) == 4 and len(image_hashes._SAME_BYTES) == 3  # (bounded: oldest out)
  image_hashes.of_bytes(files[1])  # (the oldest, files[0], went)
  assert len(decodes) == 4
  assert image_hashes.of_bytes(files[0]) == first[0] and len(decodes) == 5
  with pytest.raises(ValueError):
    image_hashes.of_bytes(files[3][:200])  # (bad bytes: an error each time, nothing kept)
  assert len(image_hashes._SAME_BYTES) == 3 and len(decodes) == 6
  # PIL's limit on a picture's pixels is part of the key: a lower one refuses, not serves
  png = planted_copies.png(photos[4])
  image_hashes.of_bytes(png)
  monkeypatch.setattr(PIL.Image, "MAX_IMAGE_PIXELS", 10)
  with pytest.raises(PIL.Image.DecompressionBombError):
    image_hashes.of_bytes(png)
