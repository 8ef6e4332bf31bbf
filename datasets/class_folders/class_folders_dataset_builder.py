"""class_folders: any class-per-folder image tree, as validated TFRecords.

For the stock CLI: `tfds build datasets/class_folders --config '{"name": "pets",
"root": "/data/pets"}'` writes `class_folders/pets`. `imagesets build PATH --name NAME`
writes the same examples as a dataset of its own name (`imagesets.class_folders`).
"""

import pathlib

from imagesets.building import class_folders_builder
import tensorflow_datasets as tfds

ClassFoldersConfig = class_folders_builder.ClassFoldersConfig
EXAMPLE_TREE = pathlib.Path(__file__).resolve().parent / "dummy_data" / "pets"


class Builder(class_folders_builder.ClassFoldersBuilder):
  """A class-per-folder tree given by the config's `root`."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Initial release."}
  # TFDS's CLI makes a JSON --config with the class of these configs.
  BUILDER_CONFIGS = [
      ClassFoldersConfig(name="example", root=str(EXAMPLE_TREE), description=(
          "The small tree in this builder's dummy_data/pets (3 classes, 25 images), to try "
          "the builder; pass your own with --config '{\"name\": ..., \"root\": ...}'.")),
  ]
