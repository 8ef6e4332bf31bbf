"""image_hashes: one fingerprint per image; the same pixels give the same digest whatever the
bytes; copies are a few bits apart, distinct photos many."""

import itertools

import numpy as np

from imagesets.verifying import duplicates
from imagesets.verifying import image_hashes
from imagesets_testing import planted_copies
from imagesets_testing import sample_images


def _photo(seed):
  return sample_images.photo(180 + seed % 7 * 10, 240 + seed % 5 * 12, seed=seed)


def test_same_pixels_other_bytes_give_the_same_digest_and_facts():
  pixels = _photo(1)
  original, with_exif, as_png = (
      image_hashes.of_bytes(make(pixels), with_pixels=True)
      for make in (planted_copies.original, planted_copies.exact, planted_copies.png))
  assert len({original.content, with_exif.content, as_png.content}) == 3
  assert original.pixels == with_exif.pixels == as_png.pixels
  assert original.pixels == image_hashes.pixel_digest(planted_copies.png(pixels))
  assert (as_png.format, original.format) == ("png", "jpeg")
  assert (original.height, original.width) == (as_png.height, as_png.width) == pixels.shape[:2]
  assert image_hashes.pixel_digest(planted_copies.jpeg_q60(pixels)) != original.pixels
  # (without with_pixels no full decode is made, and no digest given)
  assert image_hashes.of_bytes(planted_copies.original(pixels)).pixels == ""


def test_same_pixels_give_hashes_a_few_bits_apart_at_most():
  """Exact duplicates are told by their pixels only within the groups the hashes propose
  (duplicates.find): the reduced JPEG decode and a PNG's full one must stay close."""
  for seed in range(6):
    pixels = _photo(seed)
    original, with_exif, as_png = (
        image_hashes.of_bytes(make(pixels))
        for make in (planted_copies.original, planted_copies.exact, planted_copies.png))
    assert original.perceptual == with_exif.perceptual
    assert image_hashes.distance(original.perceptual, as_png.perceptual) <= 8


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


def test_fingerprints_round_trip_through_json():
  for with_pixels in (False, True):
    fingerprint = image_hashes.of_bytes(sample_images.jpeg(30, 40, seed=3),
                                        with_pixels=with_pixels)
    assert image_hashes.Fingerprint.from_json(fingerprint.to_json()) == fingerprint


def test_a_jpeg_is_decoded_at_the_smallest_scale_that_keeps_128_pixels(monkeypatch):
  """The fingerprint's cost: no full decode of a JPEG big enough to scale (DCT domain)."""
  decoded = []
  decode = image_hashes.simplejpeg.decode_jpeg
  monkeypatch.setattr(image_hashes.simplejpeg, "decode_jpeg",
                      lambda *args, **kwargs: decoded.append(decode(*args, **kwargs).shape)
                      or decode(*args, **kwargs))
  for height, width in ((1100, 1300), (600, 800), (300, 500), (200, 240)):
    fingerprint = image_hashes.of_bytes(sample_images.jpeg(height, width, seed=5))
    assert (fingerprint.height, fingerprint.width, fingerprint.pixels) == (height, width, "")
  assert decoded == [(138, 163, 1), (150, 200, 1), (150, 250, 1), (200, 240, 1)]
