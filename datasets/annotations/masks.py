"""Segmentation masks: the mask-folder format (`read`), and the pixels of every image's
masks (`make`), which the build's workers store and `verify` makes again to compare.

**Mask folder** (format "masks", task "segmentation"): for each image `a/b.jpg` of the
images folder, the mask `MASKS/a/b.png` (or `MASKS/SegmentationClass/a/b.png` when that
folder is there: CVAT's "Segmentation mask" export). The class names come from
  * `MASKS/labelmap.txt` (CVAT: lines `name:r,g,b::`, `#` comments): class id i is the
    i-th line; every mask is read as colours (RGB; a palette mask through its palette)
    and each colour becomes the id of its line; a colour the labelmap lacks is a bad
    item naming the file, the colour and where it is;
  * or `MASKS/classes.txt` (one name a line, id = line number, as YOLO's): the masks'
    pixel values are the class ids (VOC style: an 8-bit palette or grayscale PNG, the
    palette only colours them), 255 void; any other value is a bad item.
Every image needs its mask (masks are dense labels: an image without one is a problem that
stops the build, never a silent negative); a mask without its image is a problem too. A
mask whose size is not its image's, upright (EXIF orientation applied), is a bad item
naming both sizes.

**COCO segmentation** (`coco.read` keeps each object's polygons or RLE): `object_masks`
draws the image's objects in annotation order, later over earlier, with pycocotools
(`frPyObjects`, `decode`; an object's polygons united: what COCO's own `annToMask` draws). class_mask: 0
background, label k + 1; object_mask: 0 background, i for the image's i-th object
(crowd objects take their number too); crowd objects (`is_crowd`) are void, 255, in both.

Masks are uint8 H x W; 255 is void everywhere, as in PASCAL VOC.
"""

import os
import posixpath
from typing import Iterable

import numpy as np

from imagesets.annotations import objects
from imagesets.annotations import yolo

VOID = 255
MAX_CLASS_IDS = VOID        # class ids 0..254 (255 is void)
MAX_OBJECTS = VOID - 1      # object ids 1..254 in object_mask
LABELMAP = "labelmap.txt"
CLASSES = "classes.txt"
NAMES_FILES = (LABELMAP, CLASSES)
CVAT_MASKS = "SegmentationClass"   # where CVAT's export puts the class masks
LISTS = "ImageSets"                # CVAT's (and VOC's) split lists: not masks, not labels
MAX_NAMES_BYTES = 16 << 20
# Longest run a compressed COCO RLE character group may encode here: 6 characters of 5
# bits (pycocotools shifts an int by 5 per character; more would overflow it).
_MAX_RLE_CHARACTERS = 6


class MaskError(Exception):
  """A mask that cannot be made for its image (a bad item of the build); one line."""


def pascal_palette() -> np.ndarray:
  """The PASCAL VOC colormap, (256, 3) uint8: index 0 black, 1 dark red, ... 255 cream."""
  index = np.arange(256)
  palette = np.zeros((256, 3), np.uint8)
  for bit in range(8):
    for channel in range(3):
      palette[:, channel] |= (((index >> (3 * bit + channel)) & 1) << (7 - bit)).astype(np.uint8)
  return palette


def mask_folder(path: str) -> str:
  """The folder of the mask PNGs of the annotation folder `path`."""
  cvat = os.path.join(path, CVAT_MASKS)
  return cvat if os.path.isdir(cvat) else path


def looks_like(path: str) -> bool:
  """A folder of PNG masks with their class names (labelmap.txt or classes.txt)."""
  return (any(objects.present(os.path.join(path, name)) for name in NAMES_FILES)
          and bool(objects.files_under(mask_folder(path), ".png").named))


def own_text_file(relative: str) -> bool:
  """A .txt file of a mask folder that is not a YOLO label file (for format detection)."""
  return relative in NAMES_FILES or relative.startswith(LISTS + "/")


def _labelmap(path: str) -> tuple[tuple[str, ...], tuple[tuple[int, int, int], ...]]:
  names, colors, seen = [], [], {}
  for number, text in objects.lines(path, MAX_NAMES_BYTES, LABELMAP):
    text = text.strip()
    if not text or text.startswith("#"):
      continue
    where = f"{path} line {number}"
    fields = text.split(":")
    channels = fields[1].split(",") if len(fields) > 1 else []
    if len(channels) != 3 or not all(c.strip().isascii() and c.strip().isdigit()
                                     and int(c) <= 255 for c in channels):
      raise objects.AnnotationError(f"{where}: {objects.shown(text)} is not `name:r,g,b::` "
                                    "(r, g, b whole numbers 0-255)")
    name, color = fields[0].strip(), tuple(int(c) for c in channels)
    reason = objects.class_name_problem(name) or (
        f"class name {name!r} given twice" if name in names else
        f"colour {color} is also {seen[color]!r}'s" if color in seen else None)
    if reason:
      raise objects.AnnotationError(f"{where}: {reason}: each line names one class and its "
                                    "own colour")
    seen[color] = name
    names.append(name)
    colors.append(color)
  return tuple(names), tuple(colors)


def class_table(path: str) -> tuple[tuple[str, ...], tuple[tuple[int, int, int], ...]]:
  """(class names, their colours or ()) of the mask folder `path`."""
  found = [name for name in NAMES_FILES if objects.present(os.path.join(path, name))]
  if not found:
    raise objects.AnnotationError(
        f"{path}: no class names: a mask folder holds {LABELMAP} (CVAT: `name:r,g,b::` "
        f"lines) or {CLASSES} (one name a line, id = line number)")
  if len(found) > 1:
    odd = [name for name in found if not os.path.isfile(os.path.join(path, name))]
    unreadable = f" ({' and '.join(odd)} no regular file)" if odd else ""
    raise objects.AnnotationError(f"{path}: both {LABELMAP} and {CLASSES}{unreadable}: keep "
                                  "the one that names the masks' classes")
  names_file = os.path.join(path, found[0])
  names, colors = (_labelmap(names_file) if found[0] == LABELMAP
                   else (yolo.class_names(names_file), ()))
  if len(names) > MAX_CLASS_IDS:
    raise objects.AnnotationError(f"{names_file}: {len(names)} classes: masks hold class ids "
                                  f"0-{MAX_CLASS_IDS - 1} (255 is void)")
  return names, colors


def read(path: str, images: Iterable[str], *, on_bad_box: str = "error",
         images_root: str = "", unread: Iterable[str] = ()) -> objects.Annotations:
  """The segmentation annotations of the mask folder `path` for the image files `images`
  (`on_bad_box`: masks have no boxes; taken as every reader takes it)."""
  if not os.path.isdir(path):
    raise objects.AnnotationError(f"{path}: not a folder: mask annotations are a folder of "
                                  f"PNG masks with {LABELMAP} or {CLASSES}")
  class_names, colors = class_table(path)
  folder = mask_folder(path)
  listing = objects.files_under(folder, ".png")
  reader = objects.Reader(path, images, on_bad_box, images_root, unread)
  reader.problems += listing.refused
  by_stem = objects.images_by_stem(reader.images)
  entries = []
  for relative in listing.files:
    stem = posixpath.splitext(relative)[0]
    file_name = objects.image_of_stem(reader, objects.inside(folder, relative), stem, by_stem)
    if file_name is not None:
      entries.append(objects.Entry(file_name, mask=os.path.join(folder, *relative.split("/"))))
  refused = {posixpath.splitext(name)[0] for name in set(listing.named) - set(listing.files)}
  for name in reader.unclaimed():
    stem = posixpath.splitext(name)[0]
    if stem not in refused and not listing.behind_a_link(stem):  # (named as such already)
      reader.problem(objects.inside(folder, stem + ".png"),
                     f"missing: {name} has no mask (masks are dense labels: every image needs "
                     "its mask; add it, or move the image out of the images folder)")
  return reader.annotations(task="segmentation", format="masks", class_names=class_names,
                            entries=entries, unmentioned="unlisted",
                            masks=objects.MaskSource("files", class_names, colors))


def rle_string_counts(text: str) -> list[int] | None:
  """The run lengths of COCO's compressed RLE string (pycocotools' rleFrString: 5-bit
  groups in characters 48..111, runs after the second coded as differences), or None
  when `text` is not one. Checked here, in Python, because pycocotools trusts it: a
  malformed string reads and writes past its buffers."""
  counts, p = [], 0
  while p < len(text):
    value, k, more = 0, 0, True
    while more:
      if p >= len(text) or k >= _MAX_RLE_CHARACTERS:
        return None
      c = ord(text[p]) - 48
      if not 0 <= c < 64:
        return None
      value |= (c & 0x1f) << (5 * k)
      more = bool(c & 0x20)
      p += 1
      k += 1
      if not more and c & 0x10:
        value |= -1 << (5 * k)
    if len(counts) > 2:
      value += counts[-2]
    counts.append(value)
  return counts


def _region(segmentation, height: int, width: int) -> np.ndarray:
  """The H x W 0/1 pixels of one object's checked COCO segmentation."""
  from pycocotools import mask as coco_mask   # pylint: disable=import-outside-toplevel
  if isinstance(segmentation, objects.Rle):
    if isinstance(segmentation.counts, str):
      rle = {"size": [height, width], "counts": segmentation.counts.encode("ascii")}
    else:
      rle = coco_mask.frPyObjects({"size": [height, width],
                                   "counts": list(segmentation.counts)}, height, width)
  else:   # an object's polygons are one region: their union, as COCO's annToMask merges
    rles = coco_mask.frPyObjects([list(p) for p in segmentation], height, width)
    return coco_mask.decode(rles).any(axis=2).astype(np.uint8)
  return coco_mask.decode(rle)


def object_masks(found: Iterable[objects.Object], height: int, width: int,
                 void_flag: int | None = None) -> dict[str, np.ndarray]:
  """{"class_mask", "object_mask"} of objects with COCO segmentation, drawn in order,
  later over earlier: class_mask label + 1, object_mask the object's 1-based number,
  both VOID where an object with flag `void_flag` set (crowd) lies."""
  class_mask = np.zeros((height, width), np.uint8)
  object_mask = np.zeros((height, width), np.uint8)
  for number, item in enumerate(found, 1):
    if item.segmentation is None:
      raise MaskError(f"object {number} has no segmentation to draw")
    pixels = _region(item.segmentation, height, width).astype(bool)
    void = void_flag is not None and bool(item.flags[void_flag])
    class_mask[pixels] = VOID if void else item.label + 1
    object_mask[pixels] = VOID if void else number
  return {"class_mask": class_mask, "object_mask": object_mask}


def _colour_ids(rgb: np.ndarray, colors: tuple[tuple[int, int, int], ...],
                path: str) -> np.ndarray:
  keys = (rgb[..., 0].astype(np.int32) << 16) | (rgb[..., 1].astype(np.int32) << 8) | rgb[..., 2]
  known = np.array([(r << 16) | (g << 8) | b for r, g, b in colors], np.int32)
  order = np.argsort(known)
  at = np.minimum(np.searchsorted(known[order], keys), len(known) - 1)
  found = known[order][at] == keys
  if not found.all():
    y, x = (int(v) for v in np.argwhere(~found)[0])
    others = len(np.unique(keys[~found])) - 1
    raise MaskError(f"mask {path}: colour {tuple(int(v) for v in rgb[y, x])} at x {x}, y {y}"
                    f"{f' (and {others} other unknown colours)' if others else ''} is not a "
                    f"class of {LABELMAP}: add it there or repaint those pixels")
  return order[at].astype(np.uint8)


def file_mask(path: str, source: objects.MaskSource,
              upright: tuple[int, int] | None = None) -> np.ndarray:
  """The class ids of the mask file `path` (H x W uint8), by `source`'s colours or as its
  pixel values. `upright`: the (height, width) the mask must have (None: any)."""
  import PIL.Image   # pylint: disable=import-outside-toplevel
  try:
    with PIL.Image.open(path) as image:
      mode, (width, height) = image.mode, image.size
      if upright is not None and (height, width) != tuple(upright):
        raise MaskError(f"mask {path} is {width}x{height} (width x height), the image is "
                        f"{upright[1]}x{upright[0]} upright: export the mask for this image")
      if source.colors:
        return _colour_ids(np.asarray(image.convert("RGB")), source.colors, path)
      if mode not in ("P", "L"):
        raise MaskError(f"mask {path} is mode {mode}: with {CLASSES} a mask's pixel values "
                        "are class ids (an 8-bit palette or grayscale PNG); for colour masks "
                        f"give {LABELMAP} with each class's colour")
      ids = np.array(image)
  except (OSError, ValueError, SyntaxError, PIL.Image.DecompressionBombError) as error:
    raise MaskError(f"mask {path} cannot be read ({error})") from None
  allowed = np.zeros(256, bool)
  allowed[:len(source.class_names)] = allowed[VOID] = True
  bad = np.flatnonzero(np.bincount(ids.ravel(), minlength=256).astype(bool) & ~allowed)
  if bad.size:
    raise MaskError(f"mask {path}: value(s) {', '.join(map(str, bad[:10]))} are neither class "
                    f"ids of {CLASSES} (0-{len(source.class_names) - 1}) nor {VOID} (void)")
  return ids


def make(source: objects.MaskSource, entry: objects.Entry,
         upright: tuple[int, int] | None = None) -> dict[str, np.ndarray]:
  """The masks of `entry`'s image as the annotations give them, uint8 H x W by name:
  "class_mask" and "object_mask" drawn from its objects (kind "objects", at the size the
  file declares, else `upright`), or "class_mask" of its mask file (kind "files", which
  must be `upright` in size when given). Raises MaskError."""
  if source.kind == "objects":
    height, width = entry.size or upright
    return object_masks(entry.objects, height, width, source.void_flag)
  if source.kind == "files":
    return {"class_mask": file_mask(entry.mask, source, upright)}
  raise ValueError(f"unknown mask source kind {source.kind!r}")


def resized(mask: np.ndarray, height: int, width: int) -> np.ndarray:
  """`mask` at (height, width), nearest neighbour (class ids never blend); itself if it is."""
  if mask.shape == (height, width):
    return mask
  import PIL.Image   # pylint: disable=import-outside-toplevel
  return np.asarray(PIL.Image.fromarray(mask).resize((width, height),
                                                     PIL.Image.Resampling.NEAREST))
