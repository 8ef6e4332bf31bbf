"""What the detection transforms of both pipelines (`box_ops` for tf.data, `numpy_box_ops`
for Grain's workers) share and check their settings against: keras 3's box formats
(`keras.utils.bounding_boxes.convert_format`: "rel_" ones are fractions of the image's
height and width, the others pixels), the padding keras' `MaxNumBoundingBoxes` writes for
missing boxes and labels, and the share of a box that must stay visible in a crop.

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
