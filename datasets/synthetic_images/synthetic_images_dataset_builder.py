"""synthetic_images: seeded random images, the "random image-shaped matrices" dataset."""

import dataclasses

import numpy as np
import tensorflow_datasets as tfds

from imagesets.building import builder_base
from imagesets.building import png_stored


@dataclasses.dataclass(eq=False)
class SyntheticConfig(tfds.core.BuilderConfig):
  """Sizes are inclusive [low, high] ranges; equal bounds give a fixed shape."""

  num_train: int = 800
  num_test: int = 200
  height: tuple[int, int] = (224, 224)
  width: tuple[int, int] = (224, 224)
  num_classes: int = 10
  seed: int = 0

  @property
  def image_shape(self):
    fixed = lambda bounds: bounds[0] if bounds[0] == bounds[1] else None
    return (fixed(self.height), fixed(self.width), 3)


class Builder(builder_base.ImageSetBuilder):
  """Seeded random uint8 RGB images with labels, stored as lossless PNG."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Initial release."}
  BUILDER_CONFIGS = [
      SyntheticConfig(
          name="default",
          description="1,000 images of 224x224x3 (800 train, 200 test), labels 0-9.",
      ),
      SyntheticConfig(
          name="tiny",
          description="16 images of 32x32x3 (12 train, 4 test) for smoke tests.",
          num_train=12, num_test=4, height=(32, 32), width=(32, 32),
      ),
      SyntheticConfig(
          name="variable",
          description="200 images with heights and widths in [48, 160] (160 train, "
          "40 test), for padded batching and resize pipelines.",
          num_train=160, num_test=40, height=(48, 160), width=(48, 160),
      ),
  ]

  def _info(self) -> tfds.core.DatasetInfo:
    config = self.builder_config
    return self.dataset_info_from_configs(
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=config.image_shape, encoding_format="png"),
            "label": tfds.features.ClassLabel(num_classes=config.num_classes),
            "height": tfds.features.Scalar(np.int32),
            "width": tfds.features.Scalar(np.int32),
        }),
        supervised_keys=("image", "label"),
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing to download.
    config = self.builder_config
    # Through `generation`, like every builder: made on the workers and fingerprinted there
    # for the duplicate report (keys "0", "1", ...: TFDS hashes 1 and "1" alike, so the
    # records keep their order).
    return {
        split: self.generation.examples(
            split, [(str(index), (config, split_id, index)) for index in range(count)],
            process_item)
        for split, split_id, count in (("train", 0, config.num_train),
                                       ("test", 1, config.num_test))
    }


def process_item(item: tuple[SyntheticConfig, int, int]) -> tuple[dict, None]:
  """`generation`'s per-item work: (config, split id, index) -> (example, no note)."""
  return make_example(*item), None


def make_example(config: SyntheticConfig, split_id: int, index: int) -> dict:
  """One example, a pure function of (config, split, index): no global RNG state."""
  rng = np.random.default_rng([config.seed, split_id, index])
  height = int(rng.integers(config.height[0], config.height[1], endpoint=True))
  width = int(rng.integers(config.width[0], config.width[1], endpoint=True))
  label = int(rng.integers(0, config.num_classes))
  pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
  return {
      "image": png_stored.encode(pixels),
      "label": label,
      "height": height,
      "width": width,
  }
