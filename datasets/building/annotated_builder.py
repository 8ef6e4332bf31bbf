"""The builder of a folder of images with a labeling tool's annotations (COCO JSON, VOC
XML, YOLO txt, CSV/JSONL: `imagesets.annotations`), shared by the `annotated` builder
and `imagesets build IMAGES --name NAME --annotations FILE`.

What every such build does: read the annotation file once (every problem of it at once),
list the images folder, assign each annotated image to a split by a seeded hash of its
content (a renamed photo never moves), make each image and its annotations an example on
every core or on Beam (`annotated_examples`), then stop with one error naming every bad
file and bad annotation, or skip the bad images and record them. Nothing is dropped
unsaid: the metadata names the images the annotation file does not mention, the boxes
clipped or left out (`on_bad_box`), the images without annotations (negatives, kept).

The features follow the annotations' task (`features`): TFDS's `object_detection/coco.py`
and `voc.py` layout for boxes (`objects: Sequence({"bbox": BBoxFeature, "label":
ClassLabel, ...flags})`, normalised ymin, xmin, ymax, xmax), a `Sequence(ClassLabel)` for
several labels per image, a `ClassLabel` for one. Masks are stored as voc_segmentation
stores them (single-channel PNG of class ids, 255 void): `class_mask` and `object_mask`
beside the boxes of a COCO file with segmentation, `class_mask` alone for a mask folder
(task "segmentation", supervised keys ("image", "class_mask")).
"""

import collections
import dataclasses
import functools
import os
from typing import Callable

from absl import logging
import numpy as np
import tensorflow_datasets as tfds

from imagesets.annotations import formats
from imagesets.annotations import masks as masks_lib
from imagesets.annotations import objects
from imagesets.annotations import schema
from imagesets.building import annotated_examples
from imagesets.building import builder_base
from imagesets.building import class_folders_tree
from imagesets.building import fingerprints
from imagesets.building import problems
from imagesets.building import round_trips
from imagesets.building import splits
from imagesets.constants import ORIGINAL_SIZE


@dataclasses.dataclass(eq=False)
class AnnotatedConfig(tfds.core.BuilderConfig):
  """How to build a folder of images and its annotations. Every field changes the bytes."""

  images: str = ""        # the images folder (local)
  annotations: str = ""   # the annotation file or folder (`annotations.formats.read`)
  format: str = ""        # "" detects it (`formats.detect`); else one of formats.FORMATS
  on_bad_box: str = "error"  # objects.ON_BAD_BOX
  split_proportions: dict[str, float] = dataclasses.field(
      default_factory=lambda: dict(splits.DEFAULT_PROPORTIONS))
  seed: int = 0
  skip_bad_files: bool = False  # default: one error listing every bad image
  image_size: int = ORIGINAL_SIZE  # > 0: larger images stored with this shorter side
  follow_links: bool = False

  def __post_init__(self):
    for field in ("images", "annotations"):
      value = getattr(self, field)
      if value.startswith("~"):  # (a --config JSON reaches us unexpanded)
        setattr(self, field, os.path.expanduser(value))
    if self.format and self.format not in formats.FORMATS:
      raise ValueError(f"format={self.format!r}: use one of {', '.join(formats.FORMATS)}")
    if self.on_bad_box not in objects.ON_BAD_BOX:
      raise ValueError(f"on_bad_box={self.on_bad_box!r}: use one of "
                       f"{', '.join(objects.ON_BAD_BOX)}")


@dataclasses.dataclass(frozen=True)
class Source:
  """The images folder listed and its annotation file read, once per build."""

  images: list[str]          # every image file of the folder (relative paths, sorted)
  ignored: list[str]         # the folder's other files
  annotations: objects.Annotations


def read_source(options: AnnotatedConfig) -> Source:
  """Lists `options.images` and reads `options.annotations` (no image is opened)."""
  if not options.images or not options.annotations:
    raise ValueError("an annotated build needs its images folder and annotation file: "
                     "`imagesets build IMAGES --name NAME --annotations FILE`, or --config "
                     "'{\"name\": ..., \"images\": ..., \"annotations\": ...}'")
  images, ignored = class_folders_tree.image_files(options.images,
                                                   follow_links=options.follow_links)
  annotations = formats.read(options.annotations, images, format=options.format or None,
                             on_bad_box=options.on_bad_box, images_root=options.images,
                             unread=ignored)
  return Source(images, ignored, annotations)


def features(annotations: objects.Annotations) -> tfds.features.FeaturesDict:
  """The example layout of a dataset of these annotations (what `annotated_examples`
  makes): the image and its facts, and the labels of the annotations' task."""
  names = list(annotations.class_names)
  if annotations.task == "classification":
    labels = {"label": tfds.features.ClassLabel(names=names)}
  elif annotations.task == "segmentation":
    labels = {}
  elif annotations.task == "multi_label":
    labels = {"labels": tfds.features.Sequence(tfds.features.ClassLabel(names=names))}
  else:
    flags = {name: (tfds.features.ClassLabel(names=list(annotations.flag_classes[name]))
                    if name in annotations.flag_classes else tfds.features.Scalar(np.int64))
             for name in annotations.flag_names}
    labels = {"objects": tfds.features.Sequence({
        "bbox": tfds.features.BBoxFeature(),
        "label": tfds.features.ClassLabel(names=names),
        **flags,
    })}
  return tfds.features.FeaturesDict({
      "image": tfds.features.Image(shape=(None, None, 3)),
      "file_name": tfds.features.Text(),
      "height": tfds.features.Scalar(np.int32),
      "width": tfds.features.Scalar(np.int32),
      "channels": tfds.features.Scalar(np.int32),
      "format": tfds.features.Text(),
      **labels,
      **mask_features(annotations.masks),
  })


def _mask(desc: str, value_range: str) -> tfds.features.Image:
  # Single-channel PNG of ids, as voc_segmentation: tf.io.decode_png gives the ids.
  return tfds.features.Image(
      shape=(None, None, 1), encoding_format="png", use_colormap=True,
      doc=tfds.features.Documentation(desc=desc, value_range=value_range))


def mask_features(source: objects.MaskSource | None) -> dict:
  """The mask features of annotations with masks (`annotated_examples.mask_arrays`)."""
  if source is None:
    return {}
  void = masks_lib.VOID
  shown = ", ".join(f"{i} {name}" for i, name in enumerate(source.class_names[:20])) + (
      ", ..." if len(source.class_names) > 20 else "")
  if source.kind == "files":
    return {"class_mask": _mask(
        f"Class id per pixel, as the mask file gives it: {shown} (metadata "
        f"mask_class_names); {void} void (ignore in losses and metrics).",
        f"0-{len(source.class_names) - 1} or {void}")}
  return {
      "class_mask": _mask(
          f"Class id per pixel: 0 background, k + 1 the class of objects' label k ({shown}: "
          f"metadata mask_class_names); {void} void (crowd objects; ignore in losses and "
          "metrics). Drawn from the segmentation in annotation order, later objects over "
          "earlier.", f"0-{len(source.class_names) - 1} or {void}"),
      "object_mask": _mask(
          "Object per pixel: 0 background, i the image's i-th object (objects[i - 1], "
          f"annotation order; a crowd object keeps its number but is drawn {void}); {void} "
          "void (crowd objects). Later objects drawn over earlier.", f"0-N or {void}"),
  }


def supervised_keys(task: str) -> tuple[str, str] | None:
  """`as_supervised` pairs where one feature is the target (not for boxes: TFDS's coco and
  voc declare none either)."""
  return {"classification": ("image", "label"),
          "multi_label": ("image", "labels"),
          "segmentation": ("image", "class_mask")}.get(task)


ANNOTATION_FIX = ("correct these annotations (for boxes, --on-bad-box clip or skip also "
                  "builds: clipped and skipped boxes are then listed in the dataset's metadata)")


def annotation_problems(annotations: objects.Annotations) -> list[problems.Problem]:
  """What stops a build in the annotation file (all of it, before any image is read)."""
  return [problems.Problem(p.where, p.reason) for p in annotations.problems]


def counts_per_class(annotations: objects.Annotations, built: set[str]) -> dict[str, int]:
  """{class name: images (classification, multi-label) or objects (detection) of it} over
  the `built` images."""
  count = collections.Counter()
  for name, entry in annotations.entries.items():
    if name in built:
      count.update(entry.labels if annotations.task != "detection"
                   else [o.label for o in entry.objects])
  return {class_name: count[i] for i, class_name in enumerate(annotations.class_names)}


def assign(options: AnnotatedConfig, annotations: objects.Annotations,
           hashes: dict[str, str]) -> dict[str, list[str]]:
  """{split: its annotated images}: each by a seeded hash of its bytes (`hashes`: sha256 by
  image), so that a renamed photo never moves; ValueError for a split left empty."""
  names = sorted(annotations.entries)
  keys = {name: splits.content_key(hashes[name]) for name in names}
  by_split = splits.assign(names, options.split_proportions, options.seed, keys=keys)
  empty = [name for name, paths in by_split.items() if not paths]
  if empty:
    raise ValueError(f"split(s) {empty} get no images from {len(names)} annotated in "
                     f"{annotations.source}: add images or change the split proportions.")
  return by_split


def stored_annotation(annotations: objects.Annotations, name: str):
  """What image `name`'s example stores of its annotations, as `schema.annotation` gives it."""
  return schema.annotation(annotated_examples.label_features(
      annotations.task, annotations.entries[name], tuple(annotations.flag_names)))


def labeller(annotations: objects.Annotations) -> Callable[[str], str | None]:
  """image name -> what its annotations say, as duplicates compare it (`schema.Schema.
  describe` of what its example stores)."""
  described = schema.of(features(annotations)).describe
  return lambda name: described(stored_annotation(annotations, name))


class AnnotatedBuilder(builder_base.ImageSetBuilder, skip_registration=True):
  """Images of a folder with their annotations, original bytes, split by content hash."""

  # What each shard holds, beside it: the page reads only the records it pictures.
  RECORD_INDEX = True
  KEYS_NAME_EXAMPLES = True  # (an image's file name; its entry says what it shows)
  OPTIONS: AnnotatedConfig | None = None  # for builders without configs (named builds)
  SOURCE: Source | None = None  # the source read already by the caller
  ROUND_TRIP = staticmethod(round_trips.annotated)
  HASHES: dict[str, str] | None = None  # its annotated images' sha256, when the caller has them

  @property
  def options(self) -> AnnotatedConfig:
    return self.builder_config or self.OPTIONS

  @functools.cached_property
  def source(self) -> Source:
    return self.SOURCE or read_source(self.options)

  def _info(self) -> tfds.core.DatasetInfo:
    annotations = self.source.annotations
    return self._dataset_info(features=features(annotations),
                              supervised_keys=supervised_keys(annotations.task),
                              metadata=builder_base.Metadata())

  def _dataset_info(self, **fields) -> tfds.core.DatasetInfo:
    return self.dataset_info_from_configs(**fields)

  def _split_generators(self, dl_manager):
    del dl_manager  # a local folder: nothing to download
    options, source = self.options, self.source
    annotations = source.annotations
    problems.raise_if_any(annotation_problems(annotations), source=annotations.source,
                          fix=ANNOTATION_FIX)
    hashes = self.HASHES or fingerprints.file_hashes(options.images, sorted(annotations.entries))
    flag_names = tuple(annotations.flag_names)
    return {split: self._planned_split(split, paths, lambda made: ([
        (name, annotated_examples.work_item(options.images, annotations.entries[name],
                                            annotations.task, flag_names,
                                            image_size=options.image_size,
                                            masks=annotations.masks))
        for name in made], annotated_examples.process))
            for split, paths in assign(options, annotations, hashes).items()}

  def _leakage(self) -> str:
    return "warn"

  def _page_label(self, key: str) -> tuple[str | None, int | None]:
    annotations = self.source.annotations
    if annotations.task == "classification":
      label = annotations.entries[key].labels[0]
      return annotations.class_names[label], label
    return self._schema.describe(stored_annotation(annotations, key)), None

  def _page_classes(self, key: str) -> tuple[str, ...] | None:
    return self._schema.classes(stored_annotation(self.source.annotations, key))

  @functools.cached_property
  def _schema(self) -> schema.Schema:
    return schema.of(self.info.features)

  def _finish_generation(self, report) -> None:
    options, source = self.options, self.source
    annotations = source.annotations
    bad = report.problems
    if not options.skip_bad_files:
      problems.raise_if_any(bad, source=options.images, fix=(
          "repair or delete these images, or leave them out: --skip-bad-files "
          "(skip_bad_files=True); they are then listed in the dataset's metadata."))
    if bad:
      logging.warning("%s: skipped %d bad image(s):\n%s", options.images, len(bad),
                      "\n".join(f"  {p.where}: {p.reason}" for p in bad))
    skipped = {p.where for p in bad}
    built = set(annotations.entries) - skipped
    objects_per_image = [len(annotations.entries[name].objects) for name in built]
    self.info.metadata.update({
        "source": options.images,
        "annotations": annotations.source,
        "annotation_format": annotations.format,
        "task": annotations.task,
        "class_names": list(annotations.class_names),
        ("num_objects_per_class" if annotations.task == "detection"
         else "num_examples_per_class"): counts_per_class(annotations, built),
        "num_negatives": sum(not (annotations.entries[name].objects
                                  or annotations.entries[name].labels) for name in built),
        "max_objects_per_image": max(objects_per_image, default=0),
        "on_bad_box": options.on_bad_box,
        "fixed_boxes": [f"{p.where}: {p.reason}" for p in annotations.fixed],
        "unlisted_images": list(annotations.unlisted),
        "ignored_files": source.ignored,
        "split_proportions": options.split_proportions,
        "seed": options.seed,
        "split_key": splits.CONTENT,
        "image_size": options.image_size,
        "num_skipped_files": len(bad),
        "skipped_files": {p.where: p.reason for p in bad},
        "num_converted_files": len(report.notes),
        "converted_files": report.notes,
    })
    if annotations.masks is not None:
      self.info.metadata.update({
          "mask_class_names": list(annotations.masks.class_names),
          "mask_source": annotations.masks.kind,
          "void_value": masks_lib.VOID,
      })
    if annotations.task == "segmentation":  # dense labels: no per-image classes, no negatives
      for key in ("num_examples_per_class", "num_negatives"):
        del self.info.metadata[key]
