"""COCO object-detection JSON: `images`, `annotations` and `categories` in one file.

Labels: the categories sorted by `id` (label i is the i-th id, whatever the ids are).
Boxes: `bbox` [x, y, width, height] in pixels of the image record's `width` and `height`,
normalised as TFDS's object_detection/coco.py does (y / height, x / width,
(y + h) / height, (x + w) / width). `iscrowd` is the flag "is_crowd" (missing: 0);
`area` is checked, not kept; `segmentation` (polygons or RLE) is not read. An image
record with no annotations is a negative; an image of the folder with no record is
`unlisted`. Ids are join keys: every id that appears twice is a problem.
"""

import json
import math
import os
from typing import Iterable

from imagesets.annotations import objects

MAX_DOCUMENT_BYTES = 1 << 30   # the whole file is parsed in memory
FLAG_NAMES = ("is_crowd",)


def _integer(value: object) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> float | None:
  """A JSON number as a float (an integer too large for one is infinite), else None."""
  if not isinstance(value, (int, float)) or isinstance(value, bool):
    return None
  try:
    return float(value)
  except OverflowError:
    return math.inf if value > 0 else -math.inf


def _pixels(value: object) -> int | None:
  """A positive whole number of pixels (640 or 640.0), else None."""
  number = _number(value)
  if number is not None and math.isfinite(number) and number > 0 and number == int(number):
    return int(number)
  return None


def load(path: str) -> object:
  """The parsed document, or AnnotationError naming the file, line and column."""
  objects.check_size(path, MAX_DOCUMENT_BYTES, "COCO JSON file")
  try:
    with open(path, "rb") as f:
      return json.load(f)
  except json.JSONDecodeError as e:
    raise objects.AnnotationError(f"{path} line {e.lineno} column {e.colno}: not valid JSON "
                                  f"({e.msg}): fix the file or export it again") from None
  except RecursionError:
    raise objects.AnnotationError(f"{path}: JSON nested too deeply to be a COCO file") from None
  except ValueError as e:  # not UTF-8/16/32, or an integer over Python's digit limit
    raise objects.AnnotationError(f"{path}: not readable as JSON ({e}): fix the file or "
                                  "export it again") from None


def _lists(document: object, path: str) -> tuple[list, list, list]:
  if not isinstance(document, dict):
    raise objects.AnnotationError(f"{path}: not a COCO file: the top level is not a JSON object")
  found = []
  for key in ("images", "annotations", "categories"):
    if not isinstance(document.get(key), list):
      raise objects.AnnotationError(f"{path}: not a COCO detection file: no list {key!r} at "
                                    "the top level (export it as COCO instances/detection)")
    found.append(document[key])
  return tuple(found)


def _categories(reader: objects.Reader, src: str,
                categories: list) -> tuple[dict[int, int], list[str]]:
  """({category id: label}, class names). A category whose id or name repeats another is
  a problem; its annotations get the other's label (the problem stops the build)."""
  names: dict[int, str] = {}
  for i, category in enumerate(categories):
    where = f"{src}: categories[{i}]"
    category_id = category.get("id") if isinstance(category, dict) else None
    if not _integer(category_id):
      reader.problem(where, f"category {objects.shown(category)} has no integer id")
      continue
    where = f"{src}: category id {category_id}"
    reason = objects.class_name_problem(category.get("name"))
    if reason:
      reader.problem(where, reason)
    elif category_id in names:
      reader.problem(where, f"category id {category_id} given twice "
                            f"({names[category_id]!r} and {category['name']!r})")
    else:
      names[category_id] = category["name"]
  label_of, class_names, first_id = {}, [], {}
  for category_id in sorted(names):
    name = names[category_id]
    if name in first_id:
      reader.problem(f"{src}: category id {category_id}",
                     f"class name {name!r} is also category id {first_id[name]}'s: "
                     "class names must be unique")
      label_of[category_id] = label_of[first_id[name]]
    else:
      first_id[name] = category_id
      label_of[category_id] = len(class_names)
      class_names.append(name)
  return label_of, class_names


def _images(reader: objects.Reader, src: str,
            images: list) -> tuple[set[int], dict[int, tuple[str, tuple[int, int]]]]:
  """(every image id, {id: (file_name, (height, width))} of the usable records)."""
  ids, usable = set(), {}
  for i, image in enumerate(images):
    image_id = image.get("id") if isinstance(image, dict) else None
    if not _integer(image_id):
      reader.problem(f"{src}: images[{i}]", f"image {objects.shown(image)} has no integer id")
      continue
    where = f"{src}: image id {image_id}"
    if image_id in ids:
      reader.problem(where, f"image id {image_id} given twice")
      continue
    ids.add(image_id)
    name = reader.name(where, image.get("file_name"))
    height, width = _pixels(image.get("height")), _pixels(image.get("width"))
    if not (height and width):
      reader.problem(where, f"height {objects.shown(image.get('height'))} and width "
                            f"{objects.shown(image.get('width'))} are not positive whole numbers")
    if name is not None and height and width and reader.claim(f"{where} ({name})", name):
      usable[image_id] = (name, (height, width))
  return ids, usable


def _object(reader: objects.Reader, where: str, annotation: dict, label_of: dict[int, int],
            size: tuple[int, int]) -> objects.Object | None:
  """The annotation's object, or None (with its problems, or a box left out)."""
  ok = True
  category_id = annotation.get("category_id")
  if not (_integer(category_id) and category_id in label_of):
    reader.problem(where, f"category_id {objects.shown(category_id)} is not a category of the file")
    ok = False
  is_crowd = annotation.get("iscrowd", 0)
  if not (_integer(is_crowd) and is_crowd in (0, 1)):
    reader.problem(where, f"iscrowd {objects.shown(is_crowd)} is not 0 or 1")
    ok = False
  area = _number(annotation.get("area", 0))
  if not (area is not None and math.isfinite(area) and area >= 0):
    reader.problem(where, f"area {objects.shown(annotation.get('area'))} is not a number >= 0")
    ok = False
  bbox = annotation.get("bbox")
  numbers = [_number(value) for value in bbox] if isinstance(bbox, list) else []
  if len(numbers) != 4 or None in numbers:
    reader.problem(where, f"bbox {objects.shown(bbox)} is not a list of 4 numbers "
                          "[x, y, width, height]")
    return None
  if not ok:
    return None
  x, y, w, h = numbers
  placed = reader.box(where, x, y, x + w, y + h, width=size[1], height=size[0])
  return None if placed is None else objects.Object(placed, label_of[category_id], (is_crowd,))


def read(path: str, images: Iterable[str], *, on_bad_box: str = "error",
         images_root: str = "") -> objects.Annotations:
  """The detection annotations of the COCO file `path` for the image files `images`."""
  reader = objects.Reader(path, images, on_bad_box, images_root)
  src = os.path.basename(path)
  image_list, annotation_list, category_list = _lists(load(path), path)
  label_of, class_names = _categories(reader, src, category_list)
  image_ids, usable = _images(reader, src, image_list)
  found: dict[int, list[objects.Object]] = {image_id: [] for image_id in usable}
  annotation_ids = set()
  for i, annotation in enumerate(annotation_list):
    annotation_id = annotation.get("id") if isinstance(annotation, dict) else None
    if not _integer(annotation_id):
      reader.problem(f"{src}: annotations[{i}]",
                     f"annotation {objects.shown(annotation)} has no integer id")
      continue
    where = f"{src}: annotation id {annotation_id}"
    if annotation_id in annotation_ids:
      reader.problem(where, f"annotation id {annotation_id} given twice")
      continue
    annotation_ids.add(annotation_id)
    image_id = annotation.get("image_id")
    if not (_integer(image_id) and image_id in image_ids):
      reader.problem(where, f"image_id {objects.shown(image_id)} is not an image of the file")
      continue
    if image_id not in usable:
      continue  # the image record's own problem stops the build
    name, size = usable[image_id]
    placed = _object(reader, f"{where} (image {image_id}, {name})", annotation, label_of, size)
    if placed is not None:
      found[image_id].append(placed)
  entries = [objects.Entry(name, size, tuple(found[image_id]))
             for image_id, (name, size) in usable.items()]
  return reader.annotations(task="detection", format="coco", class_names=class_names,
                            entries=entries, unmentioned="unlisted", flag_names=FLAG_NAMES)
