"""class_folders_tree: labels from sorted folder names, images by name in any case, the rest
listed as ignored; works on local folders and tf.io.gfile URLs."""

import pytest
import tensorflow as tf

from imagesets.building import class_folders_tree


def write(root, files):
  for relative, data in files.items():
    path = f"{root}/{relative}"
    tf.io.gfile.makedirs(path.rsplit("/", 1)[0])
    with tf.io.gfile.GFile(path, "wb") as f:
      f.write(data)


FILES = {
    "tulips/a.jpg": b"1", "tulips/B.JPG": b"2", "tulips/c.jpeg": b"3", "tulips/d.PNG": b"4",
    "daisy/sub/e.jpg": b"5",                 # nested: still daisy
    "Roses/f.png": b"6",                     # capitalised class names sort as strings
    "LICENSE.txt": b"cc-by", "top.jpg": b"7",  # not in a class folder
    "tulips/.DS_Store": b"", "tulips/Thumbs.db": b"", "tulips/notes.txt": b"",
    "tulips/._a.jpg": b"appledouble",        # macOS resource fork, named like an image
    ".hidden/g.jpg": b"8", "__MACOSX/tulips/._a.jpg": b"",
}


@pytest.mark.parametrize("where", ["local", "ram"])
def test_scan_lists_images_and_ignored_files(where, tmp_path):
  root = str(tmp_path / "photos") if where == "local" else f"ram://{tmp_path.name}/photos"
  write(root, FILES)
  tree = class_folders_tree.scan(root)
  assert tree.class_names == ["Roses", "daisy", "tulips"]
  assert tree.images == ["Roses/f.png", "daisy/sub/e.jpg", "tulips/B.JPG", "tulips/a.jpg",
                         "tulips/c.jpeg", "tulips/d.PNG"]
  assert tree.ignored == [".hidden/g.jpg", "LICENSE.txt", "__MACOSX/tulips/._a.jpg", "top.jpg",
                          "tulips/.DS_Store", "tulips/._a.jpg", "tulips/Thumbs.db",
                          "tulips/notes.txt"]
  assert class_folders_tree.label_of("daisy/sub/e.jpg") == "daisy"
  assert class_folders_tree.read(root, "tulips/B.JPG") == b"2"
  assert class_folders_tree.is_remote(root) == (where == "ram")


def test_missing_or_empty_roots_are_clear_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match="not a folder"):
    class_folders_tree.scan(str(tmp_path / "nope"))
  write(str(tmp_path / "flat"), {"a.jpg": b"1"})
  with pytest.raises(ValueError, match="no class folders"):
    class_folders_tree.scan(str(tmp_path / "flat"))


@pytest.mark.parametrize("scan", [class_folders_tree.scan, class_folders_tree.keras_scan])
def test_image_names_that_are_not_utf8_are_one_error_naming_one(scan, tmp_path):
  # (a Latin-1 name: the build failed later at the first record, naming no file)
  (tmp_path / "cat").mkdir()
  (tmp_path / "cat" / "ok.jpg").write_bytes(b"1")
  with open(bytes(tmp_path / "cat") + b"/caf\xe9.jpg", "wb") as f:
    f.write(b"2")
  with open(bytes(tmp_path / "cat") + b"/notes\xe9.txt", "wb") as f:  # (not an image)
    f.write(b"3")
  with pytest.raises(ValueError) as refused:
    scan(str(tmp_path))
  assert str(refused.value) == (
      f"1 image file name(s) under {str(tmp_path)!r} are not UTF-8, e.g. b'cat/caf\\xe9.jpg': "
      "a version stores file and class names as UTF-8 text; rename them to UTF-8 (e.g. "
      f"convmv -f latin1 -t utf8 -r --notest {tmp_path})")
