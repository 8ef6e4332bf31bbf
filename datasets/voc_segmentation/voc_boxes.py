"""PASCAL VOC 2012 detection examples (the `detection` config): the ids of ImageSets/Main
and one example per id from its JPEG and its Annotations/<id>.xml.

The examples are TFDS's `voc/2012` train and validation examples (tensorflow_datasets/
object_detection/voc.py): the same ids, boxes, labels, poses and flags, under the same
feature names. The XML is read with the package's locked-down reader
(`imagesets.annotations.voc_xml`: no DOCTYPE or entity declaration, size-capped), whose
boxes are normalised exactly as TFDS's are: ymin / height, xmin / width, ymax / height,
xmax / width of the XML's <size> (VOC's 1-based pixel corners, no shift). Stricter than
TFDS: <size> must be the JPEG's, a box must lie inside the image with min < max, a class
name must be one of VOC's 20 and <truncated>/<difficult> 0 or 1; every problem of the build
is reported at once.

`load_example(image_id, folder)` is a pure function; `process` wraps it for
`imagesets.building.generation`, as `voc_pairs.process` does for the segmentation pairs.
"""

import os
import pathlib

import numpy as np

from imagesets.annotations import objects as objects_lib
from imagesets.annotations import voc_xml
# voc_xml's own readers of <size>, <object> and an element's text: the same checks and
# normalisation as for any VOC export.
from imagesets.annotations.voc_xml import element_text, read_object, read_size
from imagesets.building import generation
from imagesets.building import problems as problems_lib
from imagesets.voc_segmentation import voc_pairs

ANNOTATIONS_DIR = "Annotations"
LISTS_DIR = "ImageSets/Main"
# VOC's 20 object classes: the masks' class ids less background (label = mask id - 1);
# alphabetical, as TFDS's _VOC_LABELS.
CLASS_NAMES = voc_pairs.CLASS_NAMES[1:]
# TFDS's _VOC_POSES, in its order (not alphabetical), so that pose ids are TFDS's.
POSES = ("frontal", "rear", "left", "right", "unspecified")
OBJECT_KEYS = ("bbox", "label", "pose", "is_truncated", "is_difficult")

FIX = (f"every id listed in {LISTS_DIR}/train.txt and val.txt needs {voc_pairs.JPEG_DIR}/"
       f"<id>.jpg and {ANNOTATIONS_DIR}/<id>.xml (plain XML without DOCTYPE or entities, a "
       "<size> equal to the image's, and per <object> one of VOC's 20 class names, a "
       "<bndbox> inside the image, <pose>, <truncated> and <difficult> 0 or 1); restore "
       "the named files from the original VOCtrainval_11-May-2012.tar, or remove their "
       "ids from the split lists.")


def read_objects(path: pathlib.Path, name: str, shape: tuple[int, int] | None
                 ) -> tuple[list[tuple], list[str]]:
  """([(bbox, label, pose, is_truncated, is_difficult)] in the file's order, []) for a good
  VOC XML file, else ([], why: one line per problem). `name`: how messages name the file;
  `shape`: the image's (height, width), when known."""
  try:
    root = voc_xml.parse(os.fspath(path))
  except objects_lib.AnnotationError as error:  # malformed, a DOCTYPE or entity, too big
    return [], [str(error).replace(os.fspath(path), name, 1)]
  except OSError as error:
    return [], [f"{name} cannot be read ({error.strerror or error})"]
  if root.tag != "annotation":
    return [], [f"{name}: root element <{root.tag}>, not <annotation>"]
  found = []
  size = read_size(root)
  elements = root.findall("object")
  if size is None and elements:
    found.append(f"{name}: no <size> with positive whole <width> and <height>")
  elif size is not None and shape is not None and size != shape:
    found.append(f"{name}: <size> is {size[1]}x{size[0]} (WxH) but the image is "
                 f"{shape[1]}x{shape[0]}")
  reader = objects_lib.Reader(name, images=())  # collects read_object's problems
  placed = []
  for number, element in enumerate(elements, 1):
    where = f"{name}: object {number}"
    label = element_text(element, "name")
    if (label is not None and objects_lib.class_name_problem(label) is None
        and label.lower() not in CLASS_NAMES):
      found.append(f"{where}: <name> {objects_lib.shown(label)} is not one of VOC's 20 "
                   "classes")
    read = read_object(reader, where, element, size)
    if read is not None and label.lower() in CLASS_NAMES:
      bbox, _, (difficult, truncated, pose) = read
      placed.append((bbox, CLASS_NAMES.index(label.lower()),
                     POSES.index(voc_xml.POSES[pose]), bool(truncated), bool(difficult)))
  found += [f"{problem.where}: {problem.reason}" for problem in reader.problems]
  return ([], found) if found else (placed, [])


def example(jpeg: pathlib.Path, image_id: str, placed: list[tuple]) -> dict:
  """The stored features of one image: TFDS voc's, plus `image_id` as our other configs."""
  columns = {key: [obj[k] for obj in placed] for k, key in enumerate(OBJECT_KEYS)}
  # BBoxFeature takes a BBox or an array of 4 floats: one row per box (none: shape (0, 4)).
  columns["bbox"] = np.array(columns["bbox"], np.float64).reshape(-1, 4)
  return {
      "image": os.fspath(jpeg),  # stored byte for byte: the original JPEG
      "image/filename": f"{image_id}.jpg",
      "image_id": image_id,
      "objects": columns,
      "labels": sorted({label for _, label, *_ in placed}),
      "labels_no_difficult": sorted({label for _, label, _, _, difficult in placed
                                     if not difficult}),
  }


def load_example(image_id: str, folder: os.PathLike
                 ) -> tuple[dict | None, list[problems_lib.Problem]]:
  """(example, []) for a good image and XML, (None, problems) otherwise; checks everything
  at once."""
  folder = pathlib.Path(folder)
  jpeg = folder / voc_pairs.JPEG_DIR / f"{image_id}.jpg"
  shape, found = voc_pairs.check_jpeg(jpeg, f"{voc_pairs.JPEG_DIR}/{image_id}.jpg")
  name = f"{ANNOTATIONS_DIR}/{image_id}.xml"
  placed = []
  if not (folder / name).is_file():
    found.append(f"{name} is missing")
  else:
    placed, why = read_objects(folder / name, name, shape)
    found += why
  if found:
    return None, [problems_lib.Problem(image_id, reason) for reason in found]
  return example(jpeg, image_id, placed), []


def work_items(folder: os.PathLike) -> tuple[dict[str, list[tuple[str, tuple[str, str]]]],
                                             list[problems_lib.Problem]]:
  """{split: [(image id, (folder, image id))]} from ImageSets/Main, and the lists' problems."""
  ids, found = voc_pairs.read_split_lists(folder, LISTS_DIR)
  items = {split: [(image_id, (os.fspath(folder), image_id)) for image_id in split_ids]
           for split, split_ids in ids.items() if split_ids}
  return items, found


def process(item: tuple[str, str]) -> tuple[dict, str]:
  """`load_example` for `generation.Generation`: an image's problems become one BadItem;
  the note is its number of objects (the builder records the most in its metadata)."""
  folder, image_id = item
  built, found = load_example(image_id, folder)
  if found:
    raise generation.BadItem("; ".join(problem.reason for problem in found))
  return built, str(len(built["objects"]["label"]))
