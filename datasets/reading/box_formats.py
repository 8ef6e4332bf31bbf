"""What the detection transforms of both pipelines (`box_ops` for tf.data, `numpy_box_ops`
for Grain's workers) share and check their settings against: keras 3's box formats
(`keras.utils.bounding_boxes.convert_format`: "rel_" ones are fractions of the image's
height and width, the others pixels), the padding keras' `MaxNumBoundingBoxes` writes for
missing boxes and labels, the share of a box that must stay visible in a crop, and the
arithmetic from one format to another (`convert`).

No TensorFlow and no OpenCV: either side imports it.
"""

FORMATS = ("xyxy", "yxyx", "xywh", "center_xywh", "center_yxhw",
           "rel_xyxy", "rel_yxyx", "rel_xywh", "rel_center_xywh")
PAD_VALUE = -1
MIN_VISIBLE = 0.5


def check_format(name: str) -> str:
  """`name` as one of FORMATS (any case), or ValueError."""
  if name.lower() not in FORMATS:
    raise ValueError(f"box format must be one of {FORMATS}, not {name!r}")
  return name.lower()


def check_min_visible(min_visible: float) -> float:
  if not 0 <= min_visible <= 1:
    raise ValueError(f"min_visible must be in [0, 1], not {min_visible}")
  return min_visible


def convert(a, b, c, d, source: str, target: str, height=None, width=None) -> tuple:
  """The 4 components of boxes in keras format `source` (`a, b, c, d`: arrays or tensors,
  one per coordinate) as components of `target`. Plain arithmetic, so the same code serves
  numpy and TensorFlow; `height` and `width` (of the image, already of the components'
  dtype) are needed between relative and pixel formats."""
  ymin, xmin, ymax, xmax = {
      "xyxy": lambda: (b, a, d, c),
      "yxyx": lambda: (a, b, c, d),
      "xywh": lambda: (b, a, b + d, a + c),
      "center_xywh": lambda: (b - d / 2, a - c / 2, b + d / 2, a + c / 2),
      "center_yxhw": lambda: (a - c / 2, b - d / 2, a + c / 2, b + d / 2),
  }[source.removeprefix("rel_")]()
  if source.startswith("rel_") != target.startswith("rel_"):
    if height is None or width is None:
      raise ValueError(f"{source} -> {target} needs the image's height and width")
    y_scale, x_scale = height, width
    if target.startswith("rel_"):
      y_scale, x_scale = 1 / y_scale, 1 / x_scale
    ymin, xmin, ymax, xmax = ymin * y_scale, xmin * x_scale, ymax * y_scale, xmax * x_scale
  return {
      "xyxy": lambda: (xmin, ymin, xmax, ymax),
      "yxyx": lambda: (ymin, xmin, ymax, xmax),
      "xywh": lambda: (xmin, ymin, xmax - xmin, ymax - ymin),
      "center_xywh": lambda: ((xmin + xmax) / 2, (ymin + ymax) / 2, xmax - xmin, ymax - ymin),
      "center_yxhw": lambda: ((ymin + ymax) / 2, (xmin + xmax) / 2, ymax - ymin, xmax - xmin),
  }[target.removeprefix("rel_")]()
