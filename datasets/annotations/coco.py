"""COCO object-detection JSON: `images`, `annotations` and `categories` in one file.

Labels: the categories sorted by `id` (label i is the i-th id, whatever the ids are).
Boxes: `bbox` [x, y, width, height] in pixels of the image record's `width` and `height`,
normalised as TFDS's object_detection/coco.py does (y / height, x / width,
(y + h) / height, (x + w) / width). `iscrowd` is the flag "is_crowd" (missing: 0);
`area` is checked, not kept. An image record with no annotations is a negative; an image
of the folder with no record is `unlisted`. Ids are join keys: every id that appears twice
is a problem.

Segmentation: a file where any annotation has a `segmentation` (not missing, null or
`[]`, which exporters write for boxes) gets masks (`masks.object_masks`), and then every
annotation of it must have one (an annotation without is a problem naming it: masks need
every object's outline). Each is checked and kept on its Object: polygons (a list of
lists of x, y pairs, at least 3 points, finite numbers; points more than 1 px outside the
image follow `on_bad_box` like boxes: a problem under "error", else kept and listed in
`fixed`, the rasteriser drawing only the part inside; points farther than one image side
out are always a problem), or RLE (`size` the image's [height, width]; `counts` whole
numbers >= 0 or COCO's compressed string, whose runs must cover the image exactly).
pycocotools draws them in the build's workers; reading needs none of it.
"""

import json
import math
import os
from typing import Iterable

from imagesets.annotations import masks
from imagesets.annotations import objects

MAX_DOCUMENT_BYTES = 1 << 30   # the whole file is parsed in memory
FLAG_NAMES = ("is_crowd",)
# Polygon points this far (pixels) outside the image are round-off of the tool, kept as given.
POLYGON_SLACK = 1.0
MANY = 10**18   # counts past this are not written out in messages


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


def _count(number: int) -> str:
  """A count summed from the file, for a message: written out up to MANY, else bounded
  (a sum of long integers can pass the digits Python converts to text)."""
  return f"{number:,}" if number <= MANY else f"more than {MANY:,}"


def load(path: str) -> object:
  """The parsed document, or AnnotationError naming the file, line and column."""
  text = objects.read_bounded(path, MAX_DOCUMENT_BYTES, "COCO JSON file")
  try:
    return json.loads(text, object_pairs_hook=objects.unique_keys)
  except objects.DuplicateKeyError as e:
    raise objects.AnnotationError(f"{path}: {e}: keep one and build again") from None
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


def _new_id(reader: objects.Reader, src: str, kind: str, i: int, item, seen: set):
  """The integer id of the `i`-th `kind` ("image", "annotation") of the file, added to
  `seen`; None, the problem recorded, when it has none or repeats one in `seen`."""
  item_id = item.get("id") if isinstance(item, dict) else None
  if not _integer(item_id):
    reader.problem(f"{src}: {kind}s[{i}]", f"{kind} {objects.shown(item)} has no integer id")
    return None
  if item_id in seen:
    reader.problem(f"{src}: {kind} id {item_id}", f"{kind} id {item_id} given twice")
    return None
  seen.add(item_id)
  return item_id


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
    image_id = _new_id(reader, src, "image", i, image, ids)
    if image_id is None:
      continue
    where = f"{src}: image id {image_id}"
    name = reader.name(where, image.get("file_name"))
    height, width = _pixels(image.get("height")), _pixels(image.get("width"))
    if not (height and width):
      reader.problem(where, f"height {objects.shown(image.get('height'))} and width "
                            f"{objects.shown(image.get('width'))} are not positive whole numbers")
    if name is not None and height and width and reader.claim(f"{where} ({name})", name):
      usable[image_id] = (name, (height, width))
  return ids, usable


def has_segmentation(annotation: object) -> bool:
  """The annotation gives a segmentation (exporters write `[]` for a box without one)."""
  return isinstance(annotation, dict) and annotation.get("segmentation") not in (None, [], {})


def _polygons(reader: objects.Reader, where: str, value: list,
              size: tuple[int, int]) -> tuple[tuple[float, ...], ...] | None:
  height, width = size
  polygons = []
  for k, polygon in enumerate(value):
    numbers = [_number(v) for v in polygon] if isinstance(polygon, list) else [None]
    if None in numbers or not all(map(math.isfinite, numbers)):
      reader.problem(where, f"segmentation polygon {k} {objects.shown(polygon)} is not a list "
                            "of finite numbers x0, y0, x1, y1, ...")
      return None
    if len(numbers) < 6 or len(numbers) % 2:
      reader.problem(where, f"segmentation polygon {k} has {len(numbers)} numbers: a polygon "
                            "is x, y pairs, at least 3 points (6 numbers)")
      return None
    polygons.append(tuple(numbers))
  xs = [x for polygon in polygons for x in polygon[0::2]]
  ys = [y for polygon in polygons for y in polygon[1::2]]
  span = f"x {min(xs):.10g}..{max(xs):.10g}, y {min(ys):.10g}..{max(ys):.10g}"
  if min(xs) < -width or max(xs) > 2 * width or min(ys) < -height or max(ys) > 2 * height:
    reader.problem(where, f"segmentation polygon points {span}, more than the image's size "
                          f"outside the {width}x{height} image: not a drawing on this image")
    return None
  if (min(xs) < -POLYGON_SLACK or max(xs) > width + POLYGON_SLACK
      or min(ys) < -POLYGON_SLACK or max(ys) > height + POLYGON_SLACK):
    if reader.on_bad_box == "error":
      reader.problem(where, f"segmentation polygon outside the {width}x{height} image: {span}")
      return None
    reader.fixed.append(objects.Problem(
        where, f"segmentation polygon clipped to the {width}x{height} image: {span}"))
  return tuple(polygons)


def _rle(reader: objects.Reader, where: str, value: dict,
         size: tuple[int, int]) -> objects.Rle | None:
  height, width = size
  declared, counts = value.get("size"), value.get("counts")
  if not (isinstance(declared, list) and len(declared) == 2 and all(map(_integer, declared))):
    reader.problem(where, f"segmentation RLE size {objects.shown(declared)} is not "
                          "[height, width]")
    return None
  if tuple(declared) != size:
    reader.problem(where, f"segmentation RLE size {declared} is not the image's [height, "
                          f"width] [{height}, {width}]")
    return None
  if isinstance(counts, str):
    runs = masks.rle_string_counts(counts)
    if runs is None:
      reader.problem(where, f"segmentation RLE counts {objects.shown(counts)} is not COCO's "
                            "compressed RLE string")
      return None
  elif isinstance(counts, list):
    runs = counts
  else:
    reader.problem(where, f"segmentation RLE counts {objects.shown(counts)} is neither a list "
                          "of run lengths nor a compressed RLE string")
    return None
  if not all(_integer(run) and run >= 0 for run in runs):
    reader.problem(where, f"segmentation RLE counts {objects.shown(counts)} hold a run that "
                          "is not a whole number >= 0")
    return None
  covered = sum(runs)
  if covered != height * width:
    reader.problem(where, f"segmentation RLE runs cover {_count(covered)} pixels, the {width}x"
                          f"{height} image has {height * width:,}")
    return None
  return objects.Rle(size, counts if isinstance(counts, str) else tuple(counts))


def _segmentation(reader: objects.Reader, where: str, annotation: dict, size: tuple[int, int]):
  """The annotation's checked segmentation (polygons or Rle), or None and a problem."""
  value = annotation.get("segmentation")
  if not has_segmentation(annotation):
    reader.problem(where, "no segmentation, but other annotations of the file have one: "
                          "masks need every object's outline (draw it, or remove every "
                          "`segmentation` for a build of boxes only)")
    return None
  if isinstance(value, list):
    return _polygons(reader, where, value, size)
  if isinstance(value, dict):
    return _rle(reader, where, value, size)
  reader.problem(where, f"segmentation {objects.shown(value)} is neither polygons (a list of "
                        "[x0, y0, x1, y1, ...] lists) nor RLE ({\"size\", \"counts\"})")
  return None


def _object(reader: objects.Reader, where: str, annotation: dict, label_of: dict[int, int],
            size: tuple[int, int], with_masks: bool = False) -> objects.Object | None:
  """The annotation's object, or None (with its problems, or a box left out).
  `with_masks`: the file has segmentation, which every object must then have."""
  ok = True
  segmentation = None
  if with_masks:
    segmentation = _segmentation(reader, where, annotation, size)
    ok = segmentation is not None
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
  return None if placed is None else objects.Object(placed, label_of[category_id], (is_crowd,),
                                                    segmentation)


def read(path: str, images: Iterable[str], *, on_bad_box: str = "error",
         images_root: str = "", unread: Iterable[str] = ()) -> objects.Annotations:
  """The detection annotations of the COCO file `path` for the image files `images`."""
  reader = objects.Reader(path, images, on_bad_box, images_root, unread)
  src = os.path.basename(path)
  image_list, annotation_list, category_list = _lists(load(path), path)
  label_of, class_names = _categories(reader, src, category_list)
  image_ids, usable = _images(reader, src, image_list)
  found: dict[int, list[objects.Object]] = {image_id: [] for image_id in usable}
  with_masks = any(map(has_segmentation, annotation_list))
  if with_masks and len(class_names) > masks.MAX_CLASS_IDS - 1:
    reader.problem(src, f"{len(class_names)} categories with segmentation: class masks hold "
                        f"0 (background) and categories 1-{masks.MAX_CLASS_IDS - 1}")
  annotation_ids = set()
  for i, annotation in enumerate(annotation_list):
    annotation_id = _new_id(reader, src, "annotation", i, annotation, annotation_ids)
    if annotation_id is None:
      continue
    where = f"{src}: annotation id {annotation_id}"
    image_id = annotation.get("image_id")
    if not (_integer(image_id) and image_id in image_ids):
      reader.problem(where, f"image_id {objects.shown(image_id)} is not an image of the file")
      continue
    if image_id not in usable:
      continue  # the image record's own problem stops the build
    name, size = usable[image_id]
    placed = _object(reader, f"{where} (image {image_id}, {name})", annotation, label_of, size,
                     with_masks)
    if placed is not None:
      found[image_id].append(placed)
  if with_masks:
    for image_id, kept in found.items():
      if len(kept) > masks.MAX_OBJECTS:
        reader.problem(f"{src}: image id {image_id} ({usable[image_id][0]})",
                       f"{len(kept)} objects with segmentation: an object mask holds "
                       f"{masks.MAX_OBJECTS} at most (ids 1-{masks.MAX_OBJECTS}, 255 void)")
  entries = [objects.Entry(name, size, tuple(found[image_id]))
             for image_id, (name, size) in usable.items()]
  mask_source = objects.MaskSource("objects", ("background", *class_names),
                                   void_flag=FLAG_NAMES.index("is_crowd")) if with_masks else None
  return reader.annotations(task="detection", format="coco", class_names=class_names,
                            entries=entries, unmentioned="unlisted", flag_names=FLAG_NAMES,
                            masks=mask_source)
