"""flowers: TF's flower_photos, or any class-per-folder image tree, as validated TFRecords."""

import dataclasses

from absl import logging
import numpy as np
import tensorflow_datasets as tfds

from imagesets.building import archives
from imagesets.building import builder_base
from imagesets.building import class_folders
from imagesets.building import generation
from imagesets.building import problems
from imagesets.building import splits
from imagesets.flowers import flower_files

URL = "http://download.tensorflow.org/example_images/flower_photos.tgz"
FLOWER_CLASSES = ["daisy", "dandelion", "roses", "sunflowers", "tulips"]


@dataclasses.dataclass(eq=False)
class FlowersConfig(tfds.core.BuilderConfig):
  """`root` empty = TF's flower_photos; else a class-per-folder tree (local or bucket)."""

  root: str = ""
  split_proportions: dict[str, float] = dataclasses.field(
      default_factory=lambda: dict(splits.DEFAULT_PROPORTIONS))
  seed: int = 0
  skip_bad_files: bool = False  # default: one error listing every bad file
  shorter_side: int = 0         # > 0: store JPEGs resized to this shorter side (fast reads)


class Builder(builder_base.ImageSetBuilder):
  """Class-per-folder photos with their original bytes, validated and split by hash."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Initial release."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = (
      "Offline: put flower_photos.tgz (from " + URL + "), or the flower_photos/ folder "
      "extracted from it, in the manual dir. Online builds download it themselves.")
  BUILDER_CONFIGS = [
      FlowersConfig(name="default", description=(
          "TF's flower_photos (3,670 photos, 5 classes), original JPEG bytes, "
          "80/10/10 train/validation/test.")),
      FlowersConfig(name="fast_read", shorter_side=256, description=(
          "flower_photos resized at build time to shorter side 256 (JPEG quality 90), "
          "for training runs that never need full resolution.")),
  ]

  def _info(self) -> tfds.core.DatasetInfo:
    config = self.builder_config
    names = class_folders.class_names(config.root) if config.root else FLOWER_CLASSES
    return self.dataset_info_from_configs(
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(None, None, 3)),
            "label": tfds.features.ClassLabel(names=names),
            "file_name": tfds.features.Text(),
            "height": tfds.features.Scalar(np.int32),
            "width": tfds.features.Scalar(np.int32),
            "channels": tfds.features.Scalar(np.int32),
            "format": tfds.features.Text(),
        }),
        supervised_keys=("image", "label"),
        homepage="https://www.tensorflow.org/tutorials/load_data/images",
        metadata=tfds.core.MetadataDict(),
    )

  def _split_generators(self, dl_manager):
    config = self.builder_config
    self._root = self._source_root(dl_manager)
    tree = class_folders.scan(self._root)
    expected = self.info.features["label"].names
    if tree.class_names != expected:
      raise ValueError(f"{self._root} has class folders {tree.class_names}, expected {expected}.")
    if tree.ignored:
      logging.info("flowers: ignored %d file(s) not named like images: %s",
                   len(tree.ignored), tree.ignored)
    self._ignored = tree.ignored
    by_split = splits.assign(tree.images, config.split_proportions, config.seed)
    empty = [name for name, paths in by_split.items() if not paths]
    if empty:
      raise ValueError(f"split(s) {empty} get no images from {len(tree.images)} in "
                       f"{self._root}: add images or change split_proportions.")
    return {
        name: self.generation.examples(
            name, [(path, (self._root, path, config.shorter_side)) for path in paths],
            flower_files.process_file)
        for name, paths in by_split.items()
    }

  def _source_root(self, dl_manager) -> str:
    if self.builder_config.root:
      return self.builder_config.root
    try:
      manual = dl_manager.manual_dir
    except AssertionError:  # no manual dir given: download
      archive = dl_manager.download(URL)
    else:
      if (manual / "flower_photos").is_dir():
        return str(manual / "flower_photos")
      archive = manual / "flower_photos.tgz"
      if not archive.is_file():
        raise FileNotFoundError(
            f"{manual} has neither flower_photos/ nor flower_photos.tgz. "
            + self.MANUAL_DOWNLOAD_INSTRUCTIONS)
    return str(archives.safe_extract_under(archive, archives.extract_root(dl_manager))
               / "flower_photos")

  def _generate_examples(self):
    raise NotImplementedError  # abstract in TFDS; _split_generators uses self.generation

  def _reads_remote_files(self) -> bool:
    return class_folders.is_remote(self.builder_config.root)

  def _finish_generation(self, report: generation.Report) -> None:
    config = self.builder_config
    bad = report.problems
    if not config.skip_bad_files:
      problems.raise_if_any(bad, source=self._root, fix=(
          "repair or delete these files, or build with skip_bad_files=true to leave them "
          "out (they are then listed in the dataset's metadata)."))
    if bad:
      logging.warning("flowers: skipped %d bad file(s):\n%s", len(bad),
                      "\n".join(f"  {p.where}: {p.reason}" for p in bad))
    if report.notes:
      logging.info("flowers: re-encoded %d file(s): %s", len(report.notes), report.notes)
    self.info.metadata.update({
        "source": self._root if config.root else URL,
        "split_proportions": config.split_proportions,
        "seed": config.seed,
        "num_skipped_files": len(bad),
        "skipped_files": {p.where: p.reason for p in bad},
        "num_converted_files": len(report.notes),
        "converted_files": report.notes,
        "ignored_files": self._ignored,
    })
