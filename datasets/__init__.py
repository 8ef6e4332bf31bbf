"""tfds-imagesets: TFDS builders for image collections.

`import imagesets` makes every builder of this package (`registry.DATASETS`) known to
TFDS, so that `tfds.load('synthetic_images/tiny', data_dir=...)`, `tfds.builder(...)`
and `tfds build synthetic_images --imports imagesets` find them. It does so through
TFDS's public extension point, a dataset builder provider
(`tfds.core.add_dataset_builder_provider`): a builder's module (and TensorFlow) loads
when TFDS is first asked for one of our names, and nothing of TFDS is replaced.
`tfds.list_builders()` lists a builder of ours once it is loaded.

The `imagesets` command registers only when a command needs TFDS (`build`, `verify`):
its help, argument errors, `list`, `fetch` and `publish` start in well under a second.
The names below load their module on first use.
"""

import importlib

from imagesets import registry
from imagesets import startup


class _OurBuilders:
  """TFDS's DatasetBuilderProvider protocol over `registry`: a builder module is imported
  (which registers its class with TFDS the usual way) when its name is first looked up."""

  def has_dataset(self, name: str) -> bool:
    return name in registry.BY_NAME

  def get_builder_cls(self, name: str):
    return importlib.import_module(registry.BY_NAME[name].module).Builder


_registered = False


def register_with_tfds() -> None:
  """Makes our dataset names known to TFDS (once per process; imports TFDS, not TF)."""
  global _registered
  if _registered:
    return
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  # First, so that our names never make TFDS import its 1,000 legacy builders to look.
  tfds.core.add_dataset_builder_provider(_OurBuilders(), index=0)
  _registered = True


if not startup.in_our_command():   # (the command registers when it needs TFDS)
  register_with_tfds()

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
    "fetch": "imagesets.storage.fetch",
    "load": "imagesets.reading.streaming",
    "image_dataset_from_directory": "imagesets.class_folders.from_directory",
    "quiet_tensorflow": "imagesets.startup",   # TensorFlow without its start-up lines
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
