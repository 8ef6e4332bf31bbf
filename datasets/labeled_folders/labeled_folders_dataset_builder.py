"""labeled_folders: any class-per-folder image tree, as validated TFRecords.

For the stock CLI: `tfds build datasets/labeled_folders --config '{"name": "pets",
"root": "/data/pets"}'` writes `labeled_folders/pets`. `imagesets build PATH --name NAME`
writes the same examples as a dataset of its own name (`imagesets.folder_datasets`).
"""

import pathlib

from imagesets.building import class_folder_builder
import tensorflow_datasets as tfds

LabeledFoldersConfig = class_folder_builder.FolderConfig
EXAMPLE_TREE = pathlib.Path(__file__).resolve().parent / "dummy_data" / "pets"


class Builder(class_folder_builder.ClassFolderBuilder):
  """A class-per-folder tree given by the config's `root`."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Initial release."}
  # TFDS's CLI makes a JSON --config with the class of these configs.
  BUILDER_CONFIGS = [
      LabeledFoldersConfig(name="example", root=str(EXAMPLE_TREE), description=(
          "The small tree in this builder's dummy_data/pets (3 classes, 25 images), to try "
          "the builder; pass your own with --config '{\"name\": ..., \"root\": ...}'.")),
  ]
