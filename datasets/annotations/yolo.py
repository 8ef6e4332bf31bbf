"""YOLO (Darknet / Ultralytics) txt labels: one file per image, a line `class cx cy w h`
per box, normalised to the image.

Accepted `path`:
  * a labels folder of *.txt files, its names file in it or in its parent folder;
  * a folder holding a `labels/` sub-folder (then that is the labels folder);
  * a names file (`data.yaml`, `classes.txt`, `obj.names`): the labels folder is the
    `labels/` beside it, else its own folder.
Names files, first found wins, the labels folder before its parent: data.yaml
(`names:` a list, or {id: name} with ids 0..n-1; read with yaml.safe_load's loader, a key
given twice and anchors or aliases refused; its `path`, `train` and `val` keys are not
followed), then classes.txt, then obj.names (one name a line). A label file's image has
its path without suffix (labels/sub/a.txt <-> sub/a.jpg in the images folder); an image
with no label file is a negative. Lines of more than 5 values (segmentation polygons) are
problems: only boxes are read.
"""

import os
import posixpath
import sys
from collections.abc import Hashable
from typing import Iterable

import yaml

from imagesets.annotations import objects

NAMES_FILES = ("data.yaml", "classes.txt", "obj.names")
MAX_DOCUMENT_BYTES = 16 << 20   # a names file: data.yaml (parsed in memory), or one a line
_YAML_SUFFIXES = (".yaml", ".yml")
PIXELS_PAST = 2.0   # a normalised value past this is no round-off: the line is in pixels


class _StrictLoader(yaml.SafeLoader):
  """yaml.safe_load's loader, refusing what yaml would resolve silently and a labeling
  tool's data.yaml never holds: a key given twice in one mapping (the last would win,
  relabelling boxes), and anchors and aliases (which can expand without bound)."""

  def compose_node(self, parent, index):
    event = self.peek_event()
    if event.anchor is not None:   # an alias (*a), or a node with an anchor (&a)
      kind = "alias" if isinstance(event, yaml.AliasEvent) else "anchor"
      raise yaml.composer.ComposerError(
          None, None, f"the {kind} {objects.shown(event.anchor)}; anchors and aliases are "
          "refused, as they can expand without bound: write the values out", event.start_mark)
    return super().compose_node(parent, index)

  def construct_mapping(self, node, deep=False):
    first = {}   # key -> the line it is first on
    for key_node, _ in node.value:
      key = self.construct_object(key_node, deep=True)
      if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key, Hashable):
        continue   # (merged keys override by design; an unhashable key is refused below)
      if key in first:
        raise yaml.constructor.ConstructorError(
            None, None, f"the key {objects.shown(key)} twice in one mapping, first on line "
            f"{first[key]}; keep one", key_node.start_mark)
      first[key] = key_node.start_mark.line + 1
    return super().construct_mapping(node, deep)


def _refused_text(error: yaml.reader.ReaderError) -> str:
  """What yaml's reader refused, and the fix: bytes not in the file's encoding (UTF-8, or
  UTF-16 after its BOM), or a control character YAML does not allow."""
  if error.encoding == "unicode":   # (decoded: position counts characters)
    return (f"character {error.position + 1} is U+{error.character:04X}, a control "
            "character YAML does not allow: remove it")
  return (f"not {error.encoding.upper()} (byte {error.position + 1} of the file): save the "
          "file as UTF-8")


def _yaml_names(path: str) -> list:
  text = objects.read_bounded(path, MAX_DOCUMENT_BYTES, "YOLO data.yaml")
  try:
    document = yaml.load(text, Loader=_StrictLoader)   # (safe: a SafeLoader)
  except yaml.reader.ReaderError as e:   # (refused before parsing: no line, no problem)
    raise objects.AnnotationError(f"{path}: {_refused_text(e)}") from None
  except yaml.YAMLError as e:
    mark = getattr(e, "problem_mark", None)
    line = f" line {mark.line + 1}" if mark is not None else ""
    raise objects.AnnotationError(f"{path}{line}: not valid YAML "
                                  f"({getattr(e, 'problem', None) or type(e).__name__}): "
                                  "fix the file") from None
  except ValueError as e:  # (a value yaml's constructors refuse: a date, a long integer)
    why = (f"a number of more than {sys.get_int_max_str_digits()} digits"
           if "integer string conversion" in str(e) else objects.shown(str(e)))
    raise objects.AnnotationError(f"{path}: not valid YAML ({why}): fix the file") from None
  names = document.get("names") if isinstance(document, dict) else None
  if isinstance(names, dict):
    if (not all(isinstance(i, int) and not isinstance(i, bool) for i in names)
        or set(names) != set(range(len(names)))):
      raise objects.AnnotationError(f"{path}: `names:` ids {objects.shown(list(names))} are "
                                    f"not 0..{len(names) - 1}: number the classes from 0")
    names = [names[i] for i in range(len(names))]
  if not isinstance(names, list):
    raise objects.AnnotationError(f"{path}: no `names:` list or {{id: name}} mapping: list "
                                  "the class names in data.yaml")
  count = document.get("nc", len(names))
  if count != len(names):
    raise objects.AnnotationError(f"{path}: `nc: {objects.shown(count)}` but {len(names)} "
                                  "names: make them agree")
  return names


def _line_names(path: str) -> list[str]:
  names = [text.strip() for _, text in objects.lines(path, MAX_DOCUMENT_BYTES,
                                                       "class names file")]
  while names and not names[-1]:
    names.pop()
  if "" in names:
    raise objects.AnnotationError(f"{path} line {names.index('') + 1}: empty: class ids are "
                                  "line numbers, so no line may be empty")
  return names


def class_names(path: str) -> tuple[str, ...]:
  """The class names of the names file `path` (label i is name i), checked."""
  names = (_yaml_names if path.lower().endswith(_YAML_SUFFIXES) else _line_names)(path)
  seen = set()
  for i, name in enumerate(names):
    reason = objects.class_name_problem(name) or (
        f"class name {name!r} given twice" if name in seen else None)
    if reason:
      raise objects.AnnotationError(f"{path}: class {i}: {reason}: class names must be "
                                    "unique, non-empty strings")
    seen.add(name)
  return tuple(names)


def locate(path: str) -> tuple[str, str]:
  """(labels folder, names file) of an accepted `path` (see the module's docstring)."""
  if objects.given_as_file(path):
    if not (os.path.basename(path) in NAMES_FILES or path.lower().endswith(_YAML_SUFFIXES)):
      raise objects.AnnotationError(f"{path}: not a YOLO names file: give the labels folder, "
                                    f"or its {', '.join(NAMES_FILES)}")
    names_file, top = path, os.path.dirname(os.path.abspath(path))
    labels = os.path.join(top, "labels")
    return (labels if os.path.isdir(labels) else top), names_file
  if not os.path.isdir(path):
    raise objects.AnnotationError(f"{path}: no such file or folder")
  labels = os.path.join(path, "labels")
  labels = labels if os.path.isdir(labels) else path
  for folder in (labels, os.path.dirname(os.path.abspath(labels))):
    for name in NAMES_FILES:
      if objects.present(os.path.join(folder, name)):
        return labels, os.path.join(folder, name)
  raise objects.AnnotationError(f"{labels}: no class names: put a data.yaml (`names:`), "
                                "classes.txt or obj.names in the labels folder or its parent")


def _object(reader: objects.Reader, where: str, text: str,
            names_file: str, count: int) -> objects.Object | None:
  if "\r" in text.rstrip("\r\n"):   # (split() would join the lines into one of many values)
    reader.problem(where, "a carriage return inside the line: the file ends its lines with "
                          "CR alone (classic Mac OS); save it with LF line ends")
    return None
  values = text.split()
  if len(values) != 5:
    reader.problem(where, f"{len(values)} values: YOLO segmentation lines are not read (boxes "
                          "only)" if len(values) > 5 else
                   f"{len(values)} values, not 5 (class x_center y_center width height)")
    return None
  # Digits only ("1.0", "-1", "١" are not ids); the length bound keeps int() cheap.
  known = values[0].isascii() and values[0].isdigit() and len(values[0]) <= len(str(count))
  label = int(values[0]) if known and int(values[0]) < count else None
  if label is None:
    reader.problem(where, f"class id {objects.shown(values[0])} is not one of the {count} "
                          f"classes of {os.path.basename(names_file)} (0..{count - 1})")
  numbers = [objects.text_number(value) for value in values[1:]]
  for value, number in zip(values[1:], numbers):
    if number is None:
      reader.problem(where, f"{objects.shown(value)} is not a number")
  if label is None or None in numbers:
    return None
  cx, cy, w, h = numbers
  if max(numbers) > PIXELS_PAST:   # (no policy keeps a box in other units: clipped, it lies)
    reader.problem(where, f"x_center y_center width height {' '.join(values[1:])} look like "
                          "pixels: YOLO gives them as fractions of the image's width and "
                          "height (0..1); divide by the image's size")
    return None
  bbox = reader.box(where, cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, width=1.0, height=1.0)
  return None if bbox is None else objects.Object(bbox, label)


def read(path: str, images: Iterable[str], *, on_bad_box: str = "error",
         images_root: str = "", unread: Iterable[str] = ()) -> objects.Annotations:
  """The detection annotations of the YOLO labels at `path` for the image files `images`."""
  labels, names_file = locate(path)
  names = class_names(names_file)
  listing = objects.files_under(labels, ".txt")
  reader = objects.Reader(path, images, on_bad_box, images_root, unread)
  reader.problems += listing.refused
  by_stem = objects.images_by_stem(reader.images)
  entries = []
  for relative in listing.files:
    if relative in NAMES_FILES:
      continue
    where = objects.inside(labels, relative)
    file_name = objects.image_of_stem(reader, where, posixpath.splitext(relative)[0], by_stem)
    placed = [_object(reader, f"{where} line {number}", text, names_file, len(names))
              for number, text in objects.lines(os.path.join(labels, relative)) if text.strip()]
    if file_name is not None:
      entries.append(objects.Entry(file_name, objects=tuple(p for p in placed if p is not None)))
  return reader.annotations(task="detection", format="yolo", class_names=names,
                            entries=entries, unmentioned="negative")
