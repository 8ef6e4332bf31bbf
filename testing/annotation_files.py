"""One known dataset written as every annotation format, for round-trip tests of
`imagesets.annotations` and of the builders that read it.

`write(root, seed)` makes root/images/ (JPEG crops of the real photos, of random sizes,
some in a sub-folder), random boxes, flags and labels (seeded), and writes them as
  * root/coco/instances.json (COCO's own category ids, listed out of order; crowd
    objects with uncompressed RLE of their pixel rectangle, the others with polygons),
  * root/voc/ (one labelImg-style XML per image, mirroring the sub-folder; one image
    with an XML without objects, one with no XML, one XML without <filename>),
  * root/yolo/data.yaml + root/yolo/labels/ (6-decimal values as exporters write them;
    one empty label file, one image without one),
  * root/tables/{single,multi}.{csv,jsonl} (a class an image; the classes in an image),
  * root/masks/ (classes.txt: background and the classes; a VOC-style palette PNG of class
    ids per image, mirroring the sub-folder: every object's pixel rectangle, in order,
    crowd objects 255) and root/masks_cvat/ (CVAT's "Segmentation mask" export: labelmap.txt,
    ImageSets/Segmentation/default.txt, SegmentationClass/*.png as RGB colours, crowd
    objects in their class's colour): `Known.class_mask` gives each.
The returned `Known` says what a reader must give back: boxes normalised exactly (a
YOLO file is within 1e-6 of them), labels, flags and class names per format.
"""

import dataclasses
import json
import pathlib
from xml.etree import ElementTree

import numpy as np
import PIL.Image

from imagesets.annotations import masks
from imagesets_testing import real_photos
from imagesets_testing import sample_images

# In COCO id order, COCO's own ids; also YOLO's names order. VOC and tables sort them.
CLASS_NAMES = ("person", "bicycle", "traffic light", "cat", "dog")
COCO_IDS = (1, 2, 10, 17, 18)
POSES = ("frontal", "left", "rear", "right", "unspecified")   # the readers' pose classes
FORMATS = ("coco", "voc", "yolo", "csv", "jsonl")
SUB_FOLDER = "street"
MASK_CLASS_NAMES = ("background", *CLASS_NAMES)   # the mask folders' class ids
# masks_cvat's labelmap.txt colours, of MASK_CLASS_NAMES (CVAT's own kind of colours).
CVAT_COLORS = ((0, 0, 0), (250, 50, 83), (51, 221, 255), (255, 204, 51), (131, 224, 112),
               (61, 61, 245))


@dataclasses.dataclass(frozen=True)
class KnownObject:
  pixels: tuple[float, float, float, float]   # x0, y0, x1, y1 in pixels of the image
  bbox: tuple[float, float, float, float]     # ymin, xmin, ymax, xmax in [0, 1]
  name: str
  is_crowd: int
  difficult: int
  truncated: int
  pose: str                                   # one of POSES

  @property
  def rectangle(self) -> tuple[int, int, int, int]:
    """The pixels it covers in mask files and crowd RLE: columns x0..x1 - 1, rows y0..y1 - 1
    of (x0, y0, x1, y1), its box rounded outward."""
    x0, y0, x1, y1 = self.pixels
    return int(np.floor(x0)), int(np.floor(y0)), int(np.ceil(x1)), int(np.ceil(y1))


@dataclasses.dataclass(frozen=True)
class Known:
  root: pathlib.Path
  images_dir: pathlib.Path
  sizes: dict[str, tuple[int, int]]             # every image: (height, width)
  objects: dict[str, tuple[KnownObject, ...]]   # every image; () for negatives
  label: dict[str, str]                         # every image's one class (classification)
  coco: pathlib.Path
  voc: pathlib.Path          # the folder of XML files
  yolo: pathlib.Path         # the folder holding data.yaml and labels/
  csv_single: pathlib.Path
  csv_multi: pathlib.Path
  jsonl_single: pathlib.Path
  jsonl_multi: pathlib.Path
  masks: pathlib.Path | None = None        # classes.txt + palette PNGs of class ids
  masks_cvat: pathlib.Path | None = None   # CVAT's export: labelmap.txt + RGB PNGs

  @property
  def images(self) -> list[str]:
    return sorted(self.sizes)

  def class_mask(self, file_name: str, crowd_void: bool = True) -> np.ndarray:
    """The class ids (MASK_CLASS_NAMES) of `file_name`'s mask file: every object's
    rectangle in order, later over earlier; crowd objects 255 (`crowd_void`, root/masks)
    or their class (root/masks_cvat)."""
    mask = np.zeros(self.sizes[file_name], np.uint8)
    for o in self.objects[file_name]:
      x0, y0, x1, y1 = o.rectangle
      mask[y0:y1, x0:x1] = 255 if o.is_crowd and crowd_void else MASK_CLASS_NAMES.index(o.name)
    return mask

  @property
  def yolo_yaml(self) -> pathlib.Path:
    return self.yolo / "data.yaml"

  def multi_labels(self, file_name: str) -> tuple[str, ...]:
    """The classes in an image, sorted (multi-label)."""
    return tuple(sorted({o.name for o in self.objects[file_name]}))

  def class_names(self, format: str) -> tuple[str, ...]:
    """Label i is class_names(format)[i]: the file's order, or sorted where it has none."""
    return CLASS_NAMES if format in ("coco", "yolo") else tuple(sorted(CLASS_NAMES))

  def expected_objects(self, format: str) -> dict[str, list[tuple]]:
    """{image: [(bbox, label, flags)]} in file order, as `format`'s reader returns them."""
    names = self.class_names(format)
    def flags(o: KnownObject) -> tuple[int, ...]:
      return {"coco": (o.is_crowd,), "voc": (o.difficult, o.truncated, POSES.index(o.pose)),
              "yolo": ()}[format]
    return {file_name: [(o.bbox, names.index(o.name), flags(o)) for o in objects]
            for file_name, objects in self.objects.items()}

  @property
  def without_file(self) -> str:
    """The image that has no VOC XML and no YOLO label file (a negative)."""
    return self.images[1]

  def expected_size(self, format: str, file_name: str) -> tuple[int, int] | None:
    """The (height, width) an entry of `format` declares."""
    declared = format == "coco" or (format == "voc" and file_name != self.without_file)
    return self.sizes[file_name] if declared else None

  def mismatches(self, annotations, format: str, multi: bool = False,
                 tolerance: float = 1e-6) -> list[str]:
    """How `annotations` (imagesets.annotations.objects.Annotations) read from this
    dataset's `format` file differ from what was written: [] when they agree (boxes within
    `tolerance`). `multi`: the tables' multi-label files."""
    found = []
    def differ(what, got, expected):
      if got != expected:
        found.append(f"{what}: got {got!r}, expected {expected!r}")
    differ("format", annotations.format, format)
    differ("class_names", tuple(annotations.class_names), self.class_names(format))
    differ("problems", tuple(annotations.problems), ())
    differ("fixed", tuple(annotations.fixed), ())
    differ("unlisted", tuple(annotations.unlisted), ())
    differ("entries", list(annotations.entries), self.images)
    tables = format in ("csv", "jsonl")
    differ("task", annotations.task, ("multi_label" if multi else "classification")
           if tables else "detection")
    expected = self.expected_labels(multi) if tables else self.expected_objects(format)
    for file_name, entry in annotations.entries.items():
      if file_name not in expected:
        continue
      differ(f"{file_name} file_name", entry.file_name, file_name)
      differ(f"{file_name} size", entry.size,
             None if tables else self.expected_size(format, file_name))
      if tables:
        differ(f"{file_name} labels", tuple(entry.labels), expected[file_name])
        differ(f"{file_name} objects", tuple(entry.objects), ())
        continue
      differ(f"{file_name} labels", tuple(entry.labels), ())
      got = [(o.label, tuple(o.flags)) for o in entry.objects]
      differ(f"{file_name} labels and flags", got, [(l, f) for _, l, f in expected[file_name]])
      for k, (o, (bbox, _, _)) in enumerate(zip(entry.objects, expected[file_name])):
        if (len(o.bbox) != 4 or not all(type(v) is float for v in o.bbox)
            or max(abs(a - b) for a, b in zip(o.bbox, bbox)) > tolerance):
          found.append(f"{file_name} object {k}: bbox {o.bbox!r}, expected {bbox!r}")
    return found

  def expected_labels(self, multi: bool) -> dict[str, tuple[int, ...]]:
    """{image: label ids} of the tables (classification: one; multi-label: sorted)."""
    names = self.class_names("csv")
    return {file_name: tuple(names.index(n) for n in (
                self.multi_labels(file_name) if multi else (self.label[file_name],)))
            for file_name in self.images}


def list_images(folder: pathlib.Path) -> list[str]:
  """What a caller of `formats.read` passes: the relative posix paths of the files."""
  return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def _number(value: float) -> str:
  return str(int(value)) if value == int(value) else repr(value)


def _box(rng: np.random.Generator, height: int, width: int) -> tuple[float, ...]:
  """x0, y0, x1, y1 at 0.1 px, at least 1 px a side, sometimes on the image's edge."""
  corners = []
  for extent in (width, height):
    low = round(float(rng.uniform(0, extent * 0.8)), 1)
    high = min(round(float(rng.uniform(low + 1, extent)), 1), float(extent))
    edge = rng.uniform()
    low, high = (0.0, high) if edge < 0.15 else (low, float(extent)) if edge < 0.3 else (low, high)
    corners.append((low, high))
  (x0, x1), (y0, y1) = corners
  return x0, y0, x1, y1


def _object(rng: np.random.Generator, name: str, height: int, width: int) -> KnownObject:
  x0, y0, x1, y1 = _box(rng, height, width)
  return KnownObject((x0, y0, x1, y1), (y0 / height, x0 / width, y1 / height, x1 / width),
                     name, int(rng.uniform() < 0.1), int(rng.uniform() < 0.2),
                     int(rng.uniform() < 0.3), POSES[int(rng.integers(len(POSES)))])


def _images(root: pathlib.Path, rng: np.random.Generator, count: int) -> dict[str, tuple[int, int]]:
  """Writes `count` JPEG crops of the real photos; {relative name: (height, width)}."""
  photos = list(real_photos.photos().values())
  sizes = {}
  for i in range(count):
    photo = photos[int(rng.integers(len(photos)))]
    height = int(rng.integers(48, photo.shape[0] + 1))
    width = int(rng.integers(48, photo.shape[1] + 1))
    top = int(rng.integers(photo.shape[0] - height + 1))
    left = int(rng.integers(photo.shape[1] - width + 1))
    name = "img 004.jpeg" if i == 4 else f"img_{i:03d}.jpg"   # a space, another suffix
    name = f"{SUB_FOLDER}/{name}" if i % 3 == 2 else name
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(sample_images.encode(photo[top:top + height, left:left + width], "JPEG",
                                          quality=90))
    sizes[name] = (height, width)
  return sizes


def _write_coco(path: pathlib.Path, known: Known, rng: np.random.Generator) -> None:
  categories = [{"id": i, "name": n, "supercategory": "thing"}
                for i, n in zip(COCO_IDS, CLASS_NAMES)]
  rng.shuffle(categories)   # listed out of id order: the reader sorts them
  images, annotations = [], []
  for image_id, file_name in enumerate(known.images, 100):
    height, width = known.sizes[file_name]
    images.append({"id": image_id, "file_name": file_name, "height": height, "width": width,
                   "license": 1})
    for o in known.objects[file_name]:
      x0, y0, x1, y1 = o.pixels
      segmentation = ({"counts": _rle_counts(o.rectangle, height, width), "size": [height, width]}
                      if o.is_crowd else [[x0, y0, x1, y0, x1, y1, x0, y1]])
      annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                          "category_id": COCO_IDS[CLASS_NAMES.index(o.name)],
                          "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0),
                          "iscrowd": o.is_crowd, "segmentation": segmentation})
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps({"info": {"description": "known boxes"}, "images": images,
                              "annotations": annotations, "categories": categories}, indent=1))


def _rle_counts(rectangle: tuple[int, int, int, int], height: int, width: int) -> list[int]:
  """COCO's uncompressed RLE of a pixel rectangle: runs down the columns, 0s first."""
  mask = np.zeros((height, width), np.uint8)
  x0, y0, x1, y1 = rectangle
  mask[y0:y1, x0:x1] = 1
  flat = mask.flatten(order="F")
  edges = np.flatnonzero(np.diff(flat)) + 1
  runs = np.diff(np.concatenate([[0], edges, [flat.size]])).tolist()
  return ([0] if flat[0] else []) + runs


def _write_masks(known: Known) -> None:
  palette = masks.pascal_palette().tobytes()
  (known.masks).mkdir(parents=True, exist_ok=True)
  (known.masks / "classes.txt").write_text("".join(f"{n}\n" for n in MASK_CLASS_NAMES))
  cvat = known.masks_cvat
  (cvat / "ImageSets" / "Segmentation").mkdir(parents=True, exist_ok=True)
  (cvat / "labelmap.txt").write_text("# label:color_rgb:parts:actions\n" + "".join(
      f"{n}:{r},{g},{b}::\n" for n, (r, g, b) in zip(MASK_CLASS_NAMES, CVAT_COLORS)))
  (cvat / "ImageSets" / "Segmentation" / "default.txt").write_text(
      "".join(f"{_stem(name)}\n" for name in known.images))
  colors = np.array(CVAT_COLORS, np.uint8)
  for file_name in known.images:
    for folder, mask in ((known.masks, known.class_mask(file_name)),
                         (cvat / "SegmentationClass",
                          colors[known.class_mask(file_name, crowd_void=False)])):
      path = folder / f"{_stem(file_name)}.png"
      path.parent.mkdir(parents=True, exist_ok=True)
      image = PIL.Image.fromarray(mask)
      if mask.ndim == 2:
        image.putpalette(palette)   # mode P: the ids, coloured as VOC colours them
      image.save(path)


def _voc_xml(file_name: str, size: tuple[int, int], objects, with_filename: bool) -> bytes:
  def add(parent, tag, text=None):
    element = ElementTree.SubElement(parent, tag)
    element.text = text
    return element
  root = ElementTree.Element("annotation")
  add(root, "folder", "images")
  if with_filename:
    add(root, "filename", file_name.rsplit("/", 1)[-1])
  add(root, "path", f"/home/labeler/images/{file_name}")
  size_element = add(root, "size")
  for tag, value in (("width", size[1]), ("height", size[0]), ("depth", 3)):
    add(size_element, tag, str(value))
  add(root, "segmented", "0")
  for o in objects:
    element = add(root, "object")
    add(element, "name", o.name)
    add(element, "pose", o.pose.capitalize())   # as VOC writes it: "Frontal"
    add(element, "truncated", str(o.truncated))
    add(element, "difficult", str(o.difficult))
    box = add(element, "bndbox")
    for tag, value in zip(("xmin", "ymin", "xmax", "ymax"), o.pixels):
      add(box, tag, _number(value))
  ElementTree.indent(root)
  return ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)


def _stem(file_name: str) -> str:
  return file_name.rsplit(".", 1)[0]


def _write_voc(folder: pathlib.Path, known: Known) -> None:
  for i, file_name in enumerate(known.images):
    if file_name == known.without_file:
      continue   # a negative
    path = folder / f"{_stem(file_name)}.xml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_voc_xml(file_name, known.sizes[file_name], known.objects[file_name],
                              with_filename=i != 3))   # one found by its stem


def _write_yolo(folder: pathlib.Path, known: Known) -> None:
  folder.mkdir(parents=True, exist_ok=True)
  (folder / "data.yaml").write_text(
      "# exported for the round-trip tests\npath: ../images\ntrain: images\n"
      f"nc: {len(CLASS_NAMES)}\nnames:\n" + "".join(f"  - {n}\n" for n in CLASS_NAMES))
  for file_name in known.images:
    if file_name == known.without_file:
      continue   # a negative
    height, width = known.sizes[file_name]
    lines = []
    for o in known.objects[file_name]:
      x0, y0, x1, y1 = o.pixels
      values = ((x0 + x1) / 2 / width, (y0 + y1) / 2 / height, (x1 - x0) / width,
                (y1 - y0) / height)
      lines.append(f"{CLASS_NAMES.index(o.name)} " + " ".join(f"{v:.6f}" for v in values) + "\n")
    path = folder / "labels" / f"{_stem(file_name)}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines))


def _write_tables(known: Known) -> None:
  known.csv_single.parent.mkdir(parents=True, exist_ok=True)
  known.csv_single.write_text("file_name,label\n" + "".join(
      f"{name},{known.label[name]}\n" for name in known.images))
  known.csv_multi.write_text("filename,labels,annotator\n" + "".join(
      f'"{name}",{";".join(known.multi_labels(name))},someone\n' for name in known.images))
  known.jsonl_single.write_text("".join(
      json.dumps({"file_name": name, "label": known.label[name]}) + "\n" for name in known.images))
  known.jsonl_multi.write_text("".join(
      json.dumps({"image": name, "labels": list(known.multi_labels(name))}) + "\n\n"
      for name in known.images))


def write(root: pathlib.Path, seed: int = 0, count: int = 12) -> Known:
  """Writes the images and every format of one random dataset under `root`."""
  if count < len(CLASS_NAMES) + 1:
    raise ValueError(f"count={count}: at least {len(CLASS_NAMES) + 1} images, so every class "
                     "appears in every format")
  rng = np.random.default_rng(seed)
  root = pathlib.Path(root)
  sizes = _images(root / "images", rng, count)
  objects, label = {}, {}
  for i, file_name in enumerate(sorted(sizes)):
    height, width = sizes[file_name]
    # Images 0 and 1 are negatives; image 2 holds one object of every class.
    names = ([] if i < 2 else list(CLASS_NAMES) if i == 2 else
             [CLASS_NAMES[int(k)] for k in rng.integers(len(CLASS_NAMES), size=rng.integers(0, 5))])
    objects[file_name] = tuple(_object(rng, name, height, width) for name in names)
    label[file_name] = (CLASS_NAMES[i] if i < len(CLASS_NAMES)
                        else CLASS_NAMES[int(rng.integers(len(CLASS_NAMES)))])
  known = Known(root=root, images_dir=root / "images", sizes=sizes, objects=objects,
                label=label, coco=root / "coco" / "instances.json", voc=root / "voc",
                yolo=root / "yolo", csv_single=root / "tables" / "single.csv",
                csv_multi=root / "tables" / "multi.csv",
                jsonl_single=root / "tables" / "single.jsonl",
                jsonl_multi=root / "tables" / "multi.jsonl",
                masks=root / "masks", masks_cvat=root / "masks_cvat")
  _write_coco(known.coco, known, rng)
  _write_voc(known.voc, known)
  _write_yolo(known.yolo, known)
  _write_tables(known)
  _write_masks(known)
  return known


def compressed_coco(document: dict) -> dict:
  """A COCO `document` with every RLE as COCO's compressed string, and every other polygon
  object as a compressed RLE of its pixels too (pycocotools' own encoder, as exporters
  write them)."""
  from pycocotools import mask as coco_mask   # pylint: disable=import-outside-toplevel
  document = json.loads(json.dumps(document))
  sizes = {image["id"]: (image["height"], image["width"]) for image in document["images"]}
  for k, annotation in enumerate(document["annotations"]):
    height, width = sizes[annotation["image_id"]]
    segmentation = annotation["segmentation"]
    if isinstance(segmentation, dict):
      rle = coco_mask.frPyObjects(segmentation, height, width)
    elif k % 2:
      rle = coco_mask.merge(coco_mask.frPyObjects(segmentation, height, width))
    else:
      continue
    annotation["segmentation"] = {"size": [height, width], "counts": rle["counts"].decode()}
  return document


def coco_reference_masks(path: pathlib.Path, file_name: str) -> tuple[np.ndarray, np.ndarray]:
  """(class_mask, object_mask) of one image of the COCO file `path`, by pycocotools' COCO
  API itself (annToMask per annotation), painted in annotation order: category (by id
  order) + 1 and 1-based object number, crowd objects 255 in both. The reference the
  build's masks must equal."""
  from pycocotools import coco as coco_api   # pylint: disable=import-outside-toplevel
  api = coco_api.COCO(str(path))
  (image_id,) = [i for i, image in api.imgs.items() if image["file_name"] == file_name]
  image = api.imgs[image_id]
  labels = {category_id: k + 1 for k, category_id in enumerate(sorted(api.cats))}
  class_mask = np.zeros((image["height"], image["width"]), np.uint8)
  object_mask = class_mask.copy()
  in_order = [a for a in json.loads(pathlib.Path(path).read_text())["annotations"]
              if a["image_id"] == image_id]
  for number, annotation in enumerate(in_order, 1):
    pixels = api.annToMask(annotation).astype(bool)
    class_mask[pixels] = 255 if annotation["iscrowd"] else labels[annotation["category_id"]]
    object_mask[pixels] = 255 if annotation["iscrowd"] else number
  return class_mask, object_mask
