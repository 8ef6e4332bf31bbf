"""Which annotation format a file or folder is in, and `read`, the one entry point that
reads any of them into `objects.Annotations`.

Detection goes by what the path is, never by guessing from content: a file by its
suffix (.json COCO, .csv, .jsonl/.ndjson, .yaml/.yml or a names file YOLO); a folder by
what it holds (*.xml: VOC; *.txt labels or a names file: YOLO; *.png with labelmap.txt or
classes.txt and no .txt but those and ImageSets/ lists: masks). When that names no
format, or more than one, the error says to give the format.
"""

import os
from typing import Callable, Iterable

from imagesets.annotations import coco
from imagesets.annotations import masks
from imagesets.annotations import objects
from imagesets.annotations import tables
from imagesets.annotations import voc_xml
from imagesets.annotations import yolo

FORMATS = ("coco", "voc", "yolo", "csv", "jsonl", "masks")
_FOLDER_FORMATS = ("voc", "yolo", "masks")   # the others are one file
_SUFFIXES = {".json": "coco", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl",
             ".yaml": "yolo", ".yml": "yolo"}
_READERS: dict[str, Callable[..., objects.Annotations]] = {
    "coco": coco.read, "voc": voc_xml.read, "yolo": yolo.read,
    "csv": tables.read_csv, "jsonl": tables.read_jsonl, "masks": masks.read}


def _unclear(path: str, what: str, candidates: Iterable[str] = FORMATS) -> objects.AnnotationError:
  return objects.AnnotationError(f"{path}: {what}: give the format with --format (one of "
                                 f"{', '.join(candidates)})")


def _folder_formats(path: str) -> list[str]:
  found = ["voc"] if objects.files_under(path, ".xml").named else []
  names = [os.path.join(folder, name) for folder in (path, os.path.join(path, "labels"))
           for name in yolo.NAMES_FILES if objects.present(os.path.join(folder, name))]
  texts = objects.files_under(path, ".txt").named
  # PNGs and labelmap.txt/classes.txt, and no other .txt (YOLO labels): a mask folder,
  # whose classes.txt is no YOLO evidence. (labelImg's YOLO folders hold PNG images,
  # classes.txt and label files: YOLO.)
  if masks.looks_like(path) and all(map(masks.own_text_file, texts)):
    found.append("masks")
    names = [name for name in names if name != os.path.join(path, masks.CLASSES)]
    texts = []
  if names or texts:
    found.append("yolo")
  return found


def detect(path: str) -> str:
  """The format of the annotation file or folder `path`, when only one fits."""
  if objects.given_as_file(path):
    if os.path.basename(path) in yolo.NAMES_FILES:
      return "yolo"
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in _SUFFIXES:
      raise _unclear(path, f"the suffix {suffix or '(none)'} names no annotation format")
    return _SUFFIXES[suffix]
  if not os.path.isdir(path):
    raise objects.AnnotationError(f"{path}: no such file or folder: give the annotation file "
                                  "or folder")
  found = _folder_formats(path)
  if len(found) != 1:
    raise _unclear(path, f"a folder that could be {' or '.join(found)}" if found else
                   "a folder with no *.xml (VOC), *.txt (YOLO) or *.png with labelmap.txt or "
                   "classes.txt (masks) files", found or _FOLDER_FORMATS)
  return found[0]


def read(path: str, images: Iterable[str], *, format: str | None = None,
         on_bad_box: str = "error", images_root: str = "",
         unread: Iterable[str] = ()) -> objects.Annotations:
  """The annotations at `path` (a file, or a folder for VOC, YOLO, masks) for `images`, the
  relative posix paths of the image files of the images folder (`images_root`, named in
  messages only); `unread`, its other files (named when an annotation's image is one of
  them in a format builds do not read). `format`: one of FORMATS, None to `detect` it. `on_bad_box`: one of
  objects.ON_BAD_BOX. Raises AnnotationError when the file cannot be read at all;
  everything else wrong is in the result's `problems`."""
  if format is not None and format not in FORMATS:
    raise ValueError(f"format={format!r}: use one of {', '.join(FORMATS)}")
  if on_bad_box not in objects.ON_BAD_BOX:
    raise ValueError(f"on_bad_box={on_bad_box!r}: use one of {', '.join(objects.ON_BAD_BOX)}")
  format = format or detect(path)
  if format not in _FOLDER_FORMATS and os.path.isdir(path):
    raise objects.AnnotationError(f"{path}: not a file: {format} annotations are one file")
  return _READERS[format](path, images, on_bad_box=on_bad_box, images_root=images_root,
                          unread=unread)
