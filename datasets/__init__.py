"""tfds-imagesets: TFDS builders for image collections.

`import imagesets` registers every builder with TFDS, so that
`tfds.load('synthetic_images/tiny', data_dir=...)` and
`tfds build synthetic_images --imports imagesets` find them.

It does so without loading TensorFlow itself (the `imagesets` command's help, `list`,
`fetch` and `publish` start in well under a second): if `tensorflow_datasets` is
already imported, the builders register at once; otherwise they register when TFDS
first looks a dataset name up (`tfds.builder`, `tfds.load`, `tfds.list_builders`). The
names below load their module on first use.
"""

import functools
import importlib
import sys

from imagesets import startup

_BUILDER_MODULES = ("synthetic_images.synthetic_images_dataset_builder",
                    "voc_segmentation.voc_segmentation_dataset_builder",
                    "flowers.flowers_dataset_builder",
                    "class_folders.class_folders_dataset_builder")


def _register_builders() -> None:
  # Importing a builder module registers its dataset name.
  for name in _BUILDER_MODULES:
    importlib.import_module(f"imagesets.{name}")


def _register_on_first_lookup() -> None:
  """Makes TFDS's name lookups register our builders first.

  Not at once: TFDS may be imported by one of our own modules half-way through its own
  import, and the builders import those modules.
  """
  from tensorflow_datasets.core import registered  # pylint: disable=import-outside-toplevel

  def registering(lookup):
    @functools.wraps(lookup)
    def wrapped(*args, **kwargs):
      _register_builders()
      return lookup(*args, **kwargs)
    return wrapped
  for name in ("imported_builder_cls", "list_imported_builders"):
    setattr(registered, name, registering(getattr(registered, name)))


# TensorFlow's start-up noise stays off the terminal whenever it loads (see startup).
startup.install_import_hooks()
if "tensorflow_datasets" in sys.modules:
  _register_builders()
else:
  startup.when_imported("tensorflow_datasets", _register_on_first_lookup)

# name -> module: the training pipelines (one call per task, built from `preprocess_ops`),
# training from a team bucket (docs/training_from_a_bucket.md: every pipeline streams a
# bucket data_dir, `load` gives plain examples the same way, `fetch` a whole verified copy)
# and keras' call over a cached build of
# your own folder (docs/class_folders.md).
_EXPORTS = {
    "input_pipeline": "imagesets.reading",
    "preprocess_ops": "imagesets.reading",
    "DatasetNotPreparedError": "imagesets.reading.input_pipeline",
    "classification_train": "imagesets.reading.input_pipeline",
    "classification_eval": "imagesets.reading.input_pipeline",
    "segmentation_train": "imagesets.reading.input_pipeline",
    "segmentation_eval": "imagesets.reading.input_pipeline",
    "fetch": "imagesets.publishing.fetch",
    "load": "imagesets.reading.streaming",
    "image_dataset_from_directory": "imagesets.class_folders.from_directory",
}
__all__ = list(_EXPORTS)


def __getattr__(name):
  if name not in _EXPORTS:
    raise AttributeError(f"module 'imagesets' has no attribute {name!r}")
  module = importlib.import_module(_EXPORTS[name])
  value = getattr(module, name, None)
  if value is None:  # a submodule of the package named
    value = importlib.import_module(f"{_EXPORTS[name]}.{name}")
  globals()[name] = value
  return value


def __dir__():
  return sorted([*globals(), *_EXPORTS])
