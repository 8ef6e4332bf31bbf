"""synthetic_images as a builder that yields its examples to TFDS itself, as TFDS's own
builders do (ours go through `generation` since synthetic_images joined them): the same
folder, examples and records, for the tests of what TFDS does with yielded examples
(prepared_records' sorting, tfds_internals' copy of TFDS's split generation)."""

import imagesets  # noqa: F401
from imagesets.synthetic_images import synthetic_images_dataset_builder as synthetic


class Builder(synthetic.Builder, skip_registration=True):
  name = "synthetic_images"  # (the same folder and records as synthetic_images)
  __module__ = synthetic.__name__  # (where TFDS finds its description and checksums)

  def _split_generators(self, dl_manager):
    config = self.builder_config
    return {split: ((index, synthetic.make_example(config, split_id, index))
                    for index in range(count))
            for split, split_id, count in (("train", 0, config.num_train),
                                           ("test", 1, config.num_test))}
