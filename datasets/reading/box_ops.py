"""Detection transforms for tf.data: the geometry of `preprocess_ops` applied to the pixels
and to the objects' boxes together, and keras 3's box dict at the end.

A detection example holds `"image"` (encoded bytes, or decoded uint8 [H, W, 3]) and
`"objects"`: a dict of per-object tensors sharing their first dimension N, among them
`"bbox"` float32 [N, 4], normalised (ymin, xmin, ymax, xmax) in [0, 1] (TFDS'
`BBoxFeature`), and `"label"` int [N]. An op that drops objects drops the same rows of
every key of `"objects"` (flags such as "is_crowd" stay with their boxes).

The boxes refer to the stored pixels, which are upright: the builds rotate EXIF-oriented
photos upright, and TensorFlow's decoders ignore EXIF orientation.

    train = compose(decode_and_random_crop(512), random_flip_left_right(),
                    to_keras(max_boxes=100, bounding_box_format="xyxy"))
    evaluate = compose(decode_and_resize(512), to_keras(100, "xyxy"))

The random ops draw exactly as `preprocess_ops`' do (the example's `SEED_KEY`, the same
salts): `decode_and_random_crop` takes the very window of `preprocess_ops.
decode_and_random_crop` and `random_flip_left_right` the very flip of its namesake.
`numpy_box_ops` holds the same ops in numpy for Grain's workers.
"""

from typing import Sequence

import tensorflow as tf

from imagesets.reading.box_formats import (  # noqa: F401  (re-exported: the ops' settings)
    FORMATS, MIN_VISIBLE, PAD_VALUE, check_format, check_min_visible, convert)
from imagesets.reading.preprocess_ops import (  # noqa: F401  (SEED_KEY re-exported)
    CROP_AREA_RANGE, CROP_ASPECT_RATIO_RANGE, FITS, SEED_KEY, Op, _CROP_SALT, _aspect_window,
    _crop_window, _decode_any, _decode_window_and_shape, _fit, _flip_drawn, _op_seed, _resize,
    _size)


def _boxes(objects, bbox_key):
  return tf.reshape(tf.cast(objects[bbox_key], tf.float32), [-1, 4])


def crop_objects(objects: dict, window, image_shape, min_visible: float = MIN_VISIBLE,
                 bbox_key: str = "bbox") -> dict:
  """The objects seen through `window` (offset_y, offset_x, height, width, in pixels) of an
  image of `image_shape` (height, width, ...), boxes normalised to the window.

  A box's visible share is its area inside the window over its whole area; objects with a
  share of at least `min_visible` (and some area inside) stay, with their boxes clipped to
  the window, and the others go, all their keys with them. Degenerate boxes (zero height or
  width: points, lines) stay when they touch the window (edges included); inverted boxes go.
  """
  window = tf.cast(window, tf.float32)
  top, left, height, width = window[0], window[1], window[2], window[3]
  shape = tf.cast(image_shape, tf.float32)
  ymin, xmin, ymax, xmax = tf.unstack(
      _boxes(objects, bbox_key) * tf.stack([shape[0], shape[1], shape[0], shape[1]]), axis=-1)
  clipped_ymin, clipped_xmin = tf.maximum(ymin, top), tf.maximum(xmin, left)
  clipped_ymax = tf.minimum(ymax, top + height)
  clipped_xmax = tf.minimum(xmax, left + width)
  area = tf.nn.relu(ymax - ymin) * tf.nn.relu(xmax - xmin)
  visible = tf.nn.relu(clipped_ymax - clipped_ymin) * tf.nn.relu(clipped_xmax - clipped_xmin)
  touches = (clipped_ymin <= clipped_ymax) & (clipped_xmin <= clipped_xmax)
  keep = tf.where(area > 0, (visible > 0) & (tf.math.divide_no_nan(visible, area) >= min_visible),
                  touches)
  moved = tf.stack([(clipped_ymin - top) / height, (clipped_xmin - left) / width,
                    (clipped_ymax - top) / height, (clipped_xmax - left) / width], axis=-1)
  return {key: tf.boolean_mask(moved if key == bbox_key else value, keep)
          for key, value in objects.items()}


def _window_and_shape(image, window_fn):
  """(pixels of the window, window, whole image's (height, width)) of an encoded or decoded
  image; an encoded JPEG decodes only the window."""
  if image.dtype == tf.string:
    return _decode_window_and_shape(image, 3, window_fn)
  shape = tf.shape(image)
  offset_y, offset_x, height, width = window_fn(shape)
  return (image[offset_y:offset_y + height, offset_x:offset_x + width],
          tf.stack([offset_y, offset_x, height, width]), shape[:2])


def decode_and_random_crop(size, min_visible: float = MIN_VISIBLE,
                           area_range: Sequence[float] = CROP_AREA_RANGE,
                           aspect_ratio_range: Sequence[float] = CROP_ASPECT_RATIO_RANGE,
                           key: str = "image", objects_key: str = "objects",
                           bbox_key: str = "bbox") -> Op:
  """`preprocess_ops.decode_and_random_crop` (same window for the same example seed, same
  pixels) with the objects cropped along (`crop_objects`: those less than `min_visible`
  inside the window go). An already decoded image is cropped (`random_resized_crop`'s
  pixels).
  """
  check_min_visible(min_visible)

  def op(data):
    seed = _op_seed(data, _CROP_SALT)
    crop, window, shape = _window_and_shape(
        data[key], lambda shape: _crop_window(shape, seed, area_range, aspect_ratio_range))
    return {**data, key: _resize(crop, size),
            objects_key: crop_objects(data[objects_key], window, shape, min_visible, bbox_key)}
  return op


def flip_objects(objects: dict, bbox_key: str = "bbox") -> dict:
  """The objects of the left-right mirrored image: xmin' = 1 - xmax, xmax' = 1 - xmin."""
  ymin, xmin, ymax, xmax = tf.unstack(_boxes(objects, bbox_key), axis=-1)
  return {**objects, bbox_key: tf.stack([ymin, 1 - xmax, ymax, 1 - xmin], axis=-1)}


def random_flip_left_right(key: str = "image", objects_key: str = "objects",
                           bbox_key: str = "bbox") -> Op:
  """Mirrors the image and its boxes with probability 1/2: the draw of
  `preprocess_ops.random_flip_left_right` for the same example seed."""
  def op(data):
    flip = _flip_drawn(data)
    image, objects = data[key], data[objects_key]
    boxes = tf.where(flip, flip_objects(objects, bbox_key)[bbox_key], _boxes(objects, bbox_key))
    return {**data, key: tf.cond(flip, lambda: tf.reverse(image, [1]), lambda: image),
            objects_key: {**objects, bbox_key: boxes}}
  return op


def decode_and_resize(size, key: str = "image") -> Op:
  """Evaluation: the whole image (encoded or decoded) stretched to `size`, uint8 as the
  random crop's. Normalised boxes are unchanged (they stretch with the image)."""
  def op(data):
    image = data[key]
    image = _decode_any(image, 3) if image.dtype == tf.string else image
    return {**data, key: _resize(image, size)}
  return op


def _pad_placement(shape, size):
  """(top, left, height, width) of the image inside `tf.image.resize_with_pad`'s frame of
  `size`, in its arithmetic (float32, floors)."""
  target_height, target_width = (float(side) for side in _size(size))
  height, width = tf.cast(shape[0], tf.float32), tf.cast(shape[1], tf.float32)
  ratio = tf.maximum(width / target_width, height / target_height)
  resized_height, resized_width = height / ratio, width / ratio
  top = tf.maximum(0.0, tf.floor((target_height - resized_height) / 2))
  left = tf.maximum(0.0, tf.floor((target_width - resized_width) / 2))
  return top, left, tf.floor(resized_height), tf.floor(resized_width)


def _pad_objects(objects, shape, size, bbox_key):
  top, left, height, width = _pad_placement(shape, size)
  frame_height, frame_width = _size(size)
  ymin, xmin, ymax, xmax = tf.unstack(_boxes(objects, bbox_key), axis=-1)
  return {**objects, bbox_key: tf.stack(
      [(top + ymin * height) / frame_height, (left + xmin * width) / frame_width,
       (top + ymax * height) / frame_height, (left + xmax * width) / frame_width], axis=-1)}


def decode_and_fit(size, fit: str = "stretch", min_visible: float = MIN_VISIBLE,
                   method: str = "bilinear", key: str = "image", objects_key: str = "objects",
                   bbox_key: str = "bbox") -> Op:
  """`preprocess_ops.decode_and_fit` (float32 0-255, keras' `image_dataset_from_directory`
  pixels) with the boxes moved: "stretch" keeps them; "pad" (letterbox) scales them into the
  image's place in the padded frame; "crop" crops them to the central window like
  `crop_objects` (objects less than `min_visible` inside it go).
  """
  if fit not in FITS:
    raise ValueError(f"fit must be one of {FITS}, not {fit!r}")
  check_min_visible(min_visible)

  def op(data):
    image = data[key]
    image = _decode_any(image, 3) if image.dtype == tf.string else image
    shape, objects = tf.shape(image), data[objects_key]
    if fit == "crop":
      objects = crop_objects(objects, tf.stack(_aspect_window(shape, size)), shape,
                             min_visible, bbox_key)
    elif fit == "pad":
      objects = _pad_objects(objects, shape, size, bbox_key)
    return {**data, key: _fit(image, size, fit, method), objects_key: objects}
  return op


def boxes_to_format(boxes, source: str, target: str, height=None, width=None) -> tf.Tensor:
  """Boxes [..., 4] from keras format `source` to `target` (float32), as keras'
  `convert_format`; `height` and `width` (of the image) are needed between relative and
  pixel formats."""
  source, target = check_format(source), check_format(target)
  boxes = tf.cast(boxes, tf.float32)
  if source == target:
    return boxes
  scale = {} if height is None or width is None else {
      "height": tf.cast(height, tf.float32), "width": tf.cast(width, tf.float32)}
  return tf.stack(convert(*tf.unstack(boxes, axis=-1), source, target, **scale), axis=-1)


def _height_width(image):
  """The image's (height, width): static where known, else dynamic."""
  dynamic = tf.shape(image)
  return tuple(image.shape[axis] if image.shape[axis] is not None else dynamic[axis]
               for axis in (-3, -2))


def to_keras(max_boxes: int, bounding_box_format: str = "rel_yxyx", size=None,
             key: str = "image", objects_key: str = "objects", bbox_key: str = "bbox",
             label_key: str = "label") -> Op:
  """The example as keras 3's detection input: {"images": image, "bounding_boxes":
  {"boxes": float32 [max_boxes, 4] in `bounding_box_format`, "labels": int32 [max_boxes]}}.

  Missing objects are padded with -1 (boxes and labels), as keras' `MaxNumBoundingBoxes`
  does; past `max_boxes` only the first `max_boxes` objects are kept, so size `max_boxes`
  from the dataset's most objects per image to cut none. Pixel formats refer to `size`
  (height, width), by default the image's own. Every other feature is dropped.
  """
  bounding_box_format = check_format(bounding_box_format)

  def op(data):
    image, objects = data[key], data[objects_key]
    height, width = _height_width(image) if size is None else _size(size)
    boxes = boxes_to_format(_boxes(objects, bbox_key)[:max_boxes], "rel_yxyx",
                            bounding_box_format, height, width)
    labels = tf.cast(tf.reshape(objects[label_key], [-1])[:max_boxes], tf.int32)
    missing = max_boxes - tf.shape(labels)[0]
    boxes = tf.pad(boxes, [[0, missing], [0, 0]], constant_values=PAD_VALUE)
    labels = tf.pad(labels, [[0, missing]], constant_values=PAD_VALUE)
    boxes.set_shape([max_boxes, 4])
    labels.set_shape([max_boxes])
    return {"images": image, "bounding_boxes": {"boxes": boxes, "labels": labels}}
  return op


def multi_hot(num_classes: int, key: str = "labels") -> Op:
  """Multi-label class ids int [K] -> float32 [num_classes], 1 where a class is present
  (repeats count once, K = 0 gives zeros); ids outside [0, num_classes) fail the example."""
  def op(data):
    labels = tf.reshape(tf.cast(data[key], tf.int32), [-1])
    checks = [tf.debugging.assert_non_negative(labels, message=f"{key}: negative class id"),
              tf.debugging.assert_less(labels, num_classes,
                                       message=f"{key}: class id >= num_classes")]
    with tf.control_dependencies(checks):
      counts = tf.reduce_sum(tf.one_hot(labels, num_classes, dtype=tf.float32), axis=0)
    return {**data, key: tf.cast(counts > 0, tf.float32)}
  return op
