"""image_checks: every stored image decodes with tf.io.decode_image as upright RGB of the
recorded shape; good files pass byte-identical; bad files are refused with a reason, and
refused exactly when TensorFlow cannot decode them."""

import io

import numpy as np
import PIL.Image
import PIL.ImageOps
import pytest
import tensorflow as tf

from imagesets.building import image_checks
from imagesets_testing import sample_images

H, W = 48, 64
UPRIGHT = sample_images.photo(H, W, seed=1)


def decoded(stored: bytes, facts: image_checks.ImageFacts) -> np.ndarray:
  """The contract: tf.io.decode_image gives uint8 RGB of the recorded shape."""
  pixels = tf.io.decode_image(stored, expand_animations=False)
  assert pixels.dtype == tf.uint8
  assert pixels.shape == (facts.height, facts.width, 3)
  assert facts.format == {b"\xff\xd8": "jpeg", b"\x89P": "png"}[stored[:2]]
  return pixels.numpy().astype(np.int32)


def mean_error(a, b) -> float:
  return float(np.abs(np.asarray(a, np.int32) - np.asarray(b, np.int32)).mean())


@pytest.mark.parametrize("source", [
    sample_images.jpeg(H, W, seed=2),
    sample_images.encode(UPRIGHT, "JPEG", quality=75, progressive=True),
    sample_images.encode(UPRIGHT, "JPEG", orientation=1),  # upright already
    sample_images.encode(UPRIGHT, "PNG"),
], ids=["jpeg", "progressive-jpeg", "exif-orientation-1", "rgb-png"])
def test_good_files_pass_through_byte_identical(source):
  stored, facts = image_checks.prepare(source)
  assert stored is source and facts.conversion is None
  decoded(stored, facts)
  assert (facts.height, facts.width) == (H, W)


def test_grayscale_jpeg_becomes_rgb_jpeg_of_the_same_grey():
  grey = UPRIGHT[..., 1]
  stored, facts = image_checks.prepare(sample_images.encode(grey, "JPEG", quality=90))
  assert "L JPEG" in facts.conversion
  pixels = decoded(stored, facts)
  assert mean_error(pixels, np.dstack([grey] * 3)) < 3
  assert np.abs(pixels[..., 0] - pixels[..., 2]).max() <= 2  # still grey


def test_cmyk_jpeg_becomes_rgb_jpeg():
  stored, facts = image_checks.prepare(sample_images.cmyk_jpeg(UPRIGHT))
  assert "CMYK JPEG" in facts.conversion and facts.format == "jpeg"
  assert mean_error(decoded(stored, facts), UPRIGHT) < 6


@pytest.mark.parametrize("orientation", [3, 6])
def test_exif_rotated_photo_is_stored_upright(orientation):
  if orientation == 6:
    source = sample_images.sideways_jpeg(UPRIGHT)
  else:  # 3 = upside down
    source = sample_images.encode(UPRIGHT[::-1, ::-1], "JPEG", orientation=3, quality=95)
  # TensorFlow ignores EXIF: stored as is, the photo would come out sideways/upside down.
  raw = tf.io.decode_image(source).numpy()
  assert raw.shape[:2] != (H, W) or mean_error(raw, UPRIGHT) > 20
  stored, facts = image_checks.prepare(source)
  assert f"EXIF orientation {orientation}" in facts.conversion
  pixels = decoded(stored, facts)
  assert (facts.height, facts.width) == (H, W)
  assert mean_error(pixels, UPRIGHT) < 6
  assert PIL.Image.open(io.BytesIO(stored)).getexif().get(sample_images.EXIF_ORIENTATION) is None


@pytest.mark.parametrize("mode", ["RGBA", "P-transparency", "I;16"])
def test_exif_rotated_png_of_every_mode_is_stored_upright(mode):
  # The conversions to RGB (alpha composited, 16-bit narrowed) make new images without
  # the EXIF block: rotated after them, the photo stayed sideways while its facts (and
  # the boxes of an annotation file, placed on the upright size) said upright.
  sideways = np.rot90(UPRIGHT, k=1)
  image = {"RGBA": lambda: PIL.Image.fromarray(np.dstack([sideways, np.full((W, H), 255, np.uint8)])),
           "P-transparency": lambda: PIL.Image.fromarray(sideways).convert("P"),
           "I;16": lambda: PIL.Image.fromarray(sideways[..., 0].astype(np.uint16) * 257)}[mode]()
  save = {"transparency": 255} if mode == "P-transparency" else {}
  source = sample_images.encode(image, "PNG", orientation=6, **save)
  expected = np.asarray(PIL.ImageOps.exif_transpose(PIL.Image.open(io.BytesIO(source)))
                        .convert("RGB"))
  assert expected.shape[:2] == (H, W)
  stored, facts = image_checks.prepare(source)
  assert "EXIF orientation 6" in facts.conversion
  assert (facts.height, facts.width) == (H, W)
  pixels = decoded(stored, facts)
  if mode == "I;16":
    np.testing.assert_array_equal(pixels, np.dstack([UPRIGHT[..., 0]] * 3))
  else:   # (no pixel is transparent: the palette's index 255 is unused or opaque white)
    assert mean_error(pixels, expected) < 1


def test_rgba_png_is_composited_on_white_losslessly():
  stored, facts = image_checks.prepare(sample_images.rgba_png(UPRIGHT))
  assert "RGBA PNG" in facts.conversion and facts.format == "png"
  pixels = decoded(stored, facts)
  assert (pixels[:, : W // 2] == 255).all()                     # transparent -> white
  np.testing.assert_array_equal(pixels[:, W // 2:], UPRIGHT[:, W // 2:])  # opaque: exact


@pytest.mark.parametrize("image,expected", [
    (PIL.Image.fromarray(UPRIGHT).convert("P"), "palette PNG"),
    (PIL.Image.fromarray(UPRIGHT[..., 0]), "grayscale PNG"),
    (PIL.Image.fromarray(UPRIGHT[..., 0].astype(np.uint16) * 257), "16-bit PNG"),
])
def test_other_pngs_are_converted_losslessly(image, expected):
  stored, facts = image_checks.prepare(sample_images.encode(image, "PNG"))
  assert expected in facts.conversion
  pixels = decoded(stored, facts)
  np.testing.assert_array_equal(pixels, np.asarray(image.convert("RGB")) if image.mode == "P"
                                else np.dstack([UPRIGHT[..., 0]] * 3))


@pytest.mark.parametrize("fmt", ["GIF", "BMP"])
def test_other_formats_named_like_images_become_png(fmt):
  stored, facts = image_checks.prepare(sample_images.encode(UPRIGHT, fmt))
  assert f"{fmt} content" in facts.conversion and facts.format == "png"
  decoded(stored, facts)


GOOD_JPEG = sample_images.jpeg(120, 160, seed=3)
GOOD_PNG = sample_images.encode(UPRIGHT, "PNG")


def _bad_crc(png: bytes, chunk: bytes) -> bytes:
  """`png` with the CRC of its first `chunk` changed (its data intact)."""
  start = png.index(chunk)
  crc = start + 4 + int.from_bytes(png[start - 4:start], "big")
  return png[:crc] + bytes([png[crc] ^ 0xFF]) + png[crc + 1:]


@pytest.mark.parametrize("data,reason", [
    (b"", "empty file"),
    (b"Copyright (c) the photographers\n", "not an image"),
    (b"<html><body>404 Not Found</body></html>", "not an image"),
    (GOOD_JPEG[:10], "unreadable image header"),
    (GOOD_JPEG[: len(GOOD_JPEG) // 2], "cannot be decoded"),
    (GOOD_JPEG[:-2], "cannot be decoded"),   # only the end-of-image marker missing
    (GOOD_PNG[: len(GOOD_PNG) - 30], "cannot be decoded"),
    # PIL reads IDAT and IEND without their CRCs, and needs no IEND; libpng refuses them
    (_bad_crc(GOOD_PNG, b"IDAT"), "IDAT has a bad CRC"),
    (_bad_crc(GOOD_PNG, b"IEND"), "IEND has a bad CRC"),
    (GOOD_PNG[:-12], "no IEND chunk"),
    (GOOD_PNG[:-4], "no IEND chunk"),
], ids=["empty", "text", "html", "header-only", "half-jpeg", "no-eoi", "cut-png",
        "png-idat-crc", "png-iend-crc", "png-no-iend", "png-cut-iend"])
def test_bad_files_are_refused_with_a_reason(data, reason):
  with pytest.raises(image_checks.BadImageError, match=reason):
    image_checks.check(data)
  with pytest.raises(tf.errors.InvalidArgumentError):  # and TensorFlow agrees
    tf.io.decode_image(data)


def _damaged_copies(data, count, seed=0):
  """Random cuts, overwritten runs and single-byte changes, as disks and downloads do."""
  rng = np.random.default_rng(seed)
  for trial in range(count):
    damaged = bytearray(data)
    if trial % 3 == 0:
      start, size = int(rng.integers(600, len(data) - 20)), int(rng.choice([1, 16, 300, 1000]))
      damaged[start:start + size] = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    elif trial % 3 == 1:
      damaged = damaged[: int(rng.integers(1, len(data)))]
    else:
      damaged[int(rng.integers(2, len(data)))] = int(rng.integers(0, 256))
    yield bytes(damaged)


PROGRESSIVE_JPEG = sample_images.encode(sample_images.photo(200, 300, 5), "JPEG", quality=80,
                                        progressive=True)


def test_refuses_what_tensorflow_cannot_decode():
  """Our fast check (marker walk, then libjpeg on the headers and the start of the scan for
  plain JPEGs, a 1/8-scale decode for the others) refuses every damaged file a full
  TensorFlow decode refuses, and errs on the side of reporting only rarely."""
  verdicts, accepted_but_undecodable, refused_but_decodable = set(), [], []
  full_colour = sample_images.encode(sample_images.photo(200, 300, 6), "JPEG", quality=95,
                                     subsampling=0)
  for source in (GOOD_JPEG, sample_images.jpeg(375, 500, seed=4), PROGRESSIVE_JPEG,
                 full_colour):
    for index, damaged in enumerate(_damaged_copies(source, 120)):
      try:
        tf.io.decode_image(damaged)
        tf_ok = True
      except tf.errors.InvalidArgumentError:
        tf_ok = False
      try:
        image_checks.check(damaged)
        ours_ok = True
      except image_checks.BadImageError:
        ours_ok = False
      if ours_ok and not tf_ok:
        accepted_but_undecodable.append(index)
      if tf_ok and not ours_ok:
        refused_but_decodable.append(index)
      verdicts.add(ours_ok)
  assert verdicts == {True, False}  # both kinds of damage occurred
  assert accepted_but_undecodable == []
  assert len(refused_but_decodable) <= 3, refused_but_decodable  # of 480


def test_only_jpegs_that_are_not_plain_are_decoded_to_be_checked(monkeypatch):
  decoded_at_one_eighth = []
  decode = image_checks._decode_jpeg_at_one_eighth
  monkeypatch.setattr(image_checks, "_decode_jpeg_at_one_eighth",
                      lambda data: decoded_at_one_eighth.append(data) or decode(data))
  for source in (GOOD_JPEG, PROGRESSIVE_JPEG):
    image_checks.check(source)
  assert decoded_at_one_eighth == [PROGRESSIVE_JPEG]  # several scans: decoded


def test_shorter_side_resize_is_upright_jpeg():
  big = sample_images.photo(400, 600, seed=4)
  stored, facts = image_checks.prepare(sample_images.sideways_jpeg(big), shorter_side=256)
  assert "resized to shorter side 256" in facts.conversion
  pixels = decoded(stored, facts)
  assert (facts.height, facts.width) == (256, 384)
  small = np.asarray(PIL.Image.fromarray(big).resize((384, 256), PIL.Image.BICUBIC))
  assert mean_error(pixels, small) < 8
  # Never upscaled: an image already small enough is stored as it came (no lossy re-encoding).
  for source in (sample_images.encode(UPRIGHT, "PNG"), sample_images.encode(UPRIGHT, "JPEG")):
    assert image_checks.prepare(source, shorter_side=256) == (source, image_checks.check(source))
  # One that needs converting anyway is converted, not resized.
  stored, facts = image_checks.prepare(sample_images.sideways_jpeg(UPRIGHT), shorter_side=256)
  assert (facts.height, facts.width) == UPRIGHT.shape[:2] and "resized" not in facts.conversion


def test_a_damaged_jpeg_to_be_resized_is_still_refused():
  """With shorter_side, large JPEGs skip the 1/8-scale check decode: the resize decodes
  them, and must refuse what the check would have refused."""
  whole = sample_images.jpeg(600, 800, seed=8)
  for cut in (len(whole) // 2, len(whole) - 40):
    with pytest.raises(image_checks.BadImageError, match="cannot be decoded"):
      image_checks.prepare(whole[:cut], shorter_side=256)



@pytest.mark.parametrize("height, width, shorter_side, expected", [
    (600, 800, 256, (300, 400)),    # scale 4/8: the smallest n/8 with shorter side >= 256
    (375, 500, 258, (282, 375)),    # 6/8
    (800, 600, 258, (400, 300)),    # portrait: the width is the shorter side
    (1512, 2016, 258, (378, 504)),  # 2/8 (1/8 of a 12 MP photo, which takes long to draw)
])
def test_upright_jpegs_are_downscaled_in_the_dct(height, width, shorter_side, expected):
  source = sample_images.photo(height, width, seed=9)
  stored, facts = image_checks.prepare(sample_images.encode(source, "JPEG", quality=90),
                                       shorter_side=shorter_side)
  pixels = decoded(stored, facts)
  assert (facts.height, facts.width) == expected and facts.format == "jpeg"
  assert "resized to shorter side" in facts.conversion
  reference = np.asarray(PIL.Image.fromarray(source).resize(expected[::-1], PIL.Image.BICUBIC))
  assert mean_error(pixels, reference) < 6


def test_converted_jpeg_keeps_the_source_quality_and_size():
  photo = sample_images.photo(240, 320, seed=5)
  for quality in (60, 95):
    source = sample_images.sideways_jpeg(photo, quality=quality)
    stored, facts = image_checks.prepare(source)
    assert 0.8 < len(stored) / len(source) < 1.2, (quality, len(stored), len(source))


def test_checks_on_threads_leave_the_process_warning_filters_alone():
  """check() runs on threads (bucket reads, two builds at once); swapping the process's
  warning filters there (warnings.catch_warnings) races and leaves a filter behind."""
  import threading
  import warnings
  data = sample_images.jpeg(40, 50, seed=1)
  filters, content = warnings.filters, list(warnings.filters)

  def work():
    for _ in range(300):
      image_checks.check(data)

  threads = [threading.Thread(target=work) for _ in range(4)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert warnings.filters is filters and warnings.filters == content


def test_a_large_image_is_checked_without_a_warning_and_a_huge_one_refused(monkeypatch):
  import warnings
  monkeypatch.setattr(PIL.Image, "MAX_IMAGE_PIXELS", 1000)
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # PIL's decompression-bomb warning would raise here
    assert image_checks.check(sample_images.jpeg(40, 40, seed=2)).width == 40  # 1600 px
  with pytest.raises(image_checks.BadImageError, match="MAX_IMAGE_PIXELS"):
    image_checks.check(sample_images.jpeg(50, 50, seed=2))  # 2500 > 2 x 1000
