"""One example from one image and its annotations (`imagesets.annotations`): the
per-example work of a build from a labeling tool's export (COCO, VOC XML, YOLO, CSV/JSONL).

Boxes are read in the upright orientation of the photo: the orientation browsers and
labeling tools show (EXIF applied), which is also the orientation of the stored image
(`image_checks` rotates EXIF photos upright). An annotation file that declares the image's
size (COCO, VOC) must declare the upright size; one that gives the size of the pixels
before rotation (boxes drawn on the unrotated photo) is a bad item that names both sizes,
never boxes silently put on the wrong part of the picture. Normalised boxes do not move
when a build stores the image smaller (`image_size`).

Masks (`annotations.masks`: COCO segmentation, or a mask folder) are made here, in the
worker (pycocotools draws COCO's polygons and RLE), on the upright image's pixel grid,
resized nearest-neighbour to the stored size when the build stores the image smaller, and
stored as single-channel PNGs (`segmentation_masks.encode`: PIL at a fixed level, the bytes
a function of the pixels and of Pillow's zlib build). A mask file of another size than its
upright image is a bad item.

A module of its own, in the build machinery, so that Beam workers and forked processes
unpickle `process` by its module path.
"""

import numpy as np

from imagesets.annotations import masks as masks_lib
from imagesets.annotations import objects
from imagesets.building import class_folders_tree
from imagesets.building import generation
from imagesets.building import image_checks
from imagesets.building import segmentation_masks
from imagesets.constants import ORIGINAL_SIZE


def label_features(task: str, entry: objects.Entry, flag_names: tuple[str, ...]) -> dict:
  """The annotation features of `entry` for a dataset of `task` (`annotated_builder.features`
  declares them)."""
  if task == "classification":
    return {"label": entry.labels[0]}
  if task == "multi_label":
    return {"labels": list(entry.labels)}
  if task == "segmentation":
    return {}  # its class_mask: `mask_arrays`
  found = entry.objects
  columns = {
      "bbox": np.array([o.bbox for o in found], np.float32).reshape(len(found), 4),
      "label": np.array([o.label for o in found], np.int64),
  }
  for i, name in enumerate(flag_names):
    columns[name] = np.array([o.flags[i] for o in found], np.int64)
  return {"objects": columns}


def mask_arrays(source: objects.MaskSource, entry: objects.Entry, stored: tuple[int, int],
                upright: tuple[int, int] | None = None) -> dict[str, np.ndarray]:
  """The masks of `entry` as a build stores them ({"class_mask"[, "object_mask"]}: uint8
  H x W at the `stored` image's (height, width)): `masks.make`'s, with `upright` the size
  of the upright source image (None: unchecked), resized nearest-neighbour when the
  image was stored smaller. `verify` compares against this very function. Raises
  masks.MaskError."""
  return {key: masks_lib.resized(array, *stored)
          for key, array in masks_lib.make(source, entry, upright).items()}


def _size_problem(entry: objects.Entry, facts: image_checks.ImageFacts) -> str | None:
  if entry.size is None or entry.size == (facts.height, facts.width):
    return None
  height, width = entry.size
  why = (" (the size before EXIF rotation: its boxes were drawn on the unrotated pixels; "
         "export from a tool that applies the photo's orientation, or save the photo upright)"
         if (width, height) == (facts.height, facts.width) else "")
  return (f"the annotations give {width}x{height} (width x height), the photo is "
          f"{facts.width}x{facts.height} upright{why}")


def make_example(root: str, entry: objects.Entry, task: str, flag_names: tuple[str, ...],
                 *, shorter_side: int = ORIGINAL_SIZE,
                 image_size: int = ORIGINAL_SIZE,
                 masks: objects.MaskSource | None = None) -> tuple[dict, str | None]:
  """(features, why the image was re-encoded or None); raises BadImageError, and
  masks.MaskError for a mask that cannot be made (`masks`: the annotations' masks)."""
  data = class_folders_tree.read(root, entry.file_name)
  facts = image_checks.check(data, resized_below=image_checks.resize_threshold(
      shorter_side, image_size))
  wrong_size = _size_problem(entry, facts)
  if wrong_size:
    raise image_checks.BadImageError(wrong_size)
  encoded, stored = image_checks.prepare(data, shorter_side=shorter_side,
                                         image_size=image_size, facts=facts)
  mask_features = {} if masks is None else {
      key: segmentation_masks.encode(array) for key, array in mask_arrays(
          masks, entry, (stored.height, stored.width), (facts.height, facts.width)).items()}
  return {
      "image": encoded,
      "file_name": entry.file_name,
      "height": stored.height,
      "width": stored.width,
      "channels": 3,
      "format": stored.format,
      **label_features(task, entry, flag_names),
      **mask_features,
  }, stored.conversion


def work_item(root: str, entry: objects.Entry, task: str, flag_names: tuple[str, ...],
              shorter_side: int = ORIGINAL_SIZE, image_size: int = ORIGINAL_SIZE,
              masks: objects.MaskSource | None = None) -> tuple:
  """The picklable work item `process` takes, for one annotated image."""
  return (root, entry, task, flag_names, shorter_side, image_size, masks)


def process(item: tuple) -> tuple[dict, str | None]:
  """`make_example` for `generation`: a bad image or mask becomes a BadItem, not a crash."""
  root, entry, task, flag_names, shorter_side, image_size, masks = item
  try:
    return make_example(root, entry, task, flag_names, shorter_side=shorter_side,
                        image_size=image_size, masks=masks)
  except (image_checks.BadImageError, masks_lib.MaskError) as error:
    raise generation.BadItem(str(error)) from None
  except OSError as error:
    raise generation.BadItem(f"cannot be read: {error}") from None
