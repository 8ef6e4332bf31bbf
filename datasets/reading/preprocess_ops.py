"""Small named transforms for tf.data input pipelines, composed like big_vision's pp ops.

Every op is a factory: `op(settings...)` returns a function `dict -> dict` that reads and
writes named features of one example (a copy of the dict; the input is not mutated).
`compose(*ops)` chains them into one function for `Dataset.map`:

    preprocess = compose(decode_and_random_crop(224), random_flip_left_right(),
                         keep("image", "label"))

Random ops are *stateless*: they draw from the example's own seed, `data[SEED_KEY]`
(an int64 vector of 2, attached by `input_pipeline` from a seeded stream), folded with a
per-op salt. So the same seeds give the same crops and flips whatever the thread
scheduling, and ops listed together with the same `keys` (image and mask) get the very
same crop, scale and flip.

Ops that cast back to integers round and saturate. Geometric ops for image + mask pairs
take the images' `keys` and the masks' `mask_keys` separately (the caller says which
features are masks; names are not guessed): masks are only ever resized nearest-neighbour,
so class ids are never blended, and padded with `MASK_PAD_VALUE` 255 (VOC's "void",
ignored by losses and metrics); images bilinear, padded with `IMAGE_PAD_VALUE` 0.

Ops that work on pixel values only (`to_float`, `normalize`) are rank-agnostic, so they can
also run once per batch after `Dataset.batch`, which is cheaper.
"""

from typing import Callable, Sequence

import tensorflow as tf

from imagesets.constants import IMAGE_PAD_VALUE, MASK_PAD_VALUE  # noqa: F401  (re-exported)
from imagesets.constants import (  # noqa: F401  (re-exported: the pipelines' defaults)
    CENTRAL_CROP_FRACTION, CROP_AREA_RANGE, CROP_ASPECT_RATIO_RANGE, IMAGE_SIZE)

Op = Callable[[dict], dict]

SEED_KEY = "_seed"

# Distinct salts keep the random ops of one example independent of each other.
_CROP_SALT, _FLIP_SALT, _SCALE_SALT, _PATCH_SALT = 1, 2, 3, 4


def _size(size) -> tuple[int, int]:
  return (size, size) if isinstance(size, int) else tuple(size)


def compose(*ops: Op) -> Op:
  """One op that applies `ops` left to right."""
  def composed(data):
    for op in ops:
      data = op(data)
    return data
  return composed


def _op_seed(data, salt):
  return tf.random.experimental.stateless_fold_in(data[SEED_KEY], salt)


def is_jpeg(contents: tf.Tensor) -> tf.Tensor:
  """True when the encoded bytes start with the JPEG SOI marker (FF D8 FF)."""
  return tf.equal(tf.strings.substr(contents, 0, 3), b"\xff\xd8\xff")


def _decode_any(contents, channels):
  # decode_image reads JPEG, PNG, GIF (first frame) and BMP.
  image = tf.io.decode_image(contents, channels=channels, expand_animations=False)
  image.set_shape([None, None, channels])
  return image


def _to_dtype(image, dtype, in_range=False):
  """Casts back to an integer dtype, rounding; clips unless values are `in_range`."""
  if dtype.is_integer and image.dtype.is_floating:
    image = tf.round(image)
  # Bilinear and nearest only blend input values, so they cannot leave the dtype's range.
  return tf.cast(image, dtype) if in_range else tf.saturate_cast(image, dtype)


def _resize(image, size, method="bilinear"):
  """Resizes to exactly `size`, keeping the dtype (uint8 in, uint8 out)."""
  resized = tf.image.resize(image, _size(size), method=method)
  return _to_dtype(resized, image.dtype, in_range=method in ("bilinear", "nearest"))


def _crop_window(shape, seed, area_range, aspect_ratio_range):
  """Inception-style window (offset_y, offset_x, height, width) inside an image of `shape`."""
  begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
      image_size=shape, bounding_boxes=tf.zeros([1, 0, 4]), seed=seed,
      min_object_covered=0.0, aspect_ratio_range=aspect_ratio_range,
      area_range=area_range, max_attempts=10, use_image_if_no_bounding_boxes=True)
  return begin[0], begin[1], size[0], size[1]


def _central_window(shape, fraction):
  """Central square of side `fraction` * the shorter side."""
  height, width = shape[0], shape[1]
  side = tf.cast(tf.cast(tf.minimum(height, width), tf.float32) * fraction, tf.int32)
  side = tf.maximum(side, 1)
  return (height - side) // 2, (width - side) // 2, side, side


def _decode_window(contents, channels, window_fn):
  """Decodes only the window `window_fn(shape)` of an encoded image.

  JPEG goes through `decode_and_crop_jpeg` on a window computed from the header alone
  (`extract_jpeg_shape`), so the pixels outside the window are never produced. Anything
  else (PNG, GIF, BMP) is decoded whole and sliced: same window, same result.
  """
  return _decode_window_and_shape(contents, channels, window_fn)[0]


def _decode_window_and_shape(contents, channels, window_fn):
  """`_decode_window`, plus the window (int32 [offset_y, offset_x, height, width]) and the
  whole image's int32 [height, width]: for ops that move coordinates (boxes) with the pixels.
  """
  def jpeg():
    shape = tf.image.extract_jpeg_shape(contents)
    window = tf.stack(window_fn(shape))
    return (tf.image.decode_and_crop_jpeg(contents, window, channels=channels), window,
            shape[:2])

  def other():
    image = _decode_any(contents, channels)
    shape = tf.shape(image)
    offset_y, offset_x, height, width = window_fn(shape)
    return (image[offset_y:offset_y + height, offset_x:offset_x + width],
            tf.stack([offset_y, offset_x, height, width]), shape[:2])

  image, window, shape = tf.cond(is_jpeg(contents), jpeg, other)
  image.set_shape([None, None, channels])
  return image, window, shape


def decode(key: str = "image", channels: int = 3) -> Op:
  """Encoded bytes (JPEG, PNG, GIF, BMP) -> uint8 [H, W, channels].

  Use `channels=1` for masks: a single-channel PNG of class ids decodes to those ids.
  """
  def op(data):
    return {**data, key: _decode_any(data[key], channels)}
  return op


def decode_and_random_crop(size, key: str = "image",
                           area_range: Sequence[float] = CROP_AREA_RANGE,
                           aspect_ratio_range: Sequence[float] = CROP_ASPECT_RATIO_RANGE) -> Op:
  """Random-resized ("Inception") crop fused into decoding, resized to `size`.

  The crop window covers `area_range` of the image with an aspect ratio in
  `aspect_ratio_range`; JPEG decodes only that window (see `_decode_window`).
  """
  def op(data):
    seed = _op_seed(data, _CROP_SALT)
    window = lambda shape: _crop_window(shape, seed, area_range, aspect_ratio_range)
    return {**data, key: _resize(_decode_window(data[key], 3, window), size)}
  return op


def random_resized_crop(size, key: str = "image",
                        area_range: Sequence[float] = CROP_AREA_RANGE,
                        aspect_ratio_range: Sequence[float] = CROP_ASPECT_RATIO_RANGE) -> Op:
  """`decode_and_random_crop` for already decoded images (e.g. from a cache).

  For the same example seed it picks the same window as `decode_and_random_crop`.
  """
  def op(data):
    image = data[key]
    seed = _op_seed(data, _CROP_SALT)
    offset_y, offset_x, height, width = _crop_window(
        tf.shape(image), seed, area_range, aspect_ratio_range)
    crop = image[offset_y:offset_y + height, offset_x:offset_x + width]
    return {**data, key: _resize(crop, size)}
  return op


def decode_and_central_crop(size, key: str = "image", crop_fraction: float = CENTRAL_CROP_FRACTION) -> Op:
  """Deterministic evaluation crop fused into decoding.

  Decodes the central square of side `crop_fraction` * the shorter side and resizes it to
  `size` (the usual "resize to size / 0.875, crop the centre" without the wasted pixels).
  """
  def op(data):
    window = lambda shape: _central_window(shape, crop_fraction)
    return {**data, key: _resize(_decode_window(data[key], 3, window), size)}
  return op


def resize(size, key: str = "image", method: str = "bilinear") -> Op:
  """Resizes `key` to exactly `size` (aspect ratio not kept); same dtype out.

  Use `method="nearest"` for masks.
  """
  def op(data):
    return {**data, key: _resize(data[key], size, method)}
  return op


def _aspect_window(shape, size):
  """The largest central window with the aspect ratio of `size` (keras' smart_resize)."""
  height, width = shape[0], shape[1]
  target_height, target_width = _size(size)
  crop_height = tf.maximum(1, tf.minimum(height, tf.cast(
      tf.cast(width * target_height, tf.float32) / target_width, tf.int32)))
  crop_width = tf.maximum(1, tf.minimum(width, tf.cast(
      tf.cast(height * target_width, tf.float32) / target_height, tf.int32)))
  return ((height - crop_height) // 2, (width - crop_width) // 2, crop_height, crop_width)


FITS = ("stretch", "crop", "pad")


def decode_and_fit(size, key: str = "image", fit: str = "stretch",
                   method: str = "bilinear") -> Op:
  """Encoded image -> float32 [height, width, 3] of `size`, values 0-255 (not rounded).

  `fit`: "stretch" resizes the whole image (aspect ratio not kept); "crop" takes the
  largest central window of the target's aspect ratio first; "pad" keeps the aspect ratio
  and pads with 0. Bit for bit the images of keras' `image_dataset_from_directory`
  (default, `crop_to_aspect_ratio`, `pad_to_aspect_ratio`): so the whole image is decoded
  (libjpeg's windowed decode upsamples chroma differently at the window's edges).
  """
  if fit not in FITS:
    raise ValueError(f"fit must be one of {FITS}, not {fit!r}")

  def op(data):
    return {**data, key: _fit(_decode_any(data[key], 3), size, fit, method)}
  return op


def _fit(image, size, fit, method):
  """The pixels of `decode_and_fit` from a decoded image."""
  height, width = _size(size)
  if fit == "crop":
    offset_y, offset_x, crop_height, crop_width = _aspect_window(tf.shape(image), size)
    image = image[offset_y:offset_y + crop_height, offset_x:offset_x + crop_width]
  if fit == "pad":
    image = tf.image.resize_with_pad(image, height, width, method=method)
  else:
    image = tf.image.resize(image, (height, width), method=method)
  image.set_shape([height, width, 3])
  return tf.cast(image, tf.float32)


def _method(key, mask_keys):
  return "nearest" if key in mask_keys else "bilinear"


def _pad_value(key, mask_keys):
  return MASK_PAD_VALUE if key in mask_keys else IMAGE_PAD_VALUE


def _pad_to_at_least(image, height, width, value, centred):
  shape = tf.shape(image)
  pad_y = tf.maximum(height - shape[0], 0)
  pad_x = tf.maximum(width - shape[1], 0)
  before_y, before_x = (pad_y // 2, pad_x // 2) if centred else (0, 0)
  return tf.pad(image, [[before_y, pad_y - before_y], [before_x, pad_x - before_x], [0, 0]],
                constant_values=tf.cast(value, image.dtype))


def _flip_drawn(data) -> tf.Tensor:
  """Whether `random_flip_left_right` mirrors this example (a bool scalar)."""
  return tf.random.stateless_uniform([], _op_seed(data, _FLIP_SALT)) < 0.5


def random_flip_left_right(keys: Sequence[str] = ("image",)) -> Op:
  """Mirrors all `keys` together with probability 1/2."""
  def op(data):
    flip = _flip_drawn(data)
    out = dict(data)
    for key in keys:
      out[key] = tf.cond(flip, lambda x=data[key]: tf.reverse(x, [1]), lambda x=data[key]: x)
    return out
  return op


def random_scale(scale_range: Sequence[float] = (0.5, 2.0), keys: Sequence[str] = ("image",),
                 mask_keys: Sequence[str] = ()) -> Op:
  """Rescales `keys` (bilinear) and `mask_keys` (nearest) by one random factor."""
  mask_keys = tuple(mask_keys)
  keys = (*keys, *mask_keys)

  def op(data):
    scale = tf.random.stateless_uniform([], _op_seed(data, _SCALE_SALT),
                                        scale_range[0], scale_range[1])
    shape = tf.cast(tf.shape(data[keys[0]])[:2], tf.float32)
    new_size = tf.maximum(tf.cast(tf.round(shape * scale), tf.int32), 1)
    out = dict(data)
    for key in keys:
      out[key] = _to_dtype(tf.image.resize(data[key], new_size, method=_method(key, mask_keys)),
                           data[key].dtype)
    return out
  return op


def random_crop_or_pad(size, keys: Sequence[str] = ("image",),
                       mask_keys: Sequence[str] = ()) -> Op:
  """Pads `keys` and `mask_keys` (bottom/right) up to `size`, then crops one random `size`
  window, the same for all. Masks are padded with 255, so padded pixels are ignorable.
  """
  height, width = _size(size)
  mask_keys = tuple(mask_keys)
  keys = (*keys, *mask_keys)

  def op(data):
    out = {**data, **{key: _pad_to_at_least(data[key], height, width,
                                            _pad_value(key, mask_keys), centred=False)
                      for key in keys}}
    shape = tf.shape(out[keys[0]])
    seed_y, seed_x = _op_seed(data, _PATCH_SALT), _op_seed(data, _PATCH_SALT + 100)
    offset_y = tf.random.stateless_uniform([], seed_y, 0, shape[0] - height + 1, tf.int32)
    offset_x = tf.random.stateless_uniform([], seed_x, 0, shape[1] - width + 1, tf.int32)
    for key in keys:
      crop = out[key][offset_y:offset_y + height, offset_x:offset_x + width]
      crop.set_shape([height, width, data[key].shape[-1]])
      out[key] = crop
    return out
  return op


def crop_or_pad(size, keys: Sequence[str] = ("image",), mask_keys: Sequence[str] = ()) -> Op:
  """`tf.image.resize_with_crop_or_pad` for `keys` and `mask_keys`.

  Central crop where larger than `size`, centred padding where smaller (masks: 255,
  where TF's own op would pad with 0 = background).
  """
  height, width = _size(size)
  mask_keys = tuple(mask_keys)
  keys = (*keys, *mask_keys)

  def op(data):
    out = dict(data)
    for key in keys:
      padded = _pad_to_at_least(data[key], height, width, _pad_value(key, mask_keys),
                                centred=True)
      shape = tf.shape(padded)
      offset_y, offset_x = (shape[0] - height) // 2, (shape[1] - width) // 2
      crop = padded[offset_y:offset_y + height, offset_x:offset_x + width]
      crop.set_shape([height, width, data[key].shape[-1]])
      out[key] = crop
    return out
  return op


def to_float(key: str = "image") -> Op:
  """uint8 [0, 255] -> float32 [0, 1]."""
  def op(data):
    return {**data, key: tf.cast(data[key], tf.float32) / 255.0}
  return op


def normalize(mean: Sequence[float], std: Sequence[float], key: str = "image") -> Op:
  """(x - mean) / std per channel, on float images in [0, 1] (apply after `to_float`)."""
  mean_t = tf.constant(mean, tf.float32)
  std_t = tf.constant(std, tf.float32)

  def op(data):
    return {**data, key: (data[key] - mean_t) / std_t}
  return op


def keep(*keys: str) -> Op:
  """Drops every feature but `keys` (the per-example seed too, unless listed)."""
  def op(data):
    return {key: data[key] for key in keys}
  return op


def rename(**new_from_old: str) -> Op:
  """`rename(mask="class_mask")` renames feature `class_mask` to `mask`."""
  def op(data):
    out = {k: v for k, v in data.items() if k not in new_from_old.values()}
    out.update({new: data[old] for new, old in new_from_old.items()})
    return out
  return op
