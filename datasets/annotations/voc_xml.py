"""Pascal VOC XML (labelImg, CVAT, Roboflow exports): a folder of one <annotation> file per
image, read with the XML parser locked down.

Accepted: a folder of *.xml files, sub-folders mirroring the images folder's (hidden
files and folders left out; a link to a folder holding XML files is a problem, never
followed; a link to an XML file is read as the file). An XML's
image is its <filename> (a bare name: in the folder mirroring the XML's; a name with '/':
relative to the images folder) or, without one, the image whose path without suffix is
the XML's. Images with no XML are negatives.

Labels: the sorted unique <name>s over all files (VOC has no class list). Boxes: <bndbox>
pixels over <size>, normalised exactly as TFDS's object_detection/voc.py does
(ymin / height, xmin / width, ymax / height, xmax / width: no 1-based shift). Flags:
<difficult>, <truncated> (0 or 1; missing: 0) and <pose> (lower-cased, one of POSES;
missing: unspecified). An <object> has one of each; its <part> boxes (VOC's person
layout) are not read, as TFDS's voc reads none.

The parser refuses any DOCTYPE or ENTITY declaration (entity expansion such as "billion
laughs", external entities reading other files or URLs): a VOC file needs none.
"""

import os
import posixpath
from typing import Iterable
from xml.etree import ElementTree
from xml.parsers import expat

from imagesets.annotations import objects

MAX_DOCUMENT_BYTES = 16 << 20   # one XML file, parsed in memory
POSES = ("frontal", "left", "rear", "right", "unspecified")
FLAG_NAMES = ("difficult", "truncated", "pose")
_CORNERS = ("xmin", "ymin", "xmax", "ymax")
# The children each element gives at most once: of two, which the tool meant cannot be
# known (the first would be a class, box or image read from nowhere).
_ONCE = {"annotation": ("filename", "size"), "size": ("width", "height"),
         "object": ("name", "bndbox", "pose", "difficult", "truncated"), "bndbox": _CORNERS}


class _Declaration(Exception):
  """A DOCTYPE or entity declaration seen by the parser."""


def _refuse(*_) -> None:
  raise _Declaration()


def parse(path: str) -> ElementTree.Element:
  """The root element of the XML file `path`, or AnnotationError naming the file and line
  (malformed XML, any DOCTYPE or entity declaration, over MAX_DOCUMENT_BYTES)."""
  document = objects.read_bounded(path, MAX_DOCUMENT_BYTES, "VOC XML file")
  builder = ElementTree.TreeBuilder()
  parser = expat.ParserCreate()
  parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
  parser.StartDoctypeDeclHandler = _refuse
  parser.EntityDeclHandler = _refuse
  parser.UnparsedEntityDeclHandler = _refuse
  parser.ExternalEntityRefHandler = _refuse
  parser.StartElementHandler = builder.start
  parser.EndElementHandler = builder.end
  parser.CharacterDataHandler = builder.data
  parser.buffer_text = True
  try:
    # Whole (the size is bounded): fed in pieces, expat is quadratic in a long attribute.
    parser.Parse(document, True)
    return builder.close()
  except _Declaration:
    raise objects.AnnotationError(
        f"{path} line {parser.CurrentLineNumber}: a DOCTYPE or ENTITY declaration, refused "
        "(entities can expand without bound or read other files): export the file "
        "without one") from None
  except expat.ExpatError as e:
    raise objects.AnnotationError(
        f"{path} line {e.lineno} column {e.offset + 1}: malformed XML "
        f"({expat.errors.messages[e.code]}): fix the file or export it again") from None


def element_text(element: ElementTree.Element, tag: str) -> str | None:
  child = element.find(tag)
  return None if child is None else (child.text or "").strip()


def repeated(element: ElementTree.Element | None) -> str | None:
  """The problem of `element` giving a child of _ONCE more than once, else None."""
  if element is None:
    return None
  tags = [tag for tag in _ONCE.get(element.tag, ()) if len(element.findall(tag)) > 1]
  return f"more than one <{'>, <'.join(tags)}> in one <{element.tag}>" if tags else None


def read_size(root: ElementTree.Element) -> tuple[int, int] | None:
  """(height, width) of <size>, if it, its <width> and <height> are given once and both
  are positive whole numbers."""
  sizes = root.findall("size")
  if len(sizes) != 1 or repeated(sizes[0]):
    return None
  size = sizes[0]
  height, width = (objects.text_number(element_text(size, tag)) for tag in ("height", "width"))
  if all(v is not None and 0 < v < float("inf") and v == int(v) for v in (height, width)):
    return int(height), int(width)
  return None


def _file_name(reader: objects.Reader, where: str, root: ElementTree.Element, relative: str,
               by_stem: dict[str, list[str]]) -> str | None:
  """The claimed image of the XML at `relative`, else None (and a problem)."""
  filename = element_text(root, "filename")
  if not filename:
    return objects.image_of_stem(reader, where, posixpath.splitext(relative)[0], by_stem)
  if reader.name(where, filename) is None:
    return None
  if "/" not in filename:
    filename = posixpath.join(posixpath.dirname(relative), filename)
  return filename if reader.claim(where, filename) else None


def _flag(reader: objects.Reader, where: str, element: ElementTree.Element,
          tag: str) -> int | None:
  text = element_text(element, tag)
  if text in (None, "", "0", "1"):
    return int(text or 0)
  reader.problem(where, f"<{tag}> {objects.shown(text)} is not 0 or 1")
  return None


def read_object(reader: objects.Reader, where: str, element: ElementTree.Element,
            size: tuple[int, int] | None) -> tuple | None:
  """(bbox, class name, flags with the pose as an index of POSES) of one <object>, or None
  (its problems recorded, or its box left out)."""
  name = element_text(element, "name")
  reason = "no <name>" if name is None else objects.class_name_problem(name)
  if reason:
    reader.problem(where, reason)
  box = element.find("bndbox")
  twice = [problem for problem in (repeated(element), repeated(box)) if problem]
  for problem in twice:
    reader.problem(where, problem)
  flags = [_flag(reader, where, element, "difficult"), _flag(reader, where, element, "truncated")]
  pose = (element_text(element, "pose") or "unspecified").lower()
  if pose not in POSES:
    reader.problem(where, f"<pose> {objects.shown(pose)} is not one of {', '.join(POSES)}")
  corners = ([] if box is None else
             [objects.text_number(element_text(box, tag)) for tag in _CORNERS])
  if box is None:
    reader.problem(where, "no <bndbox>")
  for tag, value in zip(_CORNERS, corners):
    if value is None:
      reader.problem(where, f"<bndbox> <{tag}> {objects.shown(element_text(box, tag))} "
                            "is not a number")
  if (reason or twice or None in flags or pose not in POSES or None in corners or not corners
      or not size):
    return None
  xmin, ymin, xmax, ymax = corners
  bbox = reader.box(where, xmin, ymin, xmax, ymax, width=size[1], height=size[0])
  return None if bbox is None else (bbox, name, (*flags, POSES.index(pose)))


def read(path: str, images: Iterable[str], *, on_bad_box: str = "error",
         images_root: str = "", unread: Iterable[str] = ()) -> objects.Annotations:
  """The detection annotations of the folder of VOC XML files `path` for `images`."""
  if not os.path.isdir(path):
    raise objects.AnnotationError(f"{path}: not a folder: Pascal VOC annotations are a "
                                  "folder of XML files, one per image")
  listing = objects.files_under(path, ".xml")
  if not listing.files and not listing.refused:
    raise objects.AnnotationError(f"{path}: no *.xml files: give the folder of Pascal VOC "
                                  "XML files (e.g. VOC's Annotations/)")
  reader = objects.Reader(path, images, on_bad_box, images_root, unread)
  reader.problems += listing.refused
  by_stem = objects.images_by_stem(reader.images)
  names, found = set(), []
  for relative in listing.files:
    where = objects.inside(path, relative)
    root = parse(os.path.join(path, relative))
    if root.tag != "annotation":
      reader.problem(where, f"root element <{root.tag}>, not <annotation>: not a Pascal VOC file")
      continue
    twice = repeated(root) or repeated(root.find("size"))
    if twice:   # (the file's image or size would be a guess: none of it is read)
      reader.problem(where, twice)
      continue
    file_name = _file_name(reader, where, root, relative, by_stem)
    size = read_size(root)
    elements = root.findall("object")
    names.update(name for name in (element_text(e, "name") for e in elements)
                 if objects.class_name_problem(name) is None)
    if elements and size is None:
      reader.problem(where, f"no <size> with positive whole <width> and <height>: its "
                            f"{len(elements)} object(s) cannot be placed")
    placed = [read_object(reader, f"{where}: object {k}", element, size)
              for k, element in enumerate(elements, 1)]
    if file_name is not None:
      found.append((file_name, size, [p for p in placed if p is not None]))
  class_names = sorted(names)
  label = {name: i for i, name in enumerate(class_names)}
  entries = [objects.Entry(file_name, size, tuple(objects.Object(bbox, label[name], flags)
                                                  for bbox, name, flags in placed))
             for file_name, size, placed in found]
  return reader.annotations(task="detection", format="voc", class_names=class_names,
                            entries=entries, unmentioned="negative", flag_names=FLAG_NAMES,
                            flag_classes={"pose": POSES})
