"""preprocess_ops: each op on small images made with numpy/PIL."""

import io

import numpy as np
import PIL.Image
import pytest
import tensorflow as tf

from imagesets.reading import preprocess_ops as ops


def _encode(pixels, fmt, **kwargs):
  out = io.BytesIO()
  PIL.Image.fromarray(pixels).save(out, format=fmt, **kwargs)
  return out.getvalue()


def _smooth(height, width, seed=0):
  """Photo-like smooth RGB (JPEG keeps it close), different in every corner."""
  y, x = np.mgrid[0:height, 0:width].astype(np.float32)
  rng = np.random.default_rng(seed)
  a, b, c = rng.uniform(0.02, 0.08, 3)
  pixels = np.stack([128 + 100 * np.sin(a * x + b * y), 128 + 100 * np.cos(b * x - c * y),
                     50 + 200 * x / width], axis=-1)
  return pixels.clip(0, 255).astype(np.uint8)


def _seeded(data, seed=(1, 2)):
  return {**data, ops.SEED_KEY: tf.constant(seed, tf.int64)}


def test_is_jpeg_reads_the_magic_bytes():
  pixels = _smooth(20, 30)
  assert bool(ops.is_jpeg(_encode(pixels, "JPEG")))
  assert not bool(ops.is_jpeg(_encode(pixels, "PNG")))
  assert not bool(ops.is_jpeg(_encode(pixels, "BMP")))


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "GIF"])
def test_decode_reads_lossless_formats_exactly(fmt):
  pixels = _smooth(21, 34)
  if fmt == "GIF":  # GIF is palette-based: compare with what PIL itself reads back
    pixels = np.asarray(PIL.Image.open(io.BytesIO(_encode(pixels, fmt))).convert("RGB"))
  out = ops.decode()({"image": tf.constant(_encode(pixels, fmt))})["image"]
  np.testing.assert_array_equal(out.numpy(), pixels)


def test_decode_single_channel_mask_keeps_class_ids():
  mask = np.array([[0, 1, 20], [255, 7, 3]], np.uint8)
  out = ops.decode("mask", channels=1)({"mask": tf.constant(_encode(mask, "PNG"))})["mask"]
  np.testing.assert_array_equal(out.numpy()[..., 0], mask)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_fused_crop_equals_crop_of_the_decoded_image(fmt):
  pixels = _smooth(120, 160)
  contents = _encode(pixels, fmt, **({"quality": 95} if fmt == "JPEG" else {}))
  decoded = tf.io.decode_image(contents, channels=3).numpy()
  for seed in [(0, 1), (5, 9), (7, 3)]:
    fused = ops.decode_and_random_crop(48)(_seeded({"image": tf.constant(contents)}, seed))
    reference = ops.random_resized_crop(48)(_seeded({"image": tf.constant(decoded)}, seed))
    assert fused["image"].shape == (48, 48, 3) and fused["image"].dtype == tf.uint8
    diff = np.abs(fused["image"].numpy().astype(int) - reference["image"].numpy().astype(int))
    # Same window; JPEG's partial decode may differ by rounding at the window edge.
    assert diff.mean() < (0.01 if fmt == "PNG" else 1.0)


def test_random_crop_depends_on_the_example_seed_only():
  contents = tf.constant(_encode(_smooth(120, 160), "JPEG"))
  crop = ops.decode_and_random_crop(32, area_range=(0.1, 0.3))
  first = crop(_seeded({"image": contents}, (1, 1)))["image"].numpy()
  again = crop(_seeded({"image": contents}, (1, 1)))["image"].numpy()
  other = crop(_seeded({"image": contents}, (1, 2)))["image"].numpy()
  np.testing.assert_array_equal(first, again)
  assert not np.array_equal(first, other)


def test_central_crop_is_the_central_square():
  pixels = _smooth(80, 120)
  out = ops.decode_and_central_crop(40, crop_fraction=0.5)(
      {"image": tf.constant(_encode(pixels, "PNG"))})["image"].numpy()
  # Central 40x40 of 80x120 starts at (20, 40); resizing 40 -> 40 is the identity.
  np.testing.assert_array_equal(out, pixels[20:60, 40:80])


def test_flip_mirrors_every_key_together():
  image = np.arange(2 * 5 * 3, dtype=np.uint8).reshape(2, 5, 3)
  mask = np.arange(10, dtype=np.uint8).reshape(2, 5, 1)
  flip = ops.random_flip_left_right(["image", "mask"])
  flipped = 0
  for seed in range(16):
    out = flip(_seeded({"image": tf.constant(image), "mask": tf.constant(mask)}, (seed, 0)))
    was_flipped = not np.array_equal(out["image"].numpy(), image)
    expected = (image[:, ::-1], mask[:, ::-1]) if was_flipped else (image, mask)
    np.testing.assert_array_equal(out["image"].numpy(), expected[0])
    np.testing.assert_array_equal(out["mask"].numpy(), expected[1])
    flipped += was_flipped
  assert 3 <= flipped <= 13


def test_resize_nearest_keeps_mask_ids_and_bilinear_keeps_uint8():
  mask = np.random.default_rng(0).choice([0, 5, 255], size=(9, 7, 1)).astype(np.uint8)
  out = ops.resize((20, 13), "mask", "nearest")({"mask": tf.constant(mask)})["mask"]
  assert out.dtype == tf.uint8 and set(np.unique(out.numpy())) <= {0, 5, 255}
  image = ops.resize(16)({"image": tf.constant(_smooth(30, 40))})["image"]
  assert image.shape == (16, 16, 3) and image.dtype == tf.uint8


def test_crop_or_pad_pads_masks_with_255_and_images_with_0():
  image = np.full((4, 6, 3), 9, np.uint8)
  mask = np.full((4, 6, 1), 2, np.uint8)
  out = ops.crop_or_pad((8, 4), mask_keys=["mask"])({"image": tf.constant(image), "mask": tf.constant(mask)})
  # Height 4 -> 8: 2 rows of padding above and below; width 6 -> 4: central columns.
  expected_mask = np.full((8, 4, 1), 255, np.uint8)
  expected_mask[2:6] = 2
  np.testing.assert_array_equal(out["mask"].numpy(), expected_mask)
  np.testing.assert_array_equal(out["image"].numpy()[2:6], image[:, 1:5])
  assert not out["image"].numpy()[[0, 1, 6, 7]].any()
  # Same geometry as TF's op for images.
  np.testing.assert_array_equal(out["image"].numpy(),
                                tf.image.resize_with_crop_or_pad(image, 8, 4).numpy())


def test_random_crop_or_pad_same_window_for_image_and_mask():
  rng = np.random.default_rng(1)
  mask = rng.integers(0, 21, (30, 50, 1), dtype=np.uint8)
  image = np.concatenate([mask * 10, mask * 5, mask], axis=-1)  # image = f(mask)
  op = ops.random_crop_or_pad((40, 20), mask_keys=["mask"])
  for seed in range(5):
    out = op(_seeded({"image": tf.constant(image), "mask": tf.constant(mask)}, (seed, 3)))
    got_image, got_mask = out["image"].numpy(), out["mask"].numpy()
    assert got_image.shape == (40, 20, 3) and got_mask.shape == (40, 20, 1)
    pad = got_mask[..., 0] == 255
    assert pad[30:].all() and not pad[:30].any()  # padded below only, to height 40
    np.testing.assert_array_equal(got_image[~pad], np.concatenate(
        [got_mask * 10, got_mask * 5, got_mask], axis=-1)[~pad])
    assert not got_image[pad].any()


def test_random_scale_resizes_image_and_mask_by_one_factor():
  image = tf.zeros((40, 60, 3), tf.uint8)
  mask = tf.zeros((40, 60, 1), tf.uint8)
  sizes = set()
  for seed in range(6):
    out = ops.random_scale((0.5, 2.0), mask_keys=["mask"])(_seeded({"image": image, "mask": mask}, (seed, 0)))
    assert out["image"].shape[:2] == out["mask"].shape[:2]
    height, width = out["image"].shape[:2]
    assert 20 <= height <= 80 and abs(width / height - 1.5) < 0.05
    sizes.add(height)
  assert len(sizes) > 3


def test_masks_are_the_keys_the_caller_lists_not_keys_named_mask():
  # A feature named "mask" listed as an image is blended and padded with 0; a mask under
  # another name ("labels") keeps its ids and is padded with 255.
  ids = np.zeros((4, 4, 1), np.uint8)
  ids[:, 2:] = 20
  data = _seeded({"mask": tf.constant(ids), "labels": tf.constant(ids)}, (0, 0))
  scaled = ops.random_scale((3.0, 3.0), keys=["mask"], mask_keys=["labels"])(data)
  assert set(np.unique(scaled["labels"].numpy())) == {0, 20}
  assert len(np.unique(scaled["mask"].numpy())) > 2  # bilinear: blended values
  padded = ops.crop_or_pad((6, 4), keys=["mask"], mask_keys=["labels"])(data)
  assert padded["labels"].numpy()[0].min() == 255 and padded["mask"].numpy()[0].max() == 0


def test_to_float_and_normalize_work_per_batch():
  batch = {"image": tf.constant(np.full((2, 3, 3, 3), 255, np.uint8))}
  out = ops.compose(ops.to_float(), ops.normalize([0.5, 0.5, 0.5], [0.25, 0.5, 1.0]))(batch)
  np.testing.assert_allclose(out["image"].numpy()[0, 0, 0], [2.0, 1.0, 0.5])


def test_keep_and_rename():
  data = {"a": 1, "b": 2, ops.SEED_KEY: 3}
  assert ops.compose(ops.rename(c="a"), ops.keep("c"))(data) == {"c": 1}
