"""The transforms of `preprocess_ops` for numpy pipelines (Grain, PyTorch): same parameters,
same meaning, drawn from a `np.random.Generator` instead of TensorFlow's stateless seeds.

* `random_resized_crop`: Inception-style window (area fraction in `area_range`, aspect ratio
  in `aspect_ratio_range`, 10 attempts, else the whole image), resized bilinearly. For a
  JPEG the window is cut from a decode at the smallest libjpeg scale that still gives it at
  least the output size (libjpeg-turbo via simplejpeg), as the tf.data op decodes only
  the window.
* `central_crop`: the central square of `crop_fraction` x the shorter side, resized.
* `random_scale` / `random_crop_or_pad` / `crop_or_pad` / flips for image + mask pairs:
  masks resized nearest-neighbour, padded with 255 (void), images padded with 0.

Everything returns uint8 arrays; decoding happens where these run (Grain's workers).
Needs OpenCV (`opencv-python-headless`, in the `grain` extra) for resizing.
"""

import io
import math
import multiprocessing
import os

import cv2
import numpy as np
import PIL.Image
import simplejpeg

from imagesets.constants import IMAGE_PAD_VALUE, MASK_PAD_VALUE  # noqa: F401  (re-exported)
from imagesets.constants import (  # noqa: F401  (re-exported: the pipelines' defaults)
    CENTRAL_CROP_FRACTION, CROP_AREA_RANGE, CROP_ASPECT_RATIO_RANGE, IMAGE_SIZE)

# In Grain's worker processes the workers are the parallelism: OpenCV's own threads would
# fight them, so a worker sets OpenCV to one thread, once, on its first resize. A process
# that merely imports this module (or runs these ops itself, worker_count=0) keeps its
# OpenCV settings: they are the user's.
_one_opencv_thread_in = None  # the worker process (pid) that set it

_JPEG_SOI = b"\xff\xd8\xff"


def _size(size) -> tuple[int, int]:
  return (size, size) if isinstance(size, int) else tuple(size)


def _one_opencv_thread_in_workers() -> None:
  global _one_opencv_thread_in
  if _one_opencv_thread_in != os.getpid() and multiprocessing.parent_process() is not None:
    cv2.setNumThreads(1)
    _one_opencv_thread_in = os.getpid()


def image_shape(encoded: bytes) -> tuple[int, int]:
  """(height, width) from the header alone."""
  if encoded.startswith(_JPEG_SOI):
    height, width, _, _ = simplejpeg.decode_jpeg_header(encoded)
    return height, width
  with PIL.Image.open(io.BytesIO(encoded)) as image:
    return image.height, image.width


def decode(encoded: bytes, channels: int = 3, min_size: tuple[int, int] = (0, 0)) -> np.ndarray:
  """uint8 [H, W, channels]; a JPEG possibly at a reduced libjpeg scale >= `min_size`."""
  if channels == 3 and encoded.startswith(_JPEG_SOI):
    return simplejpeg.decode_jpeg(encoded, colorspace="RGB", min_height=min_size[0],
                                  min_width=min_size[1])
  with PIL.Image.open(io.BytesIO(encoded)) as image:
    if channels == 1:  # class-id masks: the stored values themselves
      return np.asarray(image)[..., None] if image.mode in ("L", "P") else \
          np.asarray(image.convert("L"))[..., None]
    return np.asarray(image.convert("RGB"))


def resize(image: np.ndarray, size, nearest: bool = False) -> np.ndarray:
  """Bilinear (or nearest) with half-pixel centres and no antialiasing, as
  `tf.image.resize`; OpenCV's SIMD resize (8x faster than PIL's here).

  Nearest is INTER_NEAREST_EXACT: OpenCV's INTER_NEAREST samples at the pixels' corners
  (floor(x * scale)), up to a source pixel off the image's bilinear samples."""
  height, width = _size(size)
  if image.shape[:2] == (height, width):
    return image
  _one_opencv_thread_in_workers()
  resized = cv2.resize(np.ascontiguousarray(image), (width, height),
                       interpolation=cv2.INTER_NEAREST_EXACT if nearest else cv2.INTER_LINEAR)
  return resized[..., None] if resized.ndim == 2 else resized


def crop_window(shape, rng: np.random.Generator, area_range, aspect_ratio_range):
  """(y, x, height, width) of an Inception-style window, as the tf.data op samples it."""
  height, width = shape
  for _ in range(10):
    area = rng.uniform(*area_range) * height * width
    ratio = rng.uniform(*aspect_ratio_range)
    crop_w, crop_h = int(round(math.sqrt(area * ratio))), int(round(math.sqrt(area / ratio)))
    if 0 < crop_h <= height and 0 < crop_w <= width:
      return (int(rng.integers(0, height - crop_h + 1)), int(rng.integers(0, width - crop_w + 1)),
              crop_h, crop_w)
  return 0, 0, height, width


def _decode_window(encoded: bytes, shape, window, size) -> np.ndarray:
  """The window of the image (of `shape`), resized to `size`, from the cheapest sufficient
  decode."""
  y, x, crop_h, crop_w = window
  height, width = shape
  out_h, out_w = _size(size)
  # Decode at the smallest of libjpeg-turbo's SIMD scales (1/2, 1/4, 1/8; the others are
  # slower than a full decode) whose window is still at least the output size.
  scale = max(out_h / crop_h, out_w / crop_w)
  factor = next((k for k in (8, 4, 2) if 1 / k >= scale), 1)
  pixels = decode(encoded, 3, (math.ceil(height / factor), math.ceil(width / factor)))
  scale_y, scale_x = pixels.shape[0] / height, pixels.shape[1] / width
  top, left = int(y * scale_y), int(x * scale_x)
  bottom = max(top + 1, int(round((y + crop_h) * scale_y)))
  right = max(left + 1, int(round((x + crop_w) * scale_x)))
  return resize(pixels[top:bottom, left:right], size)


def random_resized_crop(encoded: bytes, size, rng: np.random.Generator,
                        area_range=CROP_AREA_RANGE, aspect_ratio_range=CROP_ASPECT_RATIO_RANGE) -> np.ndarray:
  shape = image_shape(encoded)
  return _decode_window(encoded, shape, crop_window(shape, rng, area_range, aspect_ratio_range),
                        size)


def central_crop(encoded: bytes, size, crop_fraction: float = CENTRAL_CROP_FRACTION) -> np.ndarray:
  height, width = image_shape(encoded)
  side = max(1, int(min(height, width) * crop_fraction))
  return _decode_window(encoded, (height, width),
                        ((height - side) // 2, (width - side) // 2, side, side), size)


def _flip_drawn(rng: np.random.Generator) -> bool:
  """Whether `random_flip` mirrors (one draw from `rng`)."""
  return rng.random() < 0.5


def random_flip(rng: np.random.Generator, *arrays: np.ndarray) -> list[np.ndarray]:
  """The same left-right flip (or none) for all arrays."""
  flip = _flip_drawn(rng)
  return [np.ascontiguousarray(a[:, ::-1]) if flip else a for a in arrays]


def random_scale(image, mask, rng: np.random.Generator, scale_range=(0.5, 2.0)):
  scale = rng.uniform(*scale_range)
  size = (max(1, round(image.shape[0] * scale)), max(1, round(image.shape[1] * scale)))
  return resize(image, size), resize(mask, size, nearest=True)


def _pad_to_at_least(array, height, width, value, centred):
  pad_y, pad_x = max(height - array.shape[0], 0), max(width - array.shape[1], 0)
  before_y, before_x = (pad_y // 2, pad_x // 2) if centred else (0, 0)
  return np.pad(array, ((before_y, pad_y - before_y), (before_x, pad_x - before_x), (0, 0)),
                constant_values=value)


def random_crop_or_pad(image, mask, size, rng: np.random.Generator):
  """Pads both (bottom/right; image 0, mask 255) up to `size`, then one random window."""
  height, width = _size(size)
  image = _pad_to_at_least(image, height, width, IMAGE_PAD_VALUE, centred=False)
  mask = _pad_to_at_least(mask, height, width, MASK_PAD_VALUE, centred=False)
  y = int(rng.integers(0, image.shape[0] - height + 1))
  x = int(rng.integers(0, image.shape[1] - width + 1))
  return image[y:y + height, x:x + width], mask[y:y + height, x:x + width]


def crop_or_pad(array, size, pad_value):
  """Central crop where larger, centred padding where smaller (masks: pad_value 255)."""
  height, width = _size(size)
  padded = _pad_to_at_least(array, height, width, pad_value, centred=True)
  y, x = (padded.shape[0] - height) // 2, (padded.shape[1] - width) // 2
  return padded[y:y + height, x:x + width]
