"""oxford17: Nilsback & Zisserman's 17 Category Flower Dataset (1,360 photos, 17 classes,
three official splits) as validated TFRecords."""

from imagesets.building import class_folders_builder
from imagesets.building import problems
from imagesets.oxford17 import oxford17_source as source
import tensorflow_datasets as tfds


class Builder(class_folders_builder.ClassFoldersBuilder):
  """17flowers.tgz with its original bytes, labelled by image number, in the paper's splits."""

  VERSION = tfds.core.Version("1.0.0")
  ROUND_TRIP = None  # its labels come from image numbers, not from class folders
  RELEASE_NOTES = {"1.0.0": "Initial release (as the flowers/oxford17 config until it became "
                            "a dataset of its own; same examples)."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = source.INSTRUCTIONS
  CLASS_NAMES = source.CLASS_NAMES
  OPTIONS = class_folders_builder.ClassFoldersConfig(name="oxford17")

  def _dataset_info(self, **fields):
    return super()._dataset_info(homepage=source.HOMEPAGE, **fields)

  def _split_generators(self, dl_manager):
    self._root, splits_file = source.source(dl_manager, self.registered_files)
    splits, found = source.read_splits(splits_file)
    problems.raise_if_any(found, source=str(splits_file), fix=(
        f"use the published {source.SPLITS_FILE} ({source.SPLITS_URL})."))
    return {name: self.generation.examples(name, items, source.process)
            for name, items in source.work_items(self._root, splits).items()}

  def _finish_generation(self, report):
    problems.raise_if_any(report.problems, source=self._root, fix=(
        f"restore the named files from the original {source.ARCHIVE} ({source.URL})."))
    self.info.metadata.update({"source": source.URL, "class_names": source.CLASS_NAMES,
                               "splits_source": source.SPLITS_URL,
                               "num_converted_files": len(report.notes),
                               "converted_files": report.notes})
