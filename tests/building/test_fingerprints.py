"""fingerprints: what each fingerprint of a class-per-folder tree sees and what it cannot."""

import os
import pathlib

from imagesets.building import class_folders_tree
from imagesets.building import fingerprints
from imagesets_testing import sample_images
from imagesets_testing.trees import write_tree

OPTIONS = {"seed": 0, "shorter_side": 0}


def make(tmp_path) -> pathlib.Path:
  return pathlib.Path(write_tree(tmp_path / "tree", {
      f"{name}/{i}.jpg": sample_images.jpeg(20 + i, 30, seed=i) for name in ("a", "b")
      for i in range(3)}))


def both(root, options=OPTIONS) -> tuple[str, str]:
  images = class_folders_tree.scan(str(root)).images
  return (fingerprints.listing(str(root), images, options),
          fingerprints.content(str(root), images, options))


def test_the_same_tree_and_options_give_the_same_fingerprints_even_elsewhere(tmp_path):
  root = make(tmp_path)
  first = both(root)
  assert both(root) == first
  copy = root.rename(tmp_path / "moved")
  listing, content = both(copy)
  assert content == first[1]   # content: paths relative to the root, and bytes
  assert listing == first[0]   # rename keeps sizes and mtimes


def test_seed_shorter_side_and_file_format_change_both(tmp_path):
  root = make(tmp_path)
  first = both(root)
  for options in ({**OPTIONS, "seed": 1}, {**OPTIONS, "shorter_side": 64},
                  {**OPTIONS, "file_format": "array_record"}):
    changed = both(root, options)
    assert changed[0] != first[0] and changed[1] != first[1], options
  assert fingerprints.options_digest(OPTIONS) == fingerprints.options_digest(dict(
      reversed(OPTIONS.items())))  # key order does not matter
  assert fingerprints.options_digest(OPTIONS) != fingerprints.options_digest(
      {**OPTIONS, "seed": 1})


def _add(root):
  (root / "a" / "new.jpg").write_bytes(sample_images.jpeg(20, 30, seed=50))


def _remove(root):
  (root / "a" / "0.jpg").unlink()


def _rename(root):
  (root / "a" / "0.jpg").rename(root / "b" / "0b.jpg")


def _edit(root):
  path = root / "a" / "0.jpg"
  before = path.stat()
  path.write_bytes(sample_images.jpeg(20, 30, seed=51))
  os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))


def test_added_removed_renamed_and_edited_files_change_both(tmp_path):
  for change in (_add, _remove, _rename, _edit):
    root = make(tmp_path / change.__name__)
    first = both(root)
    change(root)
    changed = both(root)
    assert changed[0] != first[0] and changed[1] != first[1], change.__name__


def test_a_same_size_same_mtime_replacement_changes_only_the_content_fingerprint(tmp_path):
  root = pathlib.Path(write_tree(tmp_path / "tree", {
      f"{name}/{i}.bmp": sample_images.encode(sample_images.photo(20, 30, seed=i), "BMP")
      for name in ("a", "b") for i in range(2)}))
  first = both(root)
  path = root / "a" / "0.bmp"
  before = path.stat()
  path.write_bytes(sample_images.encode(sample_images.photo(20, 30, seed=99), "BMP"))
  os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
  assert path.stat().st_size == before.st_size
  listing, content = both(root)
  assert listing == first[0]   # rsync's quick check cannot see it
  assert content != first[1]


def test_the_content_fingerprint_keeps_its_format(tmp_path):
  """Builds compare it with the one stored in their metadata: the format must not drift."""
  import hashlib
  import json
  root = make(tmp_path)
  images = class_folders_tree.scan(str(root)).images
  expected = hashlib.sha256(json.dumps(OPTIONS, sort_keys=True).encode())
  for path in images:
    digest = hashlib.sha256((root / path).read_bytes()).hexdigest()
    expected.update(f"{path}\0{digest}".encode() + b"\0")
  assert fingerprints.content(str(root), images, OPTIONS) == expected.hexdigest()
