"""flowers: TF's flower_photos (3,670 photos, 5 classes) as validated TFRecords."""

from imagesets.building import archives
from imagesets.building import class_folders_builder
from imagesets.building import downloads
from imagesets.building import problems
import tensorflow_datasets as tfds

URL = "http://download.tensorflow.org/example_images/flower_photos.tgz"
FLOWER_CLASSES = ["daisy", "dandelion", "roses", "sunflowers", "tulips"]
FlowersConfig = class_folders_builder.ClassFoldersConfig


class MovedDatasetError(ValueError):
  """A config that became a dataset of its own; the message names the new one."""


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
      "download it themselves.")
  BUILDER_CONFIGS = [
      FlowersConfig(name="default", description=(
          "TF's flower_photos (3,670 photos, 5 classes), original JPEG bytes, "
          "80/10/10 train/validation/test.")),
      FlowersConfig(name="fast_read", shorter_side=256, description=(
          "flower_photos downscaled at build time to a shorter side of at least 256 (libjpeg "
          "n/8 scales, JPEG quality 90), "
          "for training runs that never need full resolution.")),
  ]
  CLASS_NAMES = FLOWER_CLASSES

  def __init__(self, *, config=None, **kwargs):
    if config == "oxford17" or getattr(config, "name", None) == "oxford17":
      raise problems.one_line_if_uncaught(MovedDatasetError(
          "flowers/oxford17 is now its own dataset, oxford17: "
          "tfds.load(\"oxford17\", ...), tfds build oxford17 --imports imagesets"))
    super().__init__(config=config, **kwargs)

  def _dataset_info(self, **fields):
    return super()._dataset_info(
        homepage="https://www.tensorflow.org/tutorials/load_data/images", **fields)

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
