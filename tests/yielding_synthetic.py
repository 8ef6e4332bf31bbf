"""synthetic_images as a builder that yields its examples to TFDS itself, as TFDS's own
builders do (ours go through `generation` since synthetic_images joined them), exactly as
synthetic_images did before: the same folder, examples and records, for the tests of what
TFDS does with yielded examples (prepared_records' sorting, tfds_internals' copy of TFDS's
split generation) and of synthetic_images' shards against these."""

import imagesets  # noqa: F401
from imagesets.synthetic_images import synthetic_images_dataset_builder as synthetic


class Builder(synthetic.Builder, skip_registration=True):
  name = "synthetic_images"  # (the same folder and records as synthetic_images)
  __module__ = synthetic.__name__  # (where TFDS finds its description and checksums)

  def _split_generators(self, dl_manager):
    config = self.builder_config
    return {"train": _yielded(config, split_id=0, count=config.num_train),
            "test": _yielded(config, split_id=1, count=config.num_test)}


def _yielded(config, split_id, count):
  for index in range(count):
    yield index, synthetic.make_example(config, split_id, index)
