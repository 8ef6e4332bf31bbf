"""List a class-per-folder image tree: root/<class>/**/<image>, local or in a bucket.

Labels are the sorted names of root's sub-folders (as keras' image_dataset_from_directory
and TF-slim do). Candidate images are chosen by file name, any case (`.JPG`, `.jpeg`);
their content is checked later (imagesets.building.image_checks), so a text file named `x.jpg` is
reported, not skipped. Everything else (LICENSE.txt, .DS_Store, Thumbs.db, files next to
the class folders, anything in hidden folders such as __MACOSX/) is listed as ignored, so
the caller can say what it left out.
"""

import dataclasses
import os
import posixpath

from imagesets.constants import IMAGE_SUFFIXES


@dataclasses.dataclass(frozen=True)
class ClassTree:
  class_names: list[str]           # sorted: label i is class_names[i]
  images: list[str]                # relative paths "<class>/.../<file>", sorted
  ignored: list[str]               # relative paths of files that are not images by name


def label_of(relative_path: str) -> str:
  """The class of an image: the top-level folder of its relative path."""
  return relative_path.split("/", 1)[0]


def is_remote(root: str) -> bool:
  """A bucket or other URL-style path (gs://, s3://, ram://), read through tf.io.gfile."""
  return "://" in str(root)


def gfile():
  """TensorFlow's file system, which reads bucket trees: it loads only for those (a local
  tree is read with os, so `verify` and the checks before a build never load TensorFlow)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  return tf.io.gfile


def _isdir(path: str) -> bool:
  return gfile().isdir(path) if is_remote(path) else os.path.isdir(path)


def read(root: str, relative_path: str) -> bytes:
  """The bytes of one file of the tree."""
  path = posixpath.join(str(root), relative_path)
  if not is_remote(root):
    with open(path, "rb") as f:  # plain I/O: safe and fastest in forked workers
      return f.read()
  with gfile().GFile(path, "rb") as f:
    return f.read()


def _hidden(name: str) -> bool:
  return name.startswith(".") or name == "__MACOSX"


def class_names(root: str) -> list[str]:
  """Sorted names of the class folders in `root` (hidden folders are not classes)."""
  root = str(root)
  if not _isdir(root):
    raise FileNotFoundError(f"class-per-folder root {root!r} is not a folder")
  listed = gfile().listdir(root) if is_remote(root) else os.listdir(root)
  names = sorted(name.rstrip("/") for name in listed
                 if not _hidden(name) and _isdir(posixpath.join(root, name.rstrip("/"))))
  if not names:
    raise ValueError(f"{root!r} has no class folders: expected root/<class>/<image files>")
  return names


def scan(root: str, follow_links: bool = False) -> ClassTree:
  """Lists every file under `root`; images sorted by relative path.

  `follow_links`: also descend into symlinked folders (local trees; as keras' option).
  """
  root = str(root).rstrip("/")
  names = class_names(root)
  images, ignored = image_files(root, follow_links=follow_links, top_level=False)
  return ClassTree(names, images, ignored)


def image_files(root: str, *, follow_links: bool = False,
                top_level: bool = True) -> tuple[list[str], list[str]]:
  """(images, ignored): the sorted relative paths of every file under `root` named like an
  image outside hidden folders, and of every other file. `top_level=False`: files directly
  in `root` are ignored too (a class tree's images are in its class folders)."""
  root = str(root).rstrip("/")
  if not _isdir(root):
    raise FileNotFoundError(f"{root!r} is not a folder")
  images, ignored = [], []
  # os.walk: no per-file stat calls.
  walk = gfile().walk(root) if is_remote(root) else os.walk(root, followlinks=follow_links)
  for top, _, files in walk:
    relative_top = posixpath.relpath(top.replace("\\", "/"), root.replace("\\", "/"))
    parts = [] if relative_top == "." else relative_top.split("/")
    for name in files:
      relative = "/".join(parts + [name])
      placed = (top_level or parts) and not any(map(_hidden, parts))
      if placed and not _hidden(name) and name.lower().endswith(IMAGE_SUFFIXES):
        images.append(relative)
      else:
        ignored.append(relative)
  return sorted(check_utf8(root, images)), sorted(ignored)


def check_utf8(root: str, images: list[str]) -> list[str]:
  """`images`, if every name is UTF-8; else ValueError naming the first one and the fix. A
  name that is not (a Latin-1 zip's, an old camera's) comes from the file system as
  surrogate escapes, which no UTF-8 text a version stores (names, keys, classes) can hold."""
  bad = [path for path in images if not _is_utf8(path)]
  if bad:
    raise ValueError(
        f"{len(bad)} image file name(s) under {root!r} are not UTF-8, e.g. "
        f"{os.fsencode(bad[0])!r}: a version stores file and class names as UTF-8 text; "
        f"rename them to UTF-8 (e.g. convmv -f latin1 -t utf8 -r --notest {root})")
  return images


def _is_utf8(name: str) -> bool:
  try:
    name.encode("utf-8")
  except UnicodeEncodeError:
    return False
  return True


KERAS_SUFFIXES = (".bmp", ".gif", ".jpeg", ".jpg", ".png")  # keras' ALLOWLIST_FORMATS


def keras_scan(root: str, follow_links: bool = False) -> ClassTree:
  """The files keras' index_directory lists (labels="inferred"), for a call that must
  read what keras reads: the class folders are the folders not starting with "." (so
  `__MACOSX` is one), each walked as its own top (a symlinked class folder is read), and
  every file with keras' suffixes is an image, hidden ones included. Buckets: `scan`."""
  root = str(root).rstrip("/")
  if is_remote(root):
    return scan(root, follow_links)
  if not os.path.isdir(root):
    raise FileNotFoundError(f"{root!r} is not a folder: give the folder that holds one "
                            "sub-folder of images per class (root/<class>/<image files>)")
  names = sorted(name for name in os.listdir(root)
                 if not name.startswith(".") and os.path.isdir(os.path.join(root, name)))
  if not names:
    raise ValueError(f"{root!r} has no class folders: expected root/<class>/<image files>")
  images, ignored = [], []
  for name in names:
    for top, _, files in os.walk(os.path.join(root, name), followlinks=follow_links):
      relative_top = os.path.relpath(top, root)
      if os.sep != "/":
        relative_top = relative_top.replace(os.sep, "/")
      for file in files:
        (images if file.lower().endswith(KERAS_SUFFIXES) else ignored).append(
            posixpath.join(relative_top, file))
  return ClassTree(names, sorted(check_utf8(root, images)), sorted(ignored))
