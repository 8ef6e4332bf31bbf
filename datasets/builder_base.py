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
* Generation: `self.generation` runs per-example work locally (worker pool) or on
  Beam when the build has Beam options, and gathers the problems and notes of the
  whole build; `_finish_generation` raises them as one error or records them.
  TFDS's in-memory shuffle is capped so memory stays flat in the number of images.
"""

from etils import epath
import tensorflow_datasets as tfds
from tensorflow_datasets.core import utils as tfds_utils

from imagesets import checksums
from imagesets import generation
from imagesets import parallel_map
from imagesets import problems
from imagesets import sharding
from imagesets import shuffle_memory

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
    use_beam = (download_config.beam_options is not None
                or download_config.beam_runner is not None)
    with shuffle_memory.limit(), parallel_map.executor(threads=self._reads_remote_files()) as pool:
      self.generation = generation.Generation(use_beam=use_beam, data_dir=self.data_path,
                                              pool=pool)
      try:
        split_infos = super()._generate_splits(
            dl_manager, sharding.with_min_shards(download_config))
      except Exception:
        # TFDS can stop before every split ran (e.g. a split without one good example).
        # If bad items caused it, check the rest too, so that one error names every bad
        # item of the source; any other failure is re-raised without more work.
        if self.generation.report().problems:
          self.generation.check_unfinished()
          self._finish_generation(self.generation.report())
        raise
    self._finish_generation(self.generation.report())
    return split_infos

  def _reads_remote_files(self) -> bool:
    """True when per-example work reads a bucket: threads then, not forked processes."""
    return False

  def _finish_generation(self, report: generation.Report) -> None:
    """Raises one error for every problem; builders say where the source is and the fix."""
    problems.raise_if_any(report.problems, source=self.name,
                          fix="repair or remove the items named above.")
