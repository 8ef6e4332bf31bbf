"""The model and the checks every format shares: names, the bad-box policy, line reads."""

import dataclasses
import os
import pickle
import signal

import pytest

from imagesets.annotations import objects


@pytest.mark.parametrize("name", ["a.jpg", "sub/dir/IMG 0001.JPG", "été/ü.png", "a..b.jpg",
                                  ".hidden.jpg", "C.jpg"])
def test_relative_posix_names_inside_the_folder_are_accepted(name):
  assert objects.name_problem(name) is None


@pytest.mark.parametrize("name, words", [
    ("", "empty"),
    ("/etc/passwd", "absolute"),
    ("/images/a.jpg", "absolute"),
    ("C:/photos/a.jpg", "Windows"),
    ("c:a.jpg", "Windows"),
    ("photos\\a.jpg", "Windows"),
    ("../a.jpg", "'..'"),
    ("sub/../../a.jpg", "'..'"),
    ("sub/..", "'..'"),
    ("a\x00.jpg", "NUL"),
    ("a\n.jpg", "control"),
    ("./a.jpg", "'a.jpg'"),
    ("sub//a.jpg", "'sub/a.jpg'"),
    ("sub/", "empty or '.'"),
    (7, "not a string"),
    (None, "not a string"),
])
def test_unsafe_or_unclear_names_are_refused_with_a_reason(name, words):
  reason = objects.name_problem(name)
  assert reason and words in reason and "\n" not in reason


@pytest.mark.parametrize("name", ["", " cat", "cat\n", "a\tb", 3, None])
def test_class_names_must_survive_tfds_names_files(name):
  assert objects.class_name_problem(name)


def test_shown_is_short_and_never_writes_out_a_huge_value():
  class Leaf:
    writes = 0

    def __repr__(self):
      Leaf.writes += 1
      return "x" * 100

  nested = [Leaf()]
  for _ in range(6):   # shared sublists, as YAML aliases make: a million leaves, 10^8 chars
    nested = [nested] * 10
  for value in (nested, [Leaf()] * 10**6, {"names": [Leaf()] * 10**6}):
    Leaf.writes = 0
    text = objects.shown(value)
    assert len(text) == 80 and text.endswith("...")
    assert Leaf.writes <= 6, "the whole value was written out"
  assert objects.shown({"b": 1, "a": "x" * 200}).startswith("{'b': 1, 'a': 'xxx")
  assert objects.shown("x" * 200) == "'" + "x" * 76 + "..."


def test_annotation_errors_are_one_line():
  assert "\n" not in str(objects.AnnotationError("a.xml line 3:\nbad\n"))
  assert isinstance(objects.AnnotationError("x"), ValueError)


def _reader(on_bad_box="error", images=("a.jpg",)):
  return objects.Reader("src", images, on_bad_box, images_root="/data/images")


def test_a_box_inside_or_exactly_at_the_edge_is_kept_and_normalised():
  reader = _reader()
  assert reader.box("w", 0, 0, 333, 500, width=333, height=500) == (0.0, 0.0, 1.0, 1.0)
  assert reader.box("w", 33.3, 50, 66.6, 100, width=333, height=500) == pytest.approx(
      (0.1, 0.1, 0.2, 0.2), abs=1e-12)
  # Round-off past the edge (within 1e-6 of the side) is clipped without a word.
  assert reader.box("w", -1e-5, 0, 333 * (1 + 5e-7), 500, width=333, height=500) == (
      0.0, 0.0, 1.0, 1.0)
  bbox = reader.box("w", 0.1, 0.2, 0.3, 0.4, width=1.0, height=1.0)
  assert all(type(v) is float for v in bbox)
  assert reader.problems == [] and reader.fixed == []


# (corners x0, y0, x1, y1 in a 333 x 500 image, what each policy does with it):
# "keep" with the clipped box, "problem", or "left out" (recorded in fixed).
_CLIPPED = (0.0, 310 / 333, 20 / 500, 1.0)
BAD_BOXES = {
    "partly outside": ((310, 0, 400, 20), {"error": "problem", "clip": _CLIPPED,
                                           "skip": _CLIPPED}),
    "wholly outside": ((340, 0, 400, 20), {"error": "problem", "clip": "problem",
                                           "skip": "left out"}),
    "touching from outside": ((333, 0, 400, 20), {"error": "problem", "clip": "problem",
                                                  "skip": "left out"}),
    "zero width": ((10, 0, 10, 20), {"error": "problem", "clip": "problem", "skip": "left out"}),
    "negative height": ((10, 30, 20, 20), {"error": "problem", "clip": "problem",
                                           "skip": "left out"}),
    "NaN": ((float("nan"), 0, 10, 20), {"error": "problem", "clip": "problem",
                                        "skip": "left out"}),
    "infinite": ((0, 0, float("inf"), 20), {"error": "problem", "clip": "problem",
                                            "skip": "left out"}),
}


@pytest.mark.parametrize("policy", objects.ON_BAD_BOX)
@pytest.mark.parametrize("case", sorted(BAD_BOXES))
def test_the_bad_box_policy(case, policy):
  corners, outcome = BAD_BOXES[case]
  reader = _reader(policy)
  bbox = reader.box("instances.json: annotation id 17", *corners, width=333, height=500)
  expected = outcome[policy]
  if isinstance(expected, tuple):
    assert bbox == pytest.approx(expected, abs=1e-12)
    assert reader.problems == []
    (fixed,) = reader.fixed
    assert fixed.where == "instances.json: annotation id 17"
    assert fixed.reason == "box clipped to the image: x 310..400 to 310..333 of width 333"
  else:
    assert bbox is None
    found = reader.problems if expected == "problem" else reader.fixed
    other = reader.fixed if expected == "problem" else reader.problems
    assert len(found) == 1 and other == []
    assert found[0].where == "instances.json: annotation id 17"
    assert found[0].reason.startswith("left out: " if expected == "left out" else "box")


def test_bad_box_reasons_say_what_is_wrong():
  reader = _reader()
  reader.box("a", 310, 0, 400, 20, width=333, height=500)
  reader.box("b", 0, -5, 10, 20, width=333, height=500)
  reader.box("c", 10, 0, 10, 20, width=333, height=500)
  reader.box("d", 0, 0, float("nan"), 20, width=333, height=500)
  assert [p.reason for p in reader.problems] == [
      "box outside the image: x 310..400 of width 333",
      "box outside the image: y -5..20 of height 500",
      "box of zero or negative width/height: x 10..10, y 0..20",
      "box with a non-finite coordinate: x 0..nan, y 0..20"]


def test_an_unknown_policy_is_refused():
  with pytest.raises(ValueError, match="on_bad_box='drop'"):
    _reader("drop")


def test_claims_one_entry_per_existing_image():
  reader = _reader(images=("a.jpg", "b.jpg"))
  assert reader.claim("f line 2", "a.jpg")
  assert not reader.claim("f line 5", "a.jpg")
  assert not reader.claim("f line 6", "z.jpg")
  assert reader.problems == [
      objects.Problem("f line 5", "a second entry for a.jpg (the first: f line 2)"),
      objects.Problem("f line 6", "z.jpg: no such image in /data/images")]


def test_images_nothing_claims_are_negatives_or_unlisted_and_no_class_names_is_an_error():
  for unmentioned in ("negative", "unlisted"):
    reader = _reader(images=("b.jpg", "a.jpg", "c.jpg"))
    reader.claim("x", "c.jpg")
    result = reader.annotations(task="detection", format="coco", class_names=["cat"],
                                entries=[objects.Entry("c.jpg")], unmentioned=unmentioned)
    if unmentioned == "negative":
      assert list(result.entries) == ["a.jpg", "b.jpg", "c.jpg"] and result.unlisted == ()
      assert result.negatives == 3
    else:
      assert list(result.entries) == ["c.jpg"] and result.unlisted == ("a.jpg", "b.jpg")
  with pytest.raises(objects.AnnotationError, match="no class names"):
    _reader().annotations(task="detection", format="coco", class_names=[], entries=[],
                          unmentioned="unlisted")


def test_the_model_is_frozen_plain_data_that_pickles():
  entry = objects.Entry("sub/a.jpg", (500, 333), (objects.Object((0.1, 0.2, 0.3, 0.4), 1, (0,)),))
  annotations = objects.Annotations(
      task="detection", format="coco", source="x.json", class_names=("a", "b"),
      entries={"sub/a.jpg": entry}, flag_names=("is_crowd",),
      problems=(objects.Problem("w", "r"),))
  assert pickle.loads(pickle.dumps(annotations)) == annotations
  assert annotations.flag_classes == {} and annotations.negatives == 0
  with pytest.raises(dataclasses.FrozenInstanceError):
    entry.file_name = "b.jpg"
  labelled = dataclasses.replace(annotations, task="multi_label", entries={
      "a.jpg": objects.Entry("a.jpg", labels=(0, 1)), "b.jpg": objects.Entry("b.jpg")})
  assert labelled.negatives == 1


def test_lines_are_streamed_with_their_numbers(tmp_path):
  path = tmp_path / "a.txt"
  path.write_bytes(b"\xef\xbb\xbffirst\r\nsecond\n\n" + b"x" * objects.MAX_LINE_BYTES + b"\n")
  found = list(objects.lines(str(path)))
  assert [number for number, _ in found] == [1, 2, 3, 4]
  assert found[0][1] == "first\r\n" and found[2][1] == "\n"


def test_a_line_over_the_limit_or_not_utf8_is_refused_with_its_number(tmp_path):
  path = tmp_path / "a.txt"
  path.write_bytes(b"ok\n" + b"x" * (objects.MAX_LINE_BYTES + 1) + b"\nnever read\n")
  with pytest.raises(objects.AnnotationError, match=r"a.txt line 2: longer than 1,048,576 bytes"):
    list(objects.lines(str(path)))
  path.write_bytes(b"ok\nok\ncaf\xe9\n")
  with pytest.raises(objects.AnnotationError, match=r"a.txt line 3: not UTF-8 \(byte 4"):
    list(objects.lines(str(path)))


def test_files_under_leaves_out_hidden_files_and_folders(tmp_path):
  for name in ("a.xml", "sub/b.XML", ".c.xml", "__MACOSX/._a.xml", ".git/d.xml", "e.txt"):
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text("")
  assert objects.files_under(str(tmp_path), ".xml").files == ["a.xml", "sub/b.XML"]


def test_files_under_never_follows_a_link_to_a_folder_and_names_it(tmp_path):
  (tmp_path / "outside" / "val").mkdir(parents=True)
  (tmp_path / "outside" / "val" / "b.xml").write_text("")
  (tmp_path / "ann" / "train").mkdir(parents=True)
  (tmp_path / "ann" / "train" / "a.xml").write_text("")
  (tmp_path / "ann" / "val").symlink_to(tmp_path / "outside" / "val")
  (tmp_path / "outside" / "previews").mkdir()   # (a linked folder of other things: left be)
  (tmp_path / "outside" / "previews" / "a.jpg").write_bytes(b"")
  (tmp_path / "ann" / "previews").symlink_to(tmp_path / "outside" / "previews")
  listing = objects.files_under(str(tmp_path / "ann"), ".xml")
  assert listing.files == ["train/a.xml"]
  assert [(p.where, p.reason.split(",")[0]) for p in listing.refused] == [
      ("ann/val", "a link to a folder holding annotation files")]


def test_a_folder_that_cannot_be_listed_is_an_error_naming_it(tmp_path, monkeypatch):
  for name in ("train/a.xml", "val/b.xml"):
    (tmp_path / "ann" / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "ann" / name).write_text("")
  scandir = os.scandir

  def refusing(path="."):   # (root lists any folder: the refusal is simulated)
    if os.path.basename(path) == "val":
      raise PermissionError(13, "Permission denied", path)
    return scandir(path)

  with monkeypatch.context() as patched, pytest.raises(
      objects.AnnotationError, match=r"ann/val: cannot be listed \(Permission denied\): its "
                                     "annotation files would be left unread"):
    patched.setattr(os, "scandir", refusing)
    objects.files_under(str(tmp_path / "ann"), ".xml")


def test_files_under_reads_only_regular_files_and_names_the_others(tmp_path):
  (tmp_path / "outside.xml").write_text("<annotation/>")
  folder = tmp_path / "ann"
  folder.mkdir()
  (folder / "a.xml").write_text("<annotation/>")
  (folder / "zero.xml").symlink_to("/dev/zero")
  (folder / "broken.xml").symlink_to(folder / "gone.xml")
  (folder / "out.xml").symlink_to(tmp_path / "outside.xml")
  os.mkfifo(folder / "pipe.xml")
  listing = objects.files_under(str(folder), ".xml")
  assert listing.files == ["a.xml", "out.xml"]   # (a link to a file: read, bounded)
  assert [(p.where, p.reason.split(",")[0]) for p in listing.refused] == [
      ("ann/broken.xml", "a link to nothing"), ("ann/pipe.xml", "a named pipe (FIFO)"),
      ("ann/zero.xml", "a link to a device")]
  assert all("never opened" in p.reason for p in listing.refused)
  assert listing.named == ["a.xml", "broken.xml", "out.xml", "pipe.xml", "zero.xml"]


@pytest.fixture
def no_hang():
  """Fails a read that would wait forever (on code that opens a FIFO) instead of hanging."""
  def hung(*_):
    raise TimeoutError("the read waited on a FIFO")
  previous = signal.signal(signal.SIGALRM, hung)
  signal.alarm(30)
  yield
  signal.alarm(0)
  signal.signal(signal.SIGALRM, previous)


def test_lines_never_wait_on_a_fifo_nor_read_a_device(tmp_path, no_hang):
  os.mkfifo(tmp_path / "classes.txt")
  with pytest.raises(objects.AnnotationError, match=r"classes.txt: a named pipe \(FIFO\), not "
                                                    "a regular file"):
    list(objects.lines(str(tmp_path / "classes.txt")))
  (tmp_path / "labels.csv").symlink_to("/dev/zero")
  with pytest.raises(objects.AnnotationError, match="labels.csv: a device, not a regular file"):
    list(objects.lines(str(tmp_path / "labels.csv")))


def test_reads_stop_at_the_limit_even_when_the_size_is_understated():
  # /proc files say 0 bytes and hold more: the read, not the size, bounds what is read.
  with pytest.raises(objects.AnnotationError, match="status: grew past the 10-byte limit"):
    objects.read_bounded("/proc/self/status", 10, "names file")
  with pytest.raises(objects.AnnotationError, match="status: grew past the 10-byte limit"):
    list(objects.lines("/proc/self/status", 10, "names file"))


def test_images_by_stem_finds_the_one_image_of_a_label_file():
  reader = _reader(images=("a.jpg", "a.png", "sub/b.jpeg"))
  by_stem = objects.images_by_stem(reader.images)
  assert objects.image_of_stem(reader, "labels/sub/b.txt", "sub/b", by_stem) == "sub/b.jpeg"
  assert objects.image_of_stem(reader, "labels/a.txt", "a", by_stem) is None
  assert objects.image_of_stem(reader, "labels/c.txt", "c", by_stem) is None
  assert [p.reason for p in reader.problems] == [
      "several images for it: a.jpg, a.png", "no image c.* in /data/images"]


def test_a_label_files_image_in_a_format_builds_do_not_read_is_named_with_the_fix():
  # `unread`: the images folder's other files, as the build lists them (no folder is read
  # here: a folder per missing image would cost a listing each).
  reader = objects.Reader("src", ["b.jpg"], images_root="/data/images",
                          unread=["sub/a.webp", "sub/a.txt.bak", "b.heic", "c.txt", "d.xmp",
                                  "e.", "f.we\x1bbp"])
  by_stem = objects.images_by_stem(reader.images)
  for stem in ("sub/a", "c", "d", "e", "f"):
    assert objects.image_of_stem(reader, f"labels/{stem}.txt", stem, by_stem) is None
  assert objects.image_of_stem(reader, "labels/b.txt", "b", by_stem) == "b.jpg"
  suffixes = ", ".join(objects.IMAGE_SUFFIXES)
  assert [p.reason for p in reader.problems] == [
      f"no image sub/a.* in /data/images that a build reads (it reads {suffixes} files; "
      "'sub/a.webp' is not one: convert it to JPEG or PNG)",
      "no image c.* in /data/images",   # annotations, sidecars, no suffix: not pictures
      "no image d.* in /data/images", "no image e.* in /data/images",
      f"no image f.* in /data/images that a build reads (it reads {suffixes} files; "
      "'f.we\\x1bbp' is not one: convert it to JPEG or PNG)"]


def test_reserved_descriptions_are_not_class_names():
  for name in ("(no objects)", "(no labels)"):
    assert "is what reports call an image without any" in objects.class_name_problem(name)
