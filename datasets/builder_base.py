"""The base class every imagesets builder derives from.

It holds the two rules that all our builders share, so each builder stays a thin
description of its source:

* Registration: only the canonical module `imagesets.<name>.<name>_dataset_builder`
  registers the dataset name. `tfds build datasets/<name>` (and Beam workers that
  unpickle it) import the same file a second time under another module name; that
  copy stays unregistered instead of failing with "already registered".
* Sharding: never fewer than `sharding.MIN_SHARDS` shards per split, so
  multi-worker input sharding works on every split.
* Checksums: download checksums live in the top-level `checksums/<name>.txt`
  (also where `tfds build --register_checksums` writes them).
"""

from etils import epath
import tensorflow_datasets as tfds
from tensorflow_datasets.core import utils as tfds_utils

from imagesets import checksums
from imagesets import sharding

CANONICAL_PACKAGE = "imagesets."


class ImageSetBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """GeneratorBasedBuilder with imagesets' registration and shard-count rules."""

  def __init_subclass__(cls, skip_registration=False, **kwargs):
    canonical = cls.__module__.startswith(CANONICAL_PACKAGE)
    super().__init_subclass__(
        skip_registration=skip_registration or not canonical, **kwargs
    )

  @tfds_utils.classproperty
  @classmethod
  def _checksums_path(cls) -> epath.Path:
    return epath.Path(checksums.DIRECTORY) / f"{cls.name}.txt"

  def _generate_splits(self, dl_manager, download_config):
    return super()._generate_splits(
        dl_manager, sharding.with_min_shards(download_config)
    )
