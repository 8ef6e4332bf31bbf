"""YOLO txt labels: the accepted layouts, names files, round trips and bad lines."""

import os

import pytest

from imagesets.annotations import objects
from imagesets.annotations import yolo
from imagesets_testing import annotation_files

IMAGES = ["a.jpg", "b.jpg", "sub/c.jpg", "d.png"]


@pytest.fixture(scope="module", params=[0, 1, 2, 3])
def known(request, tmp_path_factory):
  return annotation_files.write(tmp_path_factory.mktemp("known"), seed=request.param,
                                count=6 + 3 * request.param)


@pytest.mark.parametrize("form", ["dataset folder", "labels folder", "data.yaml"])
def test_known_boxes_and_labels_come_back_from_every_accepted_path(known, form):
  path = {"dataset folder": known.yolo, "labels folder": known.yolo / "labels",
          "data.yaml": known.yolo_yaml}[form]
  annotations = yolo.read(str(path), annotation_files.list_images(known.images_dir))
  # The files hold 6 decimals, as exporters write them.
  assert known.mismatches(annotations, "yolo", tolerance=1e-6) == []
  assert annotations.flag_names == () and annotations.entries[known.without_file].objects == ()


def _dataset(tmp_path, labels: dict[str, str], names_file=("classes.txt", "cat\ndog\n"),
             names_in="labels"):
  folder = tmp_path / "labels"
  folder.mkdir()
  for name, text in labels.items():
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
  if names_file:
    (tmp_path / names_in / names_file[0]).write_text(names_file[1])
  return folder


def _read(tmp_path, labels, images=IMAGES, **options):
  names = {key: options.pop(key) for key in ("names_file", "names_in") if key in options}
  folder = _dataset(tmp_path, labels, **names)
  return yolo.read(str(folder), images, images_root="/data/images", **options)


def _reasons(annotations) -> list[tuple[str, str]]:
  return [(p.where, p.reason) for p in annotations.problems]


def test_boxes_labels_mirrored_folders_and_negatives(tmp_path):
  annotations = _read(tmp_path, {"a.txt": "1 0.5 0.5 1.0 1.0\n\n0 0.15 0.25 0.1 0.1\n",
                                 "sub/c.txt": "0 0.5 0.5 0.2 0.2\n", "b.txt": ""})
  assert annotations.problems == () and annotations.class_names == ("cat", "dog")
  a = annotations.entries["a.jpg"]
  assert a.size is None and [o.label for o in a.objects] == [1, 0]
  assert a.objects[0].bbox == (0.0, 0.0, 1.0, 1.0)
  assert a.objects[1].bbox == pytest.approx((0.2, 0.1, 0.3, 0.2), abs=1e-12)
  assert annotations.entries["sub/c.jpg"].objects[0].bbox == pytest.approx((0.4, 0.4, 0.6, 0.6))
  assert annotations.entries["b.jpg"] == objects.Entry("b.jpg")
  assert annotations.entries["d.png"] == objects.Entry("d.png")   # no label file
  assert annotations.negatives == 2 and annotations.unlisted == ()


@pytest.mark.parametrize("names_file", [
    ("data.yaml", "nc: 2\nnames: [cat, dog]\n"),
    ("data.yaml", "names:\n  1: dog\n  0: cat\n"),
    ("data.yaml", "path: ../datasets/pets\ntrain: images/train\nnames:\n  - cat\n  - dog\n"),
    ("classes.txt", "cat\r\ndog\r\n\r\n"),
    ("obj.names", "cat\ndog"),
])
@pytest.mark.parametrize("names_in", ["labels", "."])
def test_the_names_files_in_the_labels_folder_or_its_parent(tmp_path, names_file, names_in):
  annotations = _read(tmp_path, {"a.txt": "1 0.5 0.5 0.2 0.2\n"}, names_file=names_file,
                      names_in=names_in)
  assert annotations.class_names == ("cat", "dog") and annotations.problems == ()
  assert annotations.entries["a.jpg"].objects[0].label == 1


@pytest.mark.parametrize("names_file, words", [
    (("data.yaml", "names:\n  0: cat\n  2: dog\n"), r"ids \[0, 2\] are not 0..1"),
    (("data.yaml", "names:\n  '0': cat\n"), "are not 0..0"),
    (("data.yaml", "nc: 3\nnames: [cat, dog]\n"), "`nc: 3` but 2 names"),
    (("data.yaml", "train: images\n"), "no `names:`"),
    (("data.yaml", "names: [cat, cat]\n"), "class 1: class name 'cat' given twice"),
    (("data.yaml", "names: [cat, 7]\n"), "class 1: class name 7 is not a string"),
    (("data.yaml", "names: [cat, dog\n"), r"data.yaml line 2: not valid YAML"),
    (("data.yaml", "names: !!python/object/apply:os.system [echo pwned]\n"), "not valid YAML"),
    (("data.yaml", "names:\n  0: person\n  1: car\n  1: bike\n  2: dog\n"),
     r"data.yaml line 4: not valid YAML \(the key 1 twice in one mapping, first on line 3; "
     r"keep one\): fix the file"),
    (("data.yaml", "names: [cat]\nnc: 1\nnames: [dog]\n"), "line 3: .*the key 'names' twice"),
    (("data.yaml", "cats: &c [cat]\nnames: *c\n"), "line 1: not valid YAML \\(the anchor 'c'; "
                                                    "anchors and aliases are refused"),
    (("data.yaml", "names: *c\n"), "line 1: not valid YAML \\(the alias 'c'"),
    (("classes.txt", "cat\n\ndog\n"), "classes.txt line 2: empty"),
    (("classes.txt", ""), "no class names"),
    (None, "no class names: put a data.yaml"),
])
def test_unusable_names_files_are_one_line_errors(tmp_path, names_file, words):
  with pytest.raises(objects.AnnotationError, match=words) as e:
    _read(tmp_path, {"a.txt": "0 0.5 0.5 0.2 0.2\n"}, names_file=names_file)
  assert "\n" not in str(e.value)


def test_bad_lines_are_problems_naming_the_file_and_line(tmp_path):
  annotations = _read(tmp_path, {"a.txt": "\n".join([
      "0 0.5 0.5 0.2 0.2",
      "2 0.5 0.5 0.2 0.2",
      "1.0 0.5 0.5 0.2 0.2",
      "-1 0.5 0.5 0.2 0.2",
      "0 0.5 0.5 0.2",
      "0 0.1 0.1 0.2 0.1 0.2 0.2 0.1 0.2",
      "0 0.5 half 0.2 0.2",
      "0 0.95 0.5 0.2 0.2",
      "0 0.5 0.5 0 0.2",
      "0 nan 0.5 0.2 0.2",
      "9" * 5000 + " 0.5 0.5 0.2 0.2",
  ])})
  assert _reasons(annotations) == [
      ("labels/a.txt line 2", "class id '2' is not one of the 2 classes of classes.txt (0..1)"),
      ("labels/a.txt line 3", "class id '1.0' is not one of the 2 classes of classes.txt (0..1)"),
      ("labels/a.txt line 4", "class id '-1' is not one of the 2 classes of classes.txt (0..1)"),
      ("labels/a.txt line 5", "4 values, not 5 (class x_center y_center width height)"),
      ("labels/a.txt line 6", "9 values: YOLO segmentation lines are not read (boxes only)"),
      ("labels/a.txt line 7", "'half' is not a number"),
      ("labels/a.txt line 8", "box outside the image: x 0.85..1.05 of width 1"),
      ("labels/a.txt line 9", "box of zero or negative width/height: x 0.5..0.5, y 0.4..0.6"),
      ("labels/a.txt line 10", "box with a non-finite coordinate: x nan..nan, y 0.4..0.6"),
      ("labels/a.txt line 11", f"class id '{'9' * 76}... is not one of the 2 classes of "
                               "classes.txt (0..1)")]
  assert len(annotations.entries["a.jpg"].objects) == 1


@pytest.mark.parametrize("policy, kept, fixed, problems", [
    ("error", 1, 0, 2), ("clip", 2, 1, 1), ("skip", 2, 2, 0)])
def test_the_bad_box_policy_applies(tmp_path, policy, kept, fixed, problems):
  annotations = _read(tmp_path, {"a.txt": "0 0.5 0.5 0.2 0.2\n0 0.95 0.5 0.2 0.2\n"
                                           "0 1.5 0.5 0.2 0.2\n"}, on_bad_box=policy)
  assert len(annotations.entries["a.jpg"].objects) == kept
  assert (len(annotations.fixed), len(annotations.problems)) == (fixed, problems)


def test_label_files_without_an_image_or_with_two_are_problems(tmp_path):
  annotations = _read(tmp_path, {"a.txt": "0 0.5 0.5 0.2 0.2\n", "zz.txt": "0 0.5 0.5 0.2 0.2\n",
                                 "c.txt": "0 0.5 0.5 0.2 0.2\n"},
                      images=["a.jpg", "a.png", "sub/c.jpg"])
  assert _reasons(annotations) == [
      ("labels/a.txt", "several images for it: a.jpg, a.png"),
      ("labels/c.txt", "no image c.* in /data/images"),
      ("labels/zz.txt", "no image zz.* in /data/images")]
  assert list(annotations.entries) == ["a.jpg", "a.png", "sub/c.jpg"]


def test_a_line_over_the_limit_is_refused(tmp_path):
  with pytest.raises(objects.AnnotationError, match="labels/a.txt line 2: longer than"):
    _read(tmp_path, {"a.txt": "0 0.5 0.5 0.2 0.2\n0" + " " * objects.MAX_LINE_BYTES + "\n"})


def test_a_file_that_is_not_a_names_file_is_refused(tmp_path):
  folder = _dataset(tmp_path, {"a.txt": "0 0.5 0.5 0.2 0.2\n"})
  with pytest.raises(objects.AnnotationError, match="not a YOLO names file"):
    yolo.read(str(folder / "a.txt"), IMAGES)


def test_a_data_yaml_over_the_limit_is_refused_before_it_is_read(tmp_path):
  folder = _dataset(tmp_path, {"a.txt": "0 0.5 0.5 0.2 0.2\n"}, names_file=None)
  with open(tmp_path / "data.yaml", "wb") as f:
    f.truncate(yolo.MAX_DOCUMENT_BYTES + 1)
  with pytest.raises(objects.AnnotationError, match="data.yaml: 16,777,217 bytes, over the"):
    yolo.read(str(folder), IMAGES)


def test_a_data_yaml_with_a_number_longer_than_python_converts_is_one_line(tmp_path):
  """`nc: 99…9` of 5,000 digits: Python refuses to convert it; a date that is none: yaml
  refuses it (each a raw ValueError before)."""
  import sys
  folder = _dataset(tmp_path, {"a.txt": "0 0.5 0.5 0.2 0.2\n"}, names_file=None)
  (tmp_path / "data.yaml").write_text("names: [cat]\nnc: " + "9" * 5000 + "\n")
  with pytest.raises(objects.AnnotationError, match="data.yaml: not valid YAML \\(a number "
                     f"of more than {sys.get_int_max_str_digits()} digits\\): fix the file"):
    yolo.read(str(folder), IMAGES)
  (tmp_path / "data.yaml").write_text("names: [cat]\ndate: 2020-13-45\n")  # (no such month)
  with pytest.raises(objects.AnnotationError, match="data.yaml: not valid YAML \\('month must "
                     "be in 1..12'\\): fix the file"):
    yolo.read(str(folder), IMAGES)


def test_a_names_file_over_the_limit_is_refused_before_it_is_read(tmp_path):
  names = b"".join(b"class%07d\n" % i for i in range(yolo.MAX_DOCUMENT_BYTES // 13 + 1))
  assert len(names) > yolo.MAX_DOCUMENT_BYTES
  folder = _dataset(tmp_path, {"a.txt": "0 0.5 0.5 0.2 0.2\n"}, names_file=None)
  (folder / "classes.txt").write_bytes(names)
  with pytest.raises(objects.AnnotationError, match=f"classes.txt: {len(names):,} bytes, over "
                                                    "the 16,777,216-byte limit of a class names"):
    yolo.read(str(folder), IMAGES)


def test_a_checkout_of_links_reads_as_its_files(tmp_path):
  """DVC and git-annex check out every file as a link into their store: the label files and
  classes.txt read as the files they link to; a linked folder holding no label file (a
  labeling tool's previews) is left alone."""
  store = tmp_path / "store"
  store.mkdir()
  (store / "a").write_text("1 0.5 0.5 1.0 1.0\n")
  (store / "names").write_text("cat\ndog\n")
  (store / "previews").mkdir()
  (store / "previews" / "a.jpg").write_bytes(b"")
  folder = _dataset(tmp_path, {}, names_file=None)
  (folder / "a.txt").symlink_to(store / "a")
  (folder / "classes.txt").symlink_to(store / "names")
  (folder / "previews").symlink_to(store / "previews")
  annotations = yolo.read(str(folder), IMAGES, images_root="/data/images")
  assert annotations.problems == () and annotations.class_names == ("cat", "dog")
  assert [o.label for o in annotations.entries["a.jpg"].objects] == [1]


@pytest.mark.parametrize("kind", ["fifo", "folder", "dangling link"])
def test_a_names_file_that_is_no_regular_file_is_named_not_passed_over(tmp_path, kind):
  """A classes.txt that is a FIFO, a folder or a dangling link is the names file that was
  meant: it is named as unreadable, never skipped for the obj.names beside it (whose
  names would label the boxes instead)."""
  folder = _dataset(tmp_path, {"a.txt": "0 0.5 0.5 0.2 0.2\n"},
                    names_file=("obj.names", "cat\ndog\n"))
  made = folder / "classes.txt"
  {"fifo": os.mkfifo, "folder": os.mkdir,
   "dangling link": lambda path: os.symlink(tmp_path / "gone.txt", path)}[kind](made)
  said = {"fifo": r"a named pipe \(FIFO\)", "folder": "a folder",
          "dangling link": r"cannot be opened \(a link to nothing: its target is missing\)"}
  for path in (folder, made):
    with pytest.raises(objects.AnnotationError, match=f"{made}: {said[kind]}") as e:
      yolo.read(str(path), IMAGES)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("data, words", [
    (b"names: [cat, d\xe9g]\n", r"data.yaml: not UTF-8 \(byte 15 of the file\): save the file "
                                r"as UTF-8"),
    (b"names: [cat, d\x01g]\n", r"data.yaml: character 15 is U\+0001, a control character "
                                r"YAML does not allow: remove it"),
])
def test_a_data_yaml_that_yaml_cannot_decode_names_the_byte_and_the_fix(tmp_path, data, words):
  folder = _dataset(tmp_path, {"a.txt": "0 0.5 0.5 0.2 0.2\n"}, names_file=None)
  (tmp_path / "data.yaml").write_bytes(data)   # (a Latin-1 export; a stray control byte)
  with pytest.raises(objects.AnnotationError, match=words):
    yolo.read(str(folder), IMAGES)


@pytest.mark.parametrize("policy", ["error", "clip", "skip"])
def test_a_box_in_pixels_is_a_problem_whatever_the_bad_box_policy(tmp_path, policy):
  # labelImg-like exports in pixels: clipped to 0..1 they would be whole-image boxes.
  annotations = _read(tmp_path, {"a.txt": "0 0.5 0.5 0.2 0.2\n1 320 240 64 48\n"},
                      on_bad_box=policy)
  assert _reasons(annotations) == [(
      "labels/a.txt line 2", "x_center y_center width height 320 240 64 48 look like pixels: "
      "YOLO gives them as fractions of the image's width and height (0..1); divide by the "
      "image's size")]
  assert len(annotations.entries["a.jpg"].objects) == 1 and not annotations.fixed


def test_a_label_file_with_cr_line_ends_is_a_problem_saying_so(tmp_path):
  annotations = _read(tmp_path, {"a.txt": "0 0.5 0.5 0.2 0.2\r1 0.3 0.3 0.1 0.1\r",
                                 "b.txt": "0 0.5 0.5 0.2 0.2\r\n1 0.3 0.3 0.1 0.1\r\n"})
  assert _reasons(annotations) == [(
      "labels/a.txt line 1", "a carriage return inside the line: the file ends its lines "
      "with CR alone (classic Mac OS); save it with LF line ends")]
  assert len(annotations.entries["b.jpg"].objects) == 2   # (CRLF: Windows line ends)
