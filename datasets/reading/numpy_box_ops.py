"""The detection transforms of `box_ops` in numpy, for Grain's workers (no TensorFlow).

Each takes the image (encoded bytes, or decoded uint8 [H, W, 3]) and the objects (a dict
of per-object arrays sharing their first dimension N; "bbox" float32 [N, 4] normalised
(ymin, xmin, ymax, xmax)) and returns both, moved together; dropped objects leave every key
of the dict. Same parameters and box arithmetic (float32) as the tf.data ops; the random
ones draw from a `np.random.Generator` as `numpy_ops` does, so `decode_and_random_crop`
takes `numpy_ops.random_resized_crop`'s window and pixels, `random_flip_left_right`
`numpy_ops.random_flip`'s flip, for the same generator state.

    image, objects = decode_and_random_crop(record["image"], record["objects"], 512, rng)
    image, objects = random_flip_left_right(image, objects, rng)
    example = to_keras(image, objects, max_boxes=100, bounding_box_format="xyxy")
"""

import math

import numpy as np

from imagesets.reading.box_formats import (  # noqa: F401  (re-exported: the ops' settings)
    FORMATS, MIN_VISIBLE, PAD_VALUE, check_format, check_min_visible, convert)
from imagesets.reading import numpy_ops
from imagesets.reading.numpy_ops import CROP_AREA_RANGE, CROP_ASPECT_RATIO_RANGE, _size

FITS = ("stretch", "crop", "pad")


def _boxes(objects, bbox_key):
  return np.asarray(objects[bbox_key], np.float32).reshape(-1, 4)


def crop_objects(objects: dict, window, image_shape, min_visible: float = MIN_VISIBLE,
                 bbox_key: str = "bbox") -> dict:
  """`box_ops.crop_objects`: the objects seen through `window` (offset_y, offset_x,
  height, width) of an image of `image_shape`, boxes clipped and normalised to the window;
  those less than `min_visible` inside it go (degenerate boxes: unless they touch it)."""
  top, left, height, width = np.asarray(window, np.float32)
  shape = np.asarray(image_shape[:2], np.float32)
  ymin, xmin, ymax, xmax = (_boxes(objects, bbox_key) * np.concatenate([shape, shape])).T
  clipped_ymin, clipped_xmin = np.maximum(ymin, top), np.maximum(xmin, left)
  clipped_ymax = np.minimum(ymax, top + height)
  clipped_xmax = np.minimum(xmax, left + width)
  area = np.maximum(ymax - ymin, 0) * np.maximum(xmax - xmin, 0)
  visible = (np.maximum(clipped_ymax - clipped_ymin, 0) *
             np.maximum(clipped_xmax - clipped_xmin, 0))
  touches = (clipped_ymin <= clipped_ymax) & (clipped_xmin <= clipped_xmax)
  share = visible / np.where(area > 0, area, 1)
  keep = np.where(area > 0, (visible > 0) & (share >= min_visible), touches)
  moved = np.stack([(clipped_ymin - top) / height, (clipped_xmin - left) / width,
                    (clipped_ymax - top) / height, (clipped_xmax - left) / width], axis=-1)
  return {key: (moved if key == bbox_key else np.asarray(value))[keep]
          for key, value in objects.items()}


def decode_and_random_crop(image: bytes | np.ndarray, objects: dict, size,
                           rng: np.random.Generator, min_visible: float = MIN_VISIBLE,
                           area_range=CROP_AREA_RANGE, aspect_ratio_range=CROP_ASPECT_RATIO_RANGE,
                           bbox_key: str = "bbox") -> tuple[np.ndarray, dict]:
  """`numpy_ops.random_resized_crop` (same window and pixels for the same `rng` state) with
  the objects cropped along (`crop_objects`). `image`: encoded, or a decoded array."""
  check_min_visible(min_visible)
  encoded = isinstance(image, bytes)
  shape = numpy_ops.image_shape(image) if encoded else image.shape[:2]
  window = numpy_ops.crop_window(shape, rng, area_range, aspect_ratio_range)
  if encoded:
    pixels = numpy_ops._decode_window(image, shape, window, size)
  else:
    y, x, height, width = window
    pixels = numpy_ops.resize(image[y:y + height, x:x + width], size)
  return pixels, crop_objects(objects, window, shape, min_visible, bbox_key)


def flip_objects(objects: dict, bbox_key: str = "bbox") -> dict:
  """The objects of the left-right mirrored image: xmin' = 1 - xmax, xmax' = 1 - xmin."""
  ymin, xmin, ymax, xmax = _boxes(objects, bbox_key).T
  return {**objects, bbox_key: np.stack([ymin, 1 - xmax, ymax, 1 - xmin], axis=-1)}


def random_flip_left_right(image: np.ndarray, objects: dict, rng: np.random.Generator,
                           bbox_key: str = "bbox") -> tuple[np.ndarray, dict]:
  """Mirrors the image and its boxes with probability 1/2 (`numpy_ops.random_flip`'s
  draw)."""
  if numpy_ops._flip_drawn(rng):
    return np.ascontiguousarray(image[:, ::-1]), flip_objects(objects, bbox_key)
  return image, objects


def _decoded(image: bytes | np.ndarray) -> np.ndarray:
  return numpy_ops.decode(image) if isinstance(image, bytes) else image


def decode_and_resize(image: bytes | np.ndarray, objects: dict, size) -> tuple[np.ndarray, dict]:
  """Evaluation: the whole image stretched to `size` (uint8); the boxes unchanged."""
  return numpy_ops.resize(_decoded(image), size), objects


def _aspect_window(shape, size):
  """`preprocess_ops._aspect_window`: the largest central window of `size`'s aspect ratio."""
  height, width = shape[:2]
  target_height, target_width = _size(size)
  crop_height = max(1, min(height, int(np.float32(width * target_height) /
                                       np.float32(target_width))))
  crop_width = max(1, min(width, int(np.float32(height * target_width) /
                                     np.float32(target_height))))
  return (height - crop_height) // 2, (width - crop_width) // 2, crop_height, crop_width


def _pad_placement(shape, size):
  """(top, left, height, width) of the image in `tf.image.resize_with_pad`'s frame, in its
  float32 arithmetic."""
  target_height, target_width = (np.float32(side) for side in _size(size))
  height, width = np.float32(shape[0]), np.float32(shape[1])
  ratio = max(width / target_width, height / target_height)
  resized_height, resized_width = height / ratio, width / ratio
  top = max(0, math.floor((target_height - resized_height) / np.float32(2)))
  left = max(0, math.floor((target_width - resized_width) / np.float32(2)))
  return top, left, math.floor(resized_height), math.floor(resized_width)


def decode_and_fit(image: bytes | np.ndarray, objects: dict, size, fit: str = "stretch",
                   min_visible: float = MIN_VISIBLE,
                   bbox_key: str = "bbox") -> tuple[np.ndarray, dict]:
  """`box_ops.decode_and_fit`: float32 [height, width, 3], values 0-255 (not rounded), and
  the boxes moved: kept ("stretch"), into the image's place in the padded frame ("pad"), or
  cropped to the central window of the target's aspect ratio ("crop")."""
  if fit not in FITS:
    raise ValueError(f"fit must be one of {FITS}, not {fit!r}")
  check_min_visible(min_visible)
  pixels = _decoded(image).astype(np.float32)
  shape = pixels.shape[:2]
  if fit == "crop":
    window = _aspect_window(shape, size)
    y, x, height, width = window
    return (numpy_ops.resize(pixels[y:y + height, x:x + width], size),
            crop_objects(objects, window, shape, min_visible, bbox_key))
  if fit == "stretch":
    return numpy_ops.resize(pixels, size), objects
  top, left, height, width = _pad_placement(shape, size)
  frame_height, frame_width = _size(size)
  framed = np.zeros((frame_height, frame_width, 3), np.float32)
  framed[top:top + height, left:left + width] = numpy_ops.resize(pixels, (height, width))
  ymin, xmin, ymax, xmax = _boxes(objects, bbox_key).T
  boxes = np.stack([(top + ymin * height) / frame_height, (left + xmin * width) / frame_width,
                    (top + ymax * height) / frame_height, (left + xmax * width) / frame_width],
                   axis=-1).astype(np.float32)
  return framed, {**objects, bbox_key: boxes}


def boxes_to_format(boxes, source: str, target: str, height=None, width=None) -> np.ndarray:
  """`box_ops.boxes_to_format` in numpy: boxes [..., 4] from keras format `source` to
  `target` (float32); `height` and `width` between relative and pixel formats."""
  source, target = check_format(source), check_format(target)
  boxes = np.asarray(boxes, np.float32)
  if source == target:
    return boxes
  scale = {} if height is None or width is None else {
      "height": np.float32(height), "width": np.float32(width)}
  return np.stack(convert(*np.moveaxis(boxes, -1, 0), source, target, **scale),
                  axis=-1).astype(np.float32)


def to_keras(image: np.ndarray, objects: dict, max_boxes: int,
             bounding_box_format: str = "rel_yxyx", size=None, bbox_key: str = "bbox",
             label_key: str = "label") -> dict:
  """`box_ops.to_keras`: {"images": image, "bounding_boxes": {"boxes": float32
  [max_boxes, 4], "labels": int32 [max_boxes]}}, padded with -1, the first `max_boxes`
  objects kept; pixel formats refer to `size`, by default the image's own."""
  bounding_box_format = check_format(bounding_box_format)
  height, width = image.shape[:2] if size is None else _size(size)
  boxes = boxes_to_format(_boxes(objects, bbox_key)[:max_boxes], "rel_yxyx",
                          bounding_box_format, height, width)
  labels = np.asarray(objects[label_key]).reshape(-1)[:max_boxes].astype(np.int32)
  padded_boxes = np.full((max_boxes, 4), PAD_VALUE, np.float32)
  padded_labels = np.full((max_boxes,), PAD_VALUE, np.int32)
  padded_boxes[:len(boxes)], padded_labels[:len(labels)] = boxes, labels
  return {"images": image, "bounding_boxes": {"boxes": padded_boxes, "labels": padded_labels}}


def multi_hot(labels, num_classes: int) -> np.ndarray:
  """Multi-label class ids [K] -> float32 [num_classes], 1 where a class is present."""
  labels = np.asarray(labels, np.int64).reshape(-1)
  if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
    raise ValueError(f"class ids must be in [0, {num_classes}): {labels}")
  hot = np.zeros(num_classes, np.float32)
  hot[labels] = 1
  return hot
