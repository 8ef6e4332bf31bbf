"""voc_segmentation: PASCAL VOC 2012 images with class and instance masks as class ids
(`default`, `train_aug`), or with their boxes (`detection`, TFDS voc/2012's examples)."""

import numpy as np
import tensorflow_datasets as tfds

from imagesets.building import builder_base
from imagesets.building import problems
from imagesets.voc_segmentation import train_aug
from imagesets.voc_segmentation import voc_boxes
from imagesets.voc_segmentation import voc_pairs
from imagesets.voc_segmentation import voc_round_trip
from imagesets.voc_segmentation import voc_source

_CLASSES = ", ".join(f"{i} {name}" for i, name in enumerate(voc_pairs.CLASS_NAMES))


def _mask(desc: str, value_range: str) -> tfds.features.Image:
  # Single-channel PNG of indices: tf.io.decode_png gives ids, not palette colours.
  return tfds.features.Image(
      shape=(None, None, 1), encoding_format="png", use_colormap=True,
      doc=tfds.features.Documentation(desc=desc, value_range=value_range))


class Builder(builder_base.ImageSetBuilder):
  """VOC2012 segmentation pairs: train 1,464 (train_aug: 10,582 with SBD), validation 1,449;
  detection: VOC2012's boxes, train 5,717, validation 5,823."""

  VERSION = tfds.core.Version("1.2.0")
  ROUND_TRIP = staticmethod(voc_round_trip.check)  # (not for train_aug, detection: registry)
  RELEASE_NOTES = {
      "1.0.0": "Initial release: VOC2012 train/val segmentation pairs.",
      "1.1.0": "Configs: default (1.0.0's examples, by the same code) and train_aug (VOC2012 "
               "train + SBD minus VOC2012 val: 10,582 training pairs).",
      "1.2.0": "Config detection: every image of ImageSets/Main train/val with its boxes "
               "from Annotations/*.xml, as TFDS's voc/2012 (same tar). default and "
               "train_aug: the same examples, byte for byte.",
  }
  BUILDER_CONFIGS = [
      tfds.core.BuilderConfig(name="default", description=(
          "VOC2012 segmentation pairs: train 1,464, validation 1,449.")),
      tfds.core.BuilderConfig(name="train_aug", description=(
          "VOC2012 train + SBD (benchmark.tgz) minus every VOC2012 val image: train 10,582 "
          "(VOC's own PNGs where it has them), validation 1,449 (VOC2012 val).")),
      tfds.core.BuilderConfig(name="detection", description=(
          "VOC2012 detection, TFDS voc/2012's train and validation examples and features: "
          "every image of ImageSets/Main train.txt (5,717) and val.txt (5,823) with its "
          "boxes, classes, poses and truncated/difficult flags from Annotations/*.xml.")),
  ]
  MANUAL_DOWNLOAD_INSTRUCTIONS = (voc_source.MANUAL_DOWNLOAD_INSTRUCTIONS
                                  + voc_source.SBD_INSTRUCTIONS)

  def _info(self) -> tfds.core.DatasetInfo:
    if self.builder_config.name == "detection":
      return self._detection_info()
    return self.dataset_info_from_configs(
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(
                shape=(None, None, 3), encoding_format="jpeg",
                doc="The original JPEG bytes from JPEGImages/."),
            "class_mask": _mask(
                f"Class id per pixel: {_CLASSES}; {voc_pairs.VOID} void (object "
                "borders and ambiguous regions, ignore in losses and metrics).",
                f"0-{len(voc_pairs.CLASS_NAMES) - 1} or {voc_pairs.VOID}"),
            "object_mask": _mask(
                "Instance id per pixel: 0 background, 1..N the objects of the image in "
                f"annotation order, {voc_pairs.VOID} void.",
                f"0-N or {voc_pairs.VOID}"),
            "image_id": tfds.features.Text(doc="VOC id, e.g. 2007_000032."),
            "height": tfds.features.Scalar(np.int32),
            "width": tfds.features.Scalar(np.int32),
        }),
        supervised_keys=("image", "class_mask"),
        homepage="http://host.robots.ox.ac.uk/pascal/VOC/voc2012/",
        metadata=tfds.core.MetadataDict(
            class_names=list(voc_pairs.CLASS_NAMES),
            void_value=voc_pairs.VOID,
            void_meaning="object borders and ambiguous regions; ignore in losses and metrics",
        ),
    )

  def _detection_info(self) -> tfds.core.DatasetInfo:
    def labels():
      return tfds.features.ClassLabel(names=voc_boxes.CLASS_NAMES)

    return self.dataset_info_from_configs(
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(
                shape=(None, None, 3), encoding_format="jpeg",
                doc="The original JPEG bytes from JPEGImages/."),
            "image/filename": tfds.features.Text(doc="<VOC id>.jpg, as in TFDS's voc."),
            "image_id": tfds.features.Text(doc="VOC id, e.g. 2007_000027."),
            "objects": tfds.features.Sequence({
                "bbox": tfds.features.BBoxFeature(doc=(
                    "ymin/height, xmin/width, ymax/height, xmax/width of the XML's "
                    "<bndbox> and <size>, as TFDS's voc.")),
                "label": labels(),
                "pose": tfds.features.ClassLabel(names=voc_boxes.POSES),
                "is_truncated": tfds.features.Scalar(np.bool_),
                "is_difficult": tfds.features.Scalar(np.bool_),
            }),
            "labels": tfds.features.Sequence(labels(), doc="The classes present, sorted."),
            "labels_no_difficult": tfds.features.Sequence(
                labels(), doc="The classes of the objects not marked difficult, sorted."),
        }),
        homepage="http://host.robots.ox.ac.uk/pascal/VOC/voc2012/",
        metadata=tfds.core.MetadataDict(class_names=list(voc_boxes.CLASS_NAMES)),
    )

  def _split_generators(self, dl_manager):
    self._folder = voc_source.voc2012_folder(dl_manager, self.registered_files)
    if self.builder_config.name == "train_aug":
      sbd = voc_source.sbd_folder(dl_manager, self.registered_files)
      items, self._list_problems = train_aug.work_items(self._folder, sbd)
      self._folder, process = f"{self._folder} and {sbd}", train_aug.process
    elif self.builder_config.name == "detection":
      items, self._list_problems = voc_boxes.work_items(self._folder)
      process = voc_boxes.process
    else:
      items, self._list_problems = voc_pairs.work_items(self._folder)
      process = voc_pairs.process
    return {split: self.generation.examples(split, split_items, process)
            for split, split_items in items.items()}

  def _finish_generation(self, report):
    fix = {"train_aug": train_aug.FIX, "detection": voc_boxes.FIX}.get(
        self.builder_config.name, voc_pairs.FIX)
    problems.raise_if_any({*self._list_problems, *report.problems},
                          source=str(self._folder), fix=fix)
    if self.builder_config.name == "detection":  # each note: an image's number of objects
      counts = [int(note) for note in report.notes.values()]
      self.info.metadata.update(num_objects=sum(counts),
                                max_objects_per_image=max(counts, default=0))
