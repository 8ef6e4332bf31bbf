"""numpy_ops, the transforms of Grain's workers: headers, reduced-scale JPEG decoding, the
resize that matches tf.image.resize, crop windows, and the image + mask geometry."""

import io

import numpy as np
import PIL.Image
import tensorflow as tf

from imagesets.reading import numpy_ops as ops
from imagesets_testing import sample_images

PHOTO = sample_images.photo(400, 600, seed=3)
JPEG = sample_images.encode(PHOTO, "JPEG", quality=95)


def test_the_shape_comes_from_the_header_of_jpeg_and_png():
  assert ops.image_shape(JPEG) == (400, 600)
  assert ops.image_shape(sample_images.encode(PHOTO[:50, :70], "PNG")) == (50, 70)


def test_a_jpeg_is_decoded_at_the_smallest_libjpeg_scale_that_covers_min_size():
  full = ops.decode(JPEG)
  assert full.shape == (400, 600, 3) and full.dtype == np.uint8
  pil = np.asarray(PIL.Image.open(io.BytesIO(JPEG)).convert("RGB")).astype(int)
  assert np.abs(full.astype(int) - pil).mean() < 1
  assert ops.decode(JPEG, min_size=(100, 150)).shape == (100, 150, 3)   # 1/4
  assert ops.decode(JPEG, min_size=(101, 150)).shape == (150, 225, 3)   # 3/8: 1/4 is too small


def test_masks_decode_to_their_stored_values():
  indices = np.arange(40 * 30, dtype=np.uint8).reshape(40, 30) % 21
  indices[:5] = 255
  palette = PIL.Image.fromarray(indices, mode="P")
  palette.putpalette(list(range(256)) * 3)
  for image in (palette, PIL.Image.fromarray(indices, mode="L")):
    encoded = sample_images.encode(image, "PNG")
    np.testing.assert_array_equal(ops.decode(encoded, channels=1)[..., 0], indices)


def test_resize_is_tf_image_resize_bilinear_up_to_rounding():
  for size in [(123, 77), (500, 640)]:  # down and up
    ours = ops.resize(PHOTO, size).astype(int)
    theirs = np.round(tf.image.resize(PHOTO, size, antialias=False).numpy()).astype(int)
    assert ours.shape == (*size, 3)
    assert np.abs(ours - theirs).max() <= 1, size  # OpenCV's fixed-point weights
  # The check can fail: nearest-neighbour is not within 1 of bilinear.
  nearest = ops.resize(PHOTO, (123, 77), nearest=True).astype(int)
  bilinear = np.round(tf.image.resize(PHOTO, (123, 77), antialias=False).numpy())
  assert np.abs(nearest - bilinear).max() > 1


def test_nearest_resize_keeps_mask_values_and_channel_axis():
  mask = (np.arange(20 * 30).reshape(20, 30, 1) % 7).astype(np.uint8)
  resized = ops.resize(mask, (53, 41), nearest=True)
  assert resized.shape == (53, 41, 1) and set(np.unique(resized)) == set(range(7))


def test_nearest_resize_samples_the_pixels_bilinear_samples_as_tf_image_resize():
  # Columns numbered 0-9: a mask's column must be the one the image's pixel comes from.
  columns = np.broadcast_to(np.arange(10, dtype=np.uint8)[None, :, None], (4, 10, 1))
  for width in (3, 5, 7, 13):
    ours = ops.resize(columns, (4, width), nearest=True)
    theirs = tf.image.resize(columns, (4, width), method="nearest").numpy()
    np.testing.assert_array_equal(ours, theirs, err_msg=f"width {width}")


def test_crop_windows_are_inception_windows_and_a_seed_repeats_them():
  windows = [ops.crop_window((400, 600), np.random.default_rng(i), (0.08, 1.0), (0.75, 4 / 3))
             for i in range(200)]
  for y, x, height, width in windows:
    assert 0 <= y and y + height <= 400 and 0 <= x and x + width <= 600
    assert 0.08 * 0.9 <= height * width / (400 * 600) <= 1.0
    assert 0.75 * 0.9 <= width / height <= 4 / 3 * 1.1
  assert len(set(windows)) > 150
  assert windows[5] == ops.crop_window((400, 600), np.random.default_rng(5), (0.08, 1.0),
                                       (0.75, 4 / 3))
  # A window that can never fit: the whole image, as the tf.data op.
  assert ops.crop_window((400, 400), np.random.default_rng(0), (0.9, 1.0), (3.0, 4.0)) == (
      0, 0, 400, 400)


def test_random_resized_crop_is_the_window_of_the_full_image_resized():
  rng_seed = 11
  out = ops.random_resized_crop(JPEG, 64, np.random.default_rng(rng_seed))
  y, x, height, width = ops.crop_window((400, 600), np.random.default_rng(rng_seed),
                                        (0.08, 1.0), (3 / 4, 4 / 3))
  reference = ops.resize(ops.decode(JPEG)[y:y + height, x:x + width], 64)
  assert out.shape == (64, 64, 3)
  # The window came from a reduced-scale decode: close to, not equal to, the full decode.
  assert np.abs(out.astype(int) - reference).mean() < 6
  elsewhere = ops.resize(ops.decode(JPEG)[:height, -width:], 64)
  assert np.abs(out.astype(int) - elsewhere).mean() > 6 or (y, x) == (0, 600 - width)


def test_central_crop_takes_the_central_square():
  frame = np.zeros((200, 300, 3), np.uint8)
  frame[...] = (200, 30, 30)
  frame[50:150, 100:200] = (30, 30, 200)  # the central 100 x 100 square
  out = ops.central_crop(sample_images.encode(frame, "PNG"), 32, crop_fraction=0.5)
  assert out.shape == (32, 32, 3)
  assert (out[..., 2] == 200).all() and (out[..., 0] == 30).all()


def test_flips_scales_crops_and_pads_keep_image_and_mask_aligned():
  image = np.arange(30 * 40 * 3, dtype=np.uint32).reshape(30, 40, 3).astype(np.uint8)
  mask = (np.arange(30 * 40).reshape(30, 40, 1) % 21).astype(np.uint8)
  flips = [ops.random_flip(np.random.default_rng(i), image, mask) for i in range(20)]
  flipped = [np.array_equal(m, mask[:, ::-1]) for _, m in flips]
  assert any(flipped) and not all(flipped)
  for (i, m), was_flipped in zip(flips, flipped):
    np.testing.assert_array_equal(i, image[:, ::-1] if was_flipped else image)
  scaled_image, scaled_mask = ops.random_scale(image, mask, np.random.default_rng(0),
                                               (1.5, 2.0))
  assert scaled_image.shape[:2] == scaled_mask.shape[:2] and scaled_image.shape[0] >= 45
  assert set(np.unique(scaled_mask)) <= set(range(21))
  cropped_image, cropped_mask = ops.random_crop_or_pad(image, mask, (50, 20),
                                                       np.random.default_rng(1))
  assert cropped_image.shape == (50, 20, 3) and cropped_mask.shape == (50, 20, 1)
  assert (cropped_mask[30:] == 255).all() and not cropped_image[30:].any()  # padded below
  assert (cropped_mask[:30] != 255).all()


def test_crop_or_pad_centres_the_padding_and_the_crop():
  mask = np.full((10, 40, 1), 3, np.uint8)
  out = ops.crop_or_pad(mask, (20, 20), ops.MASK_PAD_VALUE)
  assert out.shape == (20, 20, 1)
  assert (out[:5] == 255).all() and (out[15:] == 255).all() and (out[5:15] == 3).all()
  ramp = np.arange(40, dtype=np.uint8).reshape(1, 40, 1).repeat(10, 0)
  np.testing.assert_array_equal(ops.crop_or_pad(ramp, (10, 20), 0)[0, :, 0], np.arange(10, 30))


_OPENCV_THREADS = r'''
import multiprocessing, cv2, numpy as np
cv2.setNumThreads(3)  # the user's setting
from imagesets.reading import numpy_ops
numpy_ops.resize(np.zeros((8, 8, 3), np.uint8), 4)  # run here, in the user's process


def in_worker(queue):
  numpy_ops.resize(np.zeros((8, 8, 3), np.uint8), 4)
  queue.put(cv2.getNumThreads())


queue = multiprocessing.get_context("fork").Queue()
worker = multiprocessing.get_context("fork").Process(target=in_worker, args=(queue,))
worker.start()
print(cv2.getNumThreads(), queue.get(timeout=60))
worker.join()
'''


def test_opencv_threads_are_set_in_worker_processes_only():
  """Importing numpy_ops or resizing in the user's process keeps the user's OpenCV thread
  count; a worker process (Grain's) runs OpenCV on one thread."""
  import subprocess
  import sys
  result = subprocess.run([sys.executable, "-c", _OPENCV_THREADS], capture_output=True,
                          text=True, timeout=120)
  assert result.stdout.split() == ["3", "1"], result.stderr[-2000:]
