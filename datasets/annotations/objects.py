"""The one model every annotation format is read into, and the checks all formats share.

`Annotations` holds the classes, one `Entry` per image (boxes for detection, label ids
for classification and multi-label, a mask file for segmentation; objects may carry their
COCO outline, `segmentation`, from which the build draws masks) and everything found
wrong (`problems`) or repaired (`fixed`). `Reader` is what a parser fills while it reads:
it applies the rules that must be the same for every format (safe relative names, one
entry per image, the bad-box policy `on_bad_box`) and assembles the `Annotations` at the
end.

Boxes are (ymin, xmin, ymax, xmax) in [0, 1] of the image as it is shown upright, the
order of TFDS's BBoxFeature.
"""

import dataclasses
import itertools
import math
import os
import posixpath
import re
import reprlib
import stat
from typing import BinaryIO, Iterable, Iterator

from imagesets.annotations import schema
from imagesets.constants import IMAGE_SUFFIXES

TASKS = ("classification", "multi_label", "detection", "segmentation")
ON_BAD_BOX = ("error", "clip", "skip")

# Streamed formats (CSV, JSONL, YOLO txt) refuse longer lines (the line end not counted).
MAX_LINE_BYTES = 1 << 20
# Round-off allowed at the image's edge, relative to its side.
EDGE_TOLERANCE = 1e-6

_BOM = b"\xef\xbb\xbf"
_DRIVE = re.compile(r"^[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class AnnotationError(ValueError):
  """An annotation file that cannot be read at all; the message is one line naming the
  file (and line or object where known) and the fix."""

  def __init__(self, message: str):
    super().__init__(" ".join(str(message).split("\n")))


@dataclasses.dataclass(frozen=True)
class Problem:
  where: str    # the file, and the line or object in it
  reason: str   # one line


@dataclasses.dataclass(frozen=True)
class Rle:
  """COCO run-length encoding of one object's pixels (column-major runs, 0s first), as the
  file gives it: `counts` a list of run lengths or COCO's compressed string (checked: the
  runs cover size[0] * size[1] pixels)."""
  size: tuple[int, int]           # (height, width) of the image
  counts: tuple[int, ...] | str


@dataclasses.dataclass(frozen=True)
class Object:
  bbox: tuple[float, float, float, float]  # ymin, xmin, ymax, xmax in [0, 1], min < max
  label: int                                # index into Annotations.class_names
  flags: tuple[int, ...] = ()               # one per Annotations.flag_names, in order
  # Its outline in pixels of the image (COCO `segmentation`): polygons (x0, y0, x1, y1,
  # ...), or an Rle; None when the file gives none. Drawn by `masks.object_masks`.
  segmentation: tuple[tuple[float, ...], ...] | Rle | None = None


@dataclasses.dataclass(frozen=True)
class Entry:
  file_name: str                        # posix path relative to the images folder
  size: tuple[int, int] | None = None   # (height, width) the file declares, if it does
  objects: tuple[Object, ...] = ()      # detection
  labels: tuple[int, ...] = ()          # classification: one; multi_label: sorted, unique
  mask: str | None = None               # segmentation (mask folder): the mask file's path


@dataclasses.dataclass(frozen=True)
class MaskSource:
  """How a build makes an image's masks (`masks.make`); Annotations.masks, None for none."""
  kind: str                      # "objects": drawn from the objects' segmentation (COCO);
                                 # "files": one mask file per image (Entry.mask)
  class_names: tuple[str, ...]   # class id i of a class_mask pixel is class_names[i]; 255 void
  # "files" with CVAT's labelmap.txt: the colour of class id i (the masks are read as
  # colours); () when the masks' pixel values are the class ids themselves.
  colors: tuple[tuple[int, int, int], ...] = ()
  # "objects": the index into Object.flags of the flag whose 1 makes an object's pixels
  # void (COCO's is_crowd); None when no object is void.
  void_flag: int | None = None


@dataclasses.dataclass(frozen=True)
class Annotations:
  task: str                       # one of TASKS
  format: str                     # one of formats.FORMATS
  source: str                     # the annotation file or folder read
  class_names: tuple[str, ...]    # label i is class_names[i]; unique, not empty
  entries: dict[str, Entry]       # by file_name, in file_name order; all in the images
  flag_names: tuple[str, ...] = ()
  # Flags whose values index these names; every other flag is 0 or 1.
  flag_classes: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
  problems: tuple[Problem, ...] = ()  # any one stops a build
  fixed: tuple[Problem, ...] = ()     # boxes clipped or left out under on_bad_box
  unlisted: tuple[str, ...] = ()      # images the annotation file never mentions, sorted
  masks: MaskSource | None = None     # the build stores masks (see MaskSource)

  @property
  def negatives(self) -> int:
    """Entries with no objects (detection) or no labels (multi-label)."""
    if self.task in ("classification", "segmentation"):
      return 0
    return sum(not (entry.objects or entry.labels) for entry in self.entries.values())


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
  """A JSON object's dict (json's `object_pairs_hook`); a key given twice is refused,
  since which of its values the labeling tool meant cannot be known."""
  made = dict(pairs)
  if len(made) < len(pairs):
    seen = set()
    twice = next(key for key, _ in pairs if key in seen or seen.add(key))
    raise DuplicateKeyError(f"the key {shown(twice)} twice in one object, {shown(made)}")
  return made


class DuplicateKeyError(ValueError):
  """A JSON object that names one key twice."""


class _BoundedRepr(reprlib.Repr):
  """reprlib's repr: a few items of a few levels, so its work is bounded whatever the
  value's size (a document's shared sublists, as YAML aliases make, can repr to
  gigabytes). Strings are cut at their end and dicts keep their order, as repr shows them."""

  def __init__(self, limit: int):
    super().__init__()
    self.maxlevel = 3
    self.maxstring = self.maxlong = self.maxother = limit

  def repr_str(self, x: str, level: int) -> str:
    return repr(x[:self.maxstring])

  def repr_dict(self, x: dict, level: int) -> str:
    if not x or level <= 0:
      return "{...}" if x else "{}"
    pieces = [f"{self.repr1(key, level - 1)}: {self.repr1(item, level - 1)}"
              for key, item in itertools.islice(x.items(), self.maxdict)]
    return "{" + ", ".join(pieces + ["..."] * (len(x) > self.maxdict)) + "}"


def shown(value: object, limit: int = 80) -> str:
  """A value from a file, quoted for a one-line message and cut to `limit` characters."""
  text = _BoundedRepr(limit).repr(value)
  return text if len(text) <= limit else text[:limit - 3] + "..."


def name_problem(name: object) -> str | None:
  """Why `name` is not a relative posix path inside the images folder; None if it is."""
  if not isinstance(name, str):
    return f"file name {shown(name)} is not a string"
  if not name:
    return "empty file name"
  if _CONTROL.search(name):
    return f"file name {shown(name)} holds a NUL or control character"
  if "\\" in name or _DRIVE.match(name):
    return (f"file name {shown(name)} is a Windows path: write it relative to the images "
            "folder with '/'")
  if name.startswith("/"):
    return (f"file name {shown(name)} is absolute: write it relative to the images folder")
  parts = name.split("/")
  if ".." in parts:
    return f"file name {shown(name)} has a '..' component: it must stay inside the images folder"
  if "." in parts or "" in parts:
    return (f"file name {shown(name)} has an empty or '.' component: write it as "
            f"{shown('/'.join(p for p in parts if p not in ('', '.')))}")
  return None


def class_name_problem(name: object) -> str | None:
  """Why `name` cannot be a class name (TFDS keeps them one per line, stripped)."""
  if not isinstance(name, str):
    return f"class name {shown(name)} is not a string"
  if not name:
    return "empty class name"
  if _CONTROL.search(name) or name != name.strip():
    return f"class name {shown(name)} has control characters or surrounding spaces"
  if name in (schema.NO_LABELS, schema.NO_OBJECTS):
    return f"class name {shown(name)} is what reports call an image without any: rename it"
  return None


def _kind(mode: int) -> str:
  """What a file that is not a regular one is, in words, by its st_mode."""
  return ("a symbolic link" if stat.S_ISLNK(mode) else
          "a named pipe (FIFO)" if stat.S_ISFIFO(mode) else
          "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
          "a socket" if stat.S_ISSOCK(mode) else "a folder" if stat.S_ISDIR(mode) else
          "not a file")


def check_size(path: str, size: int, limit: int | None, what: str) -> None:
  """Refuses a file of `size` bytes over `limit` (None: any size) before anything reads it."""
  if limit is not None and size > limit:
    raise AnnotationError(
        f"{path}: {size:,} bytes, over the {limit:,}-byte limit of a {what} (refused "
        "unread so a bad file cannot exhaust memory): check that this is the annotation "
        "file, or split the dataset")


def present(path: str) -> bool:
  """An entry named `path` exists, of whatever kind: a names file looked up by its name is
  then the one meant, and `opened` refuses it, naming it, if it is no regular file (a FIFO,
  a folder, a dangling link), rather than the lookup passing it over for the next name."""
  return os.path.lexists(path)


def given_as_file(path: str) -> bool:
  """`path` names a file (`present`, not a folder): read as one, and refused, naming what
  it is, if it is no regular file."""
  return present(path) and not os.path.isdir(path)


def opened(path: str, what: str, limit: int | None = None) -> BinaryIO:
  """`path` open for binary reads once its descriptor is a regular file of at most `limit`
  bytes, else AnnotationError naming it: opened non-blocking, so a FIFO is never waited
  on (a regular file's reads never block); a device is never read."""
  try:
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
  except OSError as e:
    why = ("a link to nothing: its target is missing" if os.path.islink(path)
           and not os.path.exists(path) else e.strerror or type(e).__name__)
    raise AnnotationError(f"{path}: cannot be opened ({why}): give a readable {what}") from None
  try:  # (checked before fdopen, which refuses a folder with a raw IsADirectoryError)
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode):
      raise AnnotationError(f"{path}: {_kind(status.st_mode)}, not a regular file (never "
                            f"read): give the {what} itself")
    check_size(path, status.st_size, limit, what)
    return os.fdopen(descriptor, "rb")
  except BaseException:
    os.close(descriptor)
    raise


def _grown(path: str, limit: int, what: str) -> AnnotationError:
  return AnnotationError(f"{path}: grew past the {limit:,}-byte limit of a {what} while it was "
                         "read: read it again once whatever writes it is done")


def read_bounded(path: str, limit: int, what: str) -> bytes:
  """The bytes of the regular file `path` (`opened`), no more than `limit` of them read."""
  with opened(path, what, limit) as f:
    # Sized by its stat (a read of n allocates n bytes), then on to the limit if the stat
    # understated it: a file still being written, or one of /proc's (which say 0).
    stated = os.fstat(f.fileno()).st_size
    data = f.read(stated + 1)
    if len(data) > stated:
      data += f.read(limit + 1 - len(data))
  if len(data) > limit:
    raise _grown(path, limit, what)
  return data


def lines(path: str, limit: int | None = None,
          what: str = "annotation file") -> Iterator[tuple[int, str]]:
  """(1-based line number, text with its line end) of a UTF-8 text file, streamed from a
  regular file (`opened`) of at most `limit` bytes (None: any size)."""
  with opened(path, what, limit) as f:
    number, total = 0, 0
    while raw := f.readline(MAX_LINE_BYTES + 2):
      number += 1
      total += len(raw)
      if limit is not None and total > limit:
        raise _grown(path, limit, what)
      if len(raw.rstrip(b"\r\n")) > MAX_LINE_BYTES:
        raise AnnotationError(f"{path} line {number}: longer than {MAX_LINE_BYTES:,} bytes: "
                              "check that this is the annotation file")
      if number == 1 and raw.startswith(_BOM):
        raw = raw[len(_BOM):]
      try:
        yield number, raw.decode("utf-8")
      except UnicodeDecodeError as e:
        raise AnnotationError(f"{path} line {number}: not UTF-8 (byte {e.start + 1} of the "
                              "line): save the file as UTF-8") from None


def _hidden(name: str) -> bool:
  return name.startswith(".") or name == "__MACOSX"


@dataclasses.dataclass(frozen=True)
class Listing:
  """What `files_under` found in an annotation folder."""
  files: list[str]          # the files to read: sorted posix paths relative to the folder
  refused: list[Problem]    # what is there but not read, each naming itself and the fix
  # Every name ending in the suffix sought, read or refused, sorted: what tells a folder's
  # format (a refused file is named when the folder is read).
  named: list[str]
  linked: list[str] = dataclasses.field(default_factory=list)  # sub-folders refused as links

  def behind_a_link(self, relative: str) -> bool:
    """Whether `relative` lies in a linked sub-folder refused (`linked`): named already."""
    return any(relative.startswith(folder + "/") for folder in self.linked)


_NOT_REGULAR = ("not a regular file, so never opened (a FIFO can block the read, a device "
                "never ends, a link to nothing has nothing to read): put the file itself here")
_LINKED_FOLDER = ("a link to a folder holding annotation files, not followed (annotations "
                  "are read from the folder given and its own sub-folders, whatever "
                  "follow_links is): its files would be left unread; put the folder itself "
                  "here, or remove the link")


def _listed(folder: str, relative: str) -> list[os.DirEntry]:
  """The entries of the sub-folder `relative` of `folder`; AnnotationError naming it when
  it cannot be listed (its annotation files would otherwise go unread, unnoticed)."""
  path = os.path.join(folder, *relative.split("/")) if relative else folder
  try:
    with os.scandir(path) as entries:
      return list(entries)
  except OSError as e:
    raise AnnotationError(f"{path}: cannot be listed ({e.strerror or type(e).__name__}): "
                          "its annotation files would be left unread; make the folder "
                          "readable, or move it out of the annotations") from None


def _holds(path: str, suffix: str) -> bool:
  """Whether the folder `path` or a sub-folder of it (links not followed) holds a name
  ending in `suffix` (any case) that is not hidden."""
  for top, folders, files in os.walk(path):
    folders[:] = [name for name in folders if not _hidden(name)]
    if any(not _hidden(name) and name.lower().endswith(suffix) for name in files):
      return True
  return False


def _what(entry: os.DirEntry) -> str:
  """What a name that is no regular file (nor a link to one) is, in words."""
  try:
    mode = entry.stat(follow_symlinks=True).st_mode
  except OSError:
    return "a link to nothing"
  return ("a link to " if entry.is_symlink() else "") + _kind(mode)


def files_under(folder: str, suffix: str) -> Listing:
  """The files of `folder` and its sub-folders ending in `suffix` (any case), hidden files
  and folders (.*, __MACOSX) left out. `files`: regular files, and links to regular files
  (a DVC or git-annex checkout links every file; each is read bounded, `opened`). `refused`:
  a FIFO, device or socket, a link to one or to nothing, and a link to a folder that holds
  such names (never followed, whatever the build's follow_links: a link to a folder of
  other things, such as images, is left alone). AnnotationError when a folder cannot be
  listed."""
  files, refused, named, linked = [], [], [], []
  pending = [""]   # sub-folders still to list, relative to `folder` ("" is itself)
  while pending:
    top = pending.pop()
    for entry in _listed(folder, top):
      if _hidden(entry.name):
        continue
      relative = f"{top}/{entry.name}" if top else entry.name
      if entry.is_dir(follow_symlinks=False):
        pending.append(relative)
        continue
      sought = entry.name.lower().endswith(suffix)
      if sought:
        named.append(relative)
      if entry.is_symlink() and entry.is_dir():
        if _holds(entry.path, suffix):
          refused.append(Problem(inside(folder, relative), _LINKED_FOLDER))
          linked.append(relative)
      elif sought and entry.is_file():
        files.append(relative)
      elif sought:
        refused.append(Problem(inside(folder, relative), f"{_what(entry)}, {_NOT_REGULAR}"))
  return Listing(sorted(files), sorted(refused, key=lambda problem: problem.where),
                 sorted(named), sorted(linked))


def inside(folder: str, relative: str) -> str:
  """How messages name a file of an annotation folder: "<folder's name>/<relative>"."""
  return f"{os.path.basename(os.path.normpath(folder))}/{relative}"


def text_number(text: str | None) -> float | None:
  """A number written as text (NaN and infinities included); None if it is none."""
  try:
    return float(text.strip()) if isinstance(text, str) else None
  except ValueError:
    return None


def _n(value: float) -> str:
  return f"{value:.10g}"


def _corners(x0: float, y0: float, x1: float, y1: float) -> str:
  return f"x {_n(x0)}..{_n(x1)}, y {_n(y0)}..{_n(y1)}"


_NO_ROOT = "the images folder"
# Suffixes of files beside the images that are not pictures: annotations (YOLO's labels
# may be there), sidecars; "" (no suffix) and "." (a trailing dot) too.
_NOT_PICTURES = frozenset({"", ".", ".txt", ".xml", ".json", ".jsonl", ".csv", ".yaml", ".yml",
                           ".xmp", ".aae", ".npy", ".md", ".ds_store"})
# What follows "no such image ..." for a file a build does not read: the fix.
_NOT_READ = f" that a build reads (it reads {', '.join(IMAGE_SUFFIXES)} files; {{}})"


class Reader:
  """What one read collects: entries' names checked and claimed, boxes placed under the
  bad-box policy, problems and fixes in the order found."""

  def __init__(self, source: str, images: Iterable[str], on_bad_box: str = "error",
               images_root: str = "", unread: Iterable[str] = ()):
    if on_bad_box not in ON_BAD_BOX:
      raise ValueError(f"on_bad_box={on_bad_box!r}: use one of {', '.join(ON_BAD_BOX)}")
    self.source = source
    self.images = frozenset(images)
    self.on_bad_box = on_bad_box
    self.images_root = images_root or _NO_ROOT
    # the images folder's other files (`class_folders_tree.image_files`' ignored), by stem
    self.unread_by_stem = images_by_stem(
        name for name in unread if posixpath.splitext(name)[1].lower() not in _NOT_PICTURES)
    self.problems: list[Problem] = []
    self.fixed: list[Problem] = []
    self._claimed: dict[str, str] = {}   # file_name -> where its entry is

  def problem(self, where: str, reason: str) -> None:
    self.problems.append(Problem(where, reason))

  def name(self, where: str, name: object) -> str | None:
    """`name` if it is a safe relative name, else None and a problem."""
    reason = name_problem(name)
    if reason:
      self.problem(where, reason)
      return None
    return name

  def claim(self, where: str, file_name: str) -> bool:
    """True for the first entry of an image in `images`; else False and a problem."""
    if file_name in self._claimed:
      self.problem(where, f"a second entry for {file_name} (the first: {self._claimed[file_name]})")
      return False
    self._claimed[file_name] = where
    if file_name not in self.images:
      reason = f"{file_name}: no such image in {self.images_root}"
      if not file_name.lower().endswith(IMAGE_SUFFIXES):   # (such files are not listed)
        suffix = posixpath.splitext(file_name)[1]
        reason += (_NOT_READ.format(f"convert a {suffix} image to JPEG or PNG and name the "
                                    "new file") if suffix else
                   _NOT_READ.format("a name without a suffix is never read"))
      self.problem(where, reason)
      return False
    return True

  def unclaimed(self) -> list[str]:
    """The images no entry has claimed yet, sorted."""
    return sorted(self.images.difference(self._claimed))

  def bad_box(self, where: str, reason: str) -> None:
    """A box that cannot be placed: left out and recorded under "skip", else a problem."""
    if self.on_bad_box == "skip":
      self.fixed.append(Problem(where, f"left out: {reason}"))
    else:
      self.problem(where, reason)

  def box(self, where: str, x0: float, y0: float, x1: float, y1: float,
          width: float, height: float) -> tuple[float, float, float, float] | None:
    """The normalised (ymin, xmin, ymax, xmax) of corners given in the units of `width`
    and `height` (pixels, or 1 for normalised boxes), or None when the box is not kept."""
    if not all(map(math.isfinite, (x0, y0, x1, y1))):
      self.bad_box(where, f"box with a non-finite coordinate: {_corners(x0, y0, x1, y1)}")
      return None
    if x1 <= x0 or y1 <= y0:
      self.bad_box(where, f"box of zero or negative width/height: {_corners(x0, y0, x1, y1)}")
      return None
    outside, clipped = [], []   # the axes past the edge (beyond round-off), as words
    for axis, low, high, side, extent in (("x", x0, x1, "width", width),
                                          ("y", y0, y1, "height", height)):
      slack = EDGE_TOLERANCE * extent
      if low < -slack or high > extent + slack:
        outside.append(f"{axis} {_n(low)}..{_n(high)} of {side} {_n(extent)}")
        clipped.append(f"{axis} {_n(low)}..{_n(high)} to {_n(max(low, 0.0))}.."
                       f"{_n(min(high, extent))} of {side} {_n(extent)}")
    bbox = tuple(min(max(value, 0.0), 1.0)
                 for value in (y0 / height, x0 / width, y1 / height, x1 / width))
    if not (bbox[0] < bbox[2] and bbox[1] < bbox[3]):
      self.bad_box(where, f"box wholly outside the image: {', '.join(outside)}" if outside else
                   f"box of zero area in the image: {_corners(x0, y0, x1, y1)}")
      return None
    if outside and self.on_bad_box == "error":
      self.problem(where, f"box outside the image: {', '.join(outside)}")
      return None
    if outside:
      self.fixed.append(Problem(where, f"box clipped to the image: {', '.join(clipped)}"))
    return bbox

  def problems_told(self) -> str:
    """The problems found so far, one a line, for an error that stops the reading (so
    that what made it stop is never hidden behind it)."""
    if not self.problems:
      return ""
    return (f"; {len(self.problems)} problem(s) found before:\n"
            + "\n".join(f"  {p.where}: {p.reason}" for p in self.problems))

  def annotations(self, *, task: str, format: str, class_names: Iterable[str],
                  entries: Iterable[Entry], unmentioned: str,
                  flag_names: tuple[str, ...] = (),
                  flag_classes: dict[str, tuple[str, ...]] | None = None,
                  masks: MaskSource | None = None) -> Annotations:
    """The result. `entries`: of claimed images. `unmentioned`: what the images nothing
    claimed are: "negative" (an entry without annotations) or "unlisted"."""
    class_names = tuple(class_names)
    if not class_names:
      raise AnnotationError(f"{self.source}: no class names: a {format} dataset needs at "
                            "least one class" + self.problems_told())
    assert task in TASKS and unmentioned in ("negative", "unlisted"), (task, unmentioned)
    by_name = {entry.file_name: entry for entry in entries}
    rest = sorted(self.images.difference(self._claimed))
    if unmentioned == "negative":
      by_name.update((name, Entry(name)) for name in rest)
      rest = []
    return Annotations(
        task=task, format=format, source=self.source, class_names=class_names,
        entries={name: by_name[name] for name in sorted(by_name)},
        flag_names=tuple(flag_names), flag_classes=dict(flag_classes or {}),
        problems=tuple(self.problems), fixed=tuple(self.fixed), unlisted=tuple(rest),
        masks=masks)


def images_by_stem(images: Iterable[str]) -> dict[str, list[str]]:
  """{relative path without its suffix: the images with it}, for label files that name
  their image by their own path (labels/sub/a.txt -> sub/a.*)."""
  found: dict[str, list[str]] = {}
  for name in sorted(images):
    found.setdefault(posixpath.splitext(name)[0], []).append(name)
  return found


def image_of_stem(reader: Reader, where: str, stem: str,
                  by_stem: dict[str, list[str]]) -> str | None:
  """The one image whose path without suffix is `stem`, claimed; else None and a problem."""
  candidates = by_stem.get(stem, [])
  if not candidates:
    unread = reader.unread_by_stem.get(stem)
    reader.problem(where, f"no image {stem}.* in {reader.images_root}" + (_NOT_READ.format(
        f"{shown(unread[0])} is not one: convert it to JPEG or PNG") if unread else ""))
    return None
  if len(candidates) != 1:
    reader.problem(where, f"several images for it: {', '.join(candidates)}")
    return None
  return candidates[0] if reader.claim(where, candidates[0]) else None
