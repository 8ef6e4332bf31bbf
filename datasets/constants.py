"""One home for the values several layers share (CLI, builds, read path, publishing).

Nothing here imports TensorFlow, so the command line can read these without loading it.
"""

import os
import pathlib

# Where `imagesets build`, `verify` and `publish` look by default: TFDS's own default.
# TFDS does not expand "~" in a data_dir; our calls do (`data_dir()`).
DEFAULT_DATA_DIR = os.path.join("~", "tensorflow_datasets")

# The cache of fetched bucket versions (`<cache>/<scheme>/...`) and of keras-style builds
# (`<cache>/from_directory/...`): `$IMAGESETS_CACHE`, else `~/.cache/imagesets`.
CACHE_ENV = "IMAGESETS_CACHE"
DEFAULT_CACHE_DIR = os.path.join("~", ".cache", "imagesets")

# The files a build reads as images (by name): what TensorFlow's decode_image decodes.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".jpe", ".png", ".bmp", ".gif")

# Padding: images with 0 (black); masks with 255, VOC's "void" class that losses and
# metrics ignore (0 would be the background class).
IMAGE_PAD_VALUE = 0
MASK_PAD_VALUE = 255

# The augmentation defaults of every training / evaluation pipeline and op (tf.data and
# Grain): Inception's random-resized crop (8-100 % of the area, aspect ratios 3/4-4/3), the
# usual ImageNet evaluation crop (the central 87.5 %), and the output size.
IMAGE_SIZE = 224
CROP_AREA_RANGE = (0.08, 1.0)
CROP_ASPECT_RATIO_RANGE = (3 / 4, 4 / 3)
CENTRAL_CROP_FRACTION = 0.875
# Detection's random-resized crop keeps most of each object (8 % of the area would cut most
# boxes): 30-100 % of the image.
DETECTION_CROP_AREA_RANGE = (0.3, 1.0)

# A version's page (`reports.report_page`), beside its card: published and fetched with
# the version, not downloaded by a job that streams it (nothing reads it to train).
PAGE_FILE = "report.html"
# The folder of a version's record index (`building.record_index`): what a later version is
# built on; published and fetched with the version, not downloaded by a job that streams it.
RECORD_INDEX_FOLDER = "record_index"

# `shorter_side` of builds and image checks: 0 stores every image at its original size.
ORIGINAL_SIZE = 0

# A dataset name of your own (`imagesets build --name`), and a version X.Y.Z as TFDS
# accepts it (no leading zeros): checked by the command line before TensorFlow loads.
DATASET_NAME_PATTERN = r"[a-z][a-z0-9_]*"
VERSION_PATTERN = r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"


def data_dir(path=None) -> str:
  """A TFDS data_dir with "~" expanded (DEFAULT_DATA_DIR when None)."""
  return os.path.expanduser(os.fspath(path or DEFAULT_DATA_DIR))


def cache_root(cache_dir=None) -> pathlib.Path:
  """The cache root: `cache_dir`, else `$IMAGESETS_CACHE`, else DEFAULT_CACHE_DIR."""
  if cache_dir is None:
    cache_dir = os.environ.get(CACHE_ENV) or DEFAULT_CACHE_DIR
  return pathlib.Path(cache_dir).expanduser()
