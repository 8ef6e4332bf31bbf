"""flowers: TF's flower_photos (3,670 photos, 5 classes) and Oxford-17 (1,360 photos, 17
classes, three official splits) as validated TFRecords."""

from imagesets.building import archives
from imagesets.building import class_folders_builder
from imagesets.building import downloads
from imagesets.building import problems
from imagesets.flowers import oxford17
import tensorflow_datasets as tfds

URL = "http://download.tensorflow.org/example_images/flower_photos.tgz"
FLOWER_CLASSES = ["daisy", "dandelion", "roses", "sunflowers", "tulips"]
FlowersConfig = class_folders_builder.ClassFoldersConfig


class Builder(class_folders_builder.ClassFoldersBuilder):
  """flower_photos with its original bytes, validated and split by hash."""

  VERSION = tfds.core.Version("1.1.0")
  RELEASE_NOTES = {
      "1.0.0": "Initial release.",
      "1.1.0": "fast_read: upright RGB JPEGs downscaled in libjpeg's DCT (shorter side 256 "
               "to the next n/8 scale, not exactly 256); images already small enough keep "
               "their bytes. default: unchanged bytes.",
  }
  MANUAL_DOWNLOAD_INSTRUCTIONS = (
      "Offline: put flower_photos.tgz (from " + URL + "), or the flower_photos/ folder "
      "extracted from it, in a folder and pass it with --manual_dir DIR. Online builds "
      "download it themselves. oxford17: " + oxford17.INSTRUCTIONS)
  BUILDER_CONFIGS = [
      FlowersConfig(name="default", description=(
          "TF's flower_photos (3,670 photos, 5 classes), original JPEG bytes, "
          "80/10/10 train/validation/test.")),
      FlowersConfig(name="fast_read", shorter_side=256, description=(
          "flower_photos downscaled at build time to a shorter side of at least 256 (libjpeg "
          "n/8 scales, JPEG quality 90), "
          "for training runs that never need full resolution.")),
      FlowersConfig(
          name="oxford17", version="1.0.0",
          release_notes={"1.0.0": "Initial release (a version of its own: default and "
                                  "fast_read are unchanged)."},
          description=("Oxford-17: 1,360 photos, 17 classes of 80, original JPEG bytes; the "
                       "three official splits of datasplits.mat as train1/validation1/test1 "
                       "... test3.")),
  ]

  @property
  def _oxford17(self) -> bool:
    return self.builder_config.name == "oxford17"

  @property
  def CLASS_NAMES(self) -> list[str]:  # noqa: N802  (the base class's name)
    return oxford17.CLASS_NAMES if self._oxford17 else FLOWER_CLASSES

  def _dataset_info(self, **fields):
    return super()._dataset_info(homepage=oxford17.HOMEPAGE if self._oxford17 else
                                 "https://www.tensorflow.org/tutorials/load_data/images",
                                 **fields)

  def _split_generators(self, dl_manager):
    if not self._oxford17:
      return super()._split_generators(dl_manager)
    self._root, splits_file = oxford17.source(dl_manager, self.registered_files)
    splits, found = oxford17.read_splits(splits_file)
    problems.raise_if_any(found, source=str(splits_file), fix=(
        f"use the published {oxford17.SPLITS_FILE} ({oxford17.SPLITS_URL})."))
    return {name: self.generation.examples(name, items, oxford17.process)
            for name, items in oxford17.work_items(self._root, splits).items()}

  def _finish_generation(self, report):
    if not self._oxford17:
      return super()._finish_generation(report)
    problems.raise_if_any(report.problems, source=self._root, fix=(
        f"restore the named files from the original {oxford17.ARCHIVE} ({oxford17.URL})."))
    self.info.metadata.update({"source": oxford17.URL, "class_names": oxford17.CLASS_NAMES,
                               "splits_source": oxford17.SPLITS_URL,
                               "num_converted_files": len(report.notes),
                               "converted_files": report.notes})

  def _source_root(self, dl_manager) -> str:
    if self.builder_config.root:
      raise ValueError(
          "flowers builds TF's flower_photos only. For your own class-per-folder photos run "
          "`imagesets build PATH --name NAME` (or `tfds build datasets/class_folders "
          "--config '{\"name\": ..., \"root\": PATH}'`).")
    registered = None  # a download is checked as it downloads; a manual archive here
    manual = downloads.manual_dir(dl_manager)
    if manual is None:
      archive = downloads.download_first(dl_manager, [URL], what="flower_photos.tgz",
                                         instructions=self.MANUAL_DOWNLOAD_INSTRUCTIONS,
                                         registered=self.registered_files)
    else:
      if (manual / "flower_photos").is_dir():
        return str(manual / "flower_photos")
      archive, registered = manual / "flower_photos.tgz", self.registered_files
      if not archive.is_file():
        raise FileNotFoundError(
            f"{manual} has neither flower_photos/ nor flower_photos.tgz. "
            + self.MANUAL_DOWNLOAD_INSTRUCTIONS)
    return str(archives.safe_extract_under(archive, archives.extract_root(dl_manager),
                                           registered) / "flower_photos")

  def _source_name(self) -> str:
    return URL
