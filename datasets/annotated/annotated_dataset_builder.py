"""annotated: a folder of images with a labeling tool's annotations, as validated TFRecords.

For the stock CLI: `tfds build datasets/annotated --config '{"name": "parts", "images":
"/data/parts/images", "annotations": "/data/parts/instances.json"}'` writes
`annotated/parts`. `imagesets build IMAGES --name NAME --annotations FILE` writes the same
examples as a dataset of its own name (`imagesets.annotated.annotated_build`).
"""

import pathlib

import tensorflow_datasets as tfds

from imagesets.building import annotated_builder

AnnotatedConfig = annotated_builder.AnnotatedConfig
EXAMPLE = pathlib.Path(__file__).resolve().parent / "dummy_data"


class Builder(annotated_builder.AnnotatedBuilder):
  """Images and annotations given by the config's `images` and `annotations`."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Initial release."}
  # TFDS's CLI makes a JSON --config with the class of these configs.
  BUILDER_CONFIGS = [
      AnnotatedConfig(
          name="example", images=str(EXAMPLE / "images"),
          annotations=str(EXAMPLE / "coco" / "instances.json"),
          split_proportions={"train": 0.5, "test": 0.5}, description=(
              "The small COCO export in this builder's dummy_data (crops of real photos "
              "with boxes; the same boxes as VOC XML, YOLO and tables beside it), to try "
              "the builder; pass your own with --config "
              "'{\"name\": ..., \"images\": ..., \"annotations\": ...}'.")),
  ]
