"""COCO JSON: round trips of known boxes, and every kind of bad or hostile file."""

import copy
import json

import numpy as np
import pytest

from imagesets.annotations import coco
from imagesets.annotations import objects
from imagesets_testing import annotation_files

IMAGES = ["a.jpg", "sub/b.jpg", "c.jpg"]


@pytest.fixture(scope="module", params=[0, 1, 2, 3])
def known(request, tmp_path_factory):
  return annotation_files.write(tmp_path_factory.mktemp("known"), seed=request.param,
                                count=6 + 3 * request.param)


@pytest.mark.parametrize("on_bad_box", objects.ON_BAD_BOX)
def test_known_boxes_labels_and_flags_come_back(known, on_bad_box):
  images = annotation_files.list_images(known.images_dir)
  annotations = coco.read(str(known.coco), images, on_bad_box=on_bad_box)
  assert known.mismatches(annotations, "coco", tolerance=1e-9) == []
  assert annotations.flag_names == ("is_crowd",) and annotations.flag_classes == {}
  assert annotations.negatives == sum(not o for o in known.objects.values())


def _doc(**changes) -> dict:
  doc = {
      "images": [{"id": 1, "file_name": "a.jpg", "width": 333, "height": 500},
                 {"id": 2, "file_name": "sub/b.jpg", "width": 100.0, "height": 100}],
      "categories": [{"id": 7, "name": "dog"}, {"id": 3, "name": "cat"}],
      "annotations": [{"id": 10, "image_id": 1, "category_id": 7, "bbox": [33.3, 50, 33.3, 50],
                       "area": 1665.0, "iscrowd": 0, "segmentation": [[1, 2, 3, 4, 5, 6]]},
                      {"id": 11, "image_id": 1, "category_id": 3, "bbox": [0, 0, 333, 500],
                       "iscrowd": 1, "segmentation": {"counts": "0TcR5", "size": [500, 333]}}],
  }
  doc.update(changes)
  return doc


def _read(tmp_path, doc, images=IMAGES, **options):
  path = tmp_path / "instances.json"
  if isinstance(doc, bytes):
    path.write_bytes(doc)
  else:
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
  return coco.read(str(path), images, images_root="/data/images", **options)


def _reasons(annotations) -> list[tuple[str, str]]:
  return [(p.where, p.reason) for p in annotations.problems]


def test_categories_sorted_by_id_boxes_flags_negatives_and_unlisted(tmp_path):
  annotations = _read(tmp_path, _doc())
  assert annotations.problems == ()
  assert annotations.class_names == ("cat", "dog")   # ids 3, 7
  assert annotations.source.endswith("instances.json") and annotations.format == "coco"
  a = annotations.entries["a.jpg"]
  assert a.size == (500, 333)
  assert [(o.label, o.flags) for o in a.objects] == [(1, (0,)), (0, (1,))]
  assert a.objects[0].bbox == pytest.approx((0.1, 0.1, 0.2, 0.2), abs=1e-12)
  assert a.objects[1].bbox == (0.0, 0.0, 1.0, 1.0)
  assert annotations.entries["sub/b.jpg"] == objects.Entry("sub/b.jpg", (100, 100), ())
  assert annotations.negatives == 1 and annotations.unlisted == ("c.jpg",)


def test_a_missing_iscrowd_is_zero(tmp_path):
  doc = _doc()
  del doc["annotations"][1]["iscrowd"]
  assert _read(tmp_path, doc).entries["a.jpg"].objects[1].flags == (0,)


@pytest.mark.parametrize("name, words", [
    ("/home/me/a.jpg", "absolute"), ("C:\\photos\\a.jpg", "Windows"), ("../a.jpg", "'..'"),
    ("", "empty"), ("a\x00.jpg", "NUL"), (["a.jpg"], "not a string")])
def test_unsafe_file_names_are_problems_naming_the_image(tmp_path, name, words):
  doc = _doc()
  doc["images"][0]["file_name"] = name
  annotations = _read(tmp_path, doc)
  ((where, reason),) = _reasons(annotations)
  assert where == "instances.json: image id 1" and words in reason
  assert "a.jpg" not in annotations.entries and "a.jpg" in annotations.unlisted


def test_names_ids_and_references_that_collide_or_dangle(tmp_path):
  doc = _doc()
  doc["images"] += [{"id": 2, "file_name": "c.jpg", "width": 10, "height": 10},
                    {"id": 3, "file_name": "sub/b.jpg", "width": 10, "height": 10},
                    {"id": 4, "file_name": "gone.jpg", "width": 10, "height": 10}]
  doc["categories"] += [{"id": 3, "name": "bird"}, {"id": 9, "name": "dog"}]
  doc["annotations"] += [
      {"id": 10, "image_id": 2, "category_id": 3, "bbox": [1, 1, 2, 2]},
      {"id": 12, "image_id": 99, "category_id": 3, "bbox": [1, 1, 2, 2]},
      {"id": 13, "image_id": 2, "category_id": 5, "bbox": [1, 1, 2, 2]},
      {"id": 14, "image_id": 2, "category_id": 9, "bbox": [1, 1, 2, 2]}]
  for annotation in doc["annotations"]:   # the file has segmentation: every object needs one
    annotation.setdefault("segmentation", [[1, 1, 2, 1, 2, 2]])
  annotations = _read(tmp_path, doc)
  assert _reasons(annotations) == [
      ("instances.json: category id 3", "category id 3 given twice ('cat' and 'bird')"),
      ("instances.json: category id 9",
       "class name 'dog' is also category id 7's: class names must be unique"),
      ("instances.json: image id 2", "image id 2 given twice"),
      ("instances.json: image id 3 (sub/b.jpg)",
       "a second entry for sub/b.jpg (the first: instances.json: image id 2 (sub/b.jpg))"),
      ("instances.json: image id 4 (gone.jpg)", "gone.jpg: no such image in /data/images"),
      ("instances.json: annotation id 10", "annotation id 10 given twice"),
      ("instances.json: annotation id 12", "image_id 99 is not an image of the file"),
      ("instances.json: annotation id 13 (image 2, sub/b.jpg)",
       "category_id 5 is not a category of the file")]
  assert annotations.class_names == ("cat", "dog")
  assert list(annotations.entries) == ["a.jpg", "sub/b.jpg"]
  assert annotations.unlisted == ("c.jpg",)


@pytest.mark.parametrize("change, words", [
    ({"bbox": "10 20 30 40"}, "bbox '10 20 30 40' is not a list of 4 numbers"),
    ({"bbox": [10, 20, 30]}, "bbox [10, 20, 30] is not a list of 4 numbers"),
    ({"bbox": [10, "20", 30, 40]}, "is not a list of 4 numbers"),
    ({"bbox": [10, True, 30, 40]}, "is not a list of 4 numbers"),
    ({"bbox": None}, "bbox None is not a list"),
    ({"category_id": "7"}, "category_id '7' is not a category"),
    ({"iscrowd": 2}, "iscrowd 2 is not 0 or 1"),
    ({"area": -1}, "area -1 is not a number >= 0"),
    ({"area": float("nan")}, "area nan is not a number >= 0"),
    ({"area": "big"}, "area 'big' is not a number"),
    ({"area": 10**400}, "area 1000000000"),
    ({"bbox": [10**400, 0, 1, 1]}, "box with a non-finite coordinate: x inf..inf, y 0..1"),
])
def test_wrong_types_are_problems_naming_the_annotation(tmp_path, change, words):
  doc = _doc()
  doc["annotations"][0].update(change)
  ((where, reason),) = _reasons(_read(tmp_path, doc))
  assert where == "instances.json: annotation id 10 (image 1, a.jpg)" and words in reason


@pytest.mark.parametrize("part, item, words", [
    ("images", {"id": "1", "file_name": "c.jpg", "width": 1, "height": 1}, "images[2]"),
    ("images", {"id": 5, "file_name": "c.jpg", "width": 0, "height": 10}, "image id 5"),
    ("images", {"id": 5, "file_name": "c.jpg", "width": 10.5, "height": 10}, "image id 5"),
    ("images", {"id": 5, "file_name": "c.jpg", "width": 10**400, "height": 10}, "image id 5"),
    ("images", ["not", "an", "object"], "images[2]"),
    ("annotations", {"image_id": 1, "category_id": 7, "bbox": [1, 1, 1, 1]}, "annotations[2]"),
    ("annotations", 17, "annotations[2]"),
    ("categories", {"id": 4.0, "name": "bird"}, "categories[2]"),
    ("categories", {"id": 4, "name": ""}, "category id 4"),
    ("categories", {"id": 4, "name": None}, "category id 4"),
])
def test_records_of_the_wrong_shape_are_problems_not_crashes(tmp_path, part, item, words):
  doc = _doc()
  doc[part].append(item)
  ((where, _),) = _reasons(_read(tmp_path, doc))
  assert where == f"instances.json: {words}"


def test_every_bad_thing_is_listed_at_once_and_no_annotation_is_dropped_silently(tmp_path):
  doc = _doc()
  doc["images"][0]["file_name"] = "/abs.jpg"      # its 2 annotations are not read
  doc["images"].append({"id": 3, "file_name": "c.jpg", "width": 100, "height": 100})
  boxes = [[10, 10, 20, 20], [90, 90, 20, 20], [200, 0, 5, 5], [1, 1, 0, 5],
           [float("nan"), 1, 2, 2], "x", [0, 0, 100, 100]]
  doc["annotations"] += [{"id": 20 + k, "image_id": 3, "category_id": 3, "bbox": box}
                         for k, box in enumerate(boxes)]
  for annotation in doc["annotations"]:   # the file has segmentation: every object needs one
    annotation.setdefault("segmentation", [[1, 1, 2, 1, 2, 2]])
  for policy, kept, fixed, problems in (("error", 2, 0, 6), ("clip", 3, 1, 5),
                                        ("skip", 3, 4, 2)):
    annotations = _read(tmp_path, doc, on_bad_box=policy)
    assert len(annotations.entries["c.jpg"].objects) == kept
    assert len(annotations.fixed) == fixed and len(annotations.problems) == problems
    # Every annotation of c.jpg is kept, left out or a problem (a.jpg's one covers its own).
    left_out = [f for f in annotations.fixed if f.reason.startswith("left out: ")]
    of_c = [p for p in annotations.problems if p.where.endswith("c.jpg)")]
    assert kept + len(left_out) + len(of_c) == len(boxes)


def test_clip_records_what_it_changed(tmp_path):
  doc = _doc()
  doc["annotations"][0]["bbox"] = [300, 450, 100, 100]
  annotations = _read(tmp_path, doc, on_bad_box="clip")
  (fixed,) = annotations.fixed
  assert fixed.where == "instances.json: annotation id 10 (image 1, a.jpg)"
  assert fixed.reason == ("box clipped to the image: x 300..400 to 300..333 of width 333, "
                          "y 450..550 to 450..500 of height 500")
  assert annotations.entries["a.jpg"].objects[0].bbox == pytest.approx(
      (0.9, 300 / 333, 1.0, 1.0), abs=1e-12)


@pytest.mark.parametrize("text, where", [
    ('{"images": [\n  {"id": 1,}\n]}', "line 2 column 12"),
    ('{"images": []', "line 1 column 14"),
    ("", "line 1 column 1"),
])
def test_malformed_json_names_the_line_and_column(tmp_path, text, where):
  with pytest.raises(objects.AnnotationError, match=f"instances.json {where}: not valid JSON") as e:
    _read(tmp_path, text)
  assert "\n" not in str(e.value)


@pytest.mark.parametrize("text, words", [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"images": [{"id": ' + "9" * 5000 + "}]}", "not readable as JSON"),
    (b'\xc3\x28{"images": []}', "not readable as JSON"),
    ("[]", "top level is not a JSON object"),
    ('{"images": [], "categories": []}', "no list 'annotations'"),
    ('{"images": {}, "annotations": [], "categories": []}', "no list 'images'"),
    ('{"images": [], "annotations": [], "categories": []}', "no class names"),
])
def test_files_that_are_not_coco_at_all_are_one_line_errors(tmp_path, text, words):
  with pytest.raises(objects.AnnotationError, match=words) as e:
    _read(tmp_path, text)
  assert "\n" not in str(e.value)


def test_a_key_given_twice_is_refused_not_read_as_its_last_value(tmp_path):
  # {"bbox": [...], "bbox": [...]}: json keeps the last; which one the tool meant is unknown.
  text = json.dumps(_doc()).replace('"bbox": [0, 0, 333, 500]',
                                    '"bbox": [0, 0, 333, 500], "bbox": [1, 1, 2, 2]')
  with pytest.raises(objects.AnnotationError,
                     match=r"instances.json: the key 'bbox' twice in one object, "
                           r"\{'id': 11, 'image_id': 1, .*: keep one"):
    _read(tmp_path, text)


def test_an_image_of_a_format_builds_do_not_read_is_missing_with_the_formats_they_read(tmp_path):
  doc = _doc()
  doc["images"][1]["file_name"] = "sub/b.webp"
  (where, reason), = _reasons(_read(tmp_path, doc, images=IMAGES))
  assert where == "instances.json: image id 2 (sub/b.webp)"
  assert reason == ("sub/b.webp: no such image in /data/images that a build reads (it reads "
                    ".jpg, .jpeg, .jpe, .png, .bmp, .gif files; convert a .webp image to JPEG "
                    "or PNG and name the new file)")


def test_a_file_over_the_limit_is_refused_before_it_is_read(tmp_path):
  path = tmp_path / "instances.json"
  with open(path, "wb") as f:
    f.truncate(2 << 30)   # sparse: 2 GiB that take no disk
  with pytest.raises(objects.AnnotationError,
                     match=r"2,147,483,648 bytes, over the 1,073,741,824-byte limit"):
    coco.read(str(path), IMAGES)


ODD_VALUES = [None, True, 0, -1, 2**70, 10**400, 1.5, float("nan"), float("inf"), "", "a.jpg",
              "../x", "\x00", [], [1, 2, 3, 4], [[]], {}, {"a": 1}, [0, 0, 1e308, 1e308]]


@pytest.mark.parametrize("seed", range(4))
def test_values_of_any_type_anywhere_never_crash_the_reader(tmp_path, seed):
  rng = np.random.default_rng(seed)
  def odd():
    return copy.deepcopy(ODD_VALUES[int(rng.integers(len(ODD_VALUES)))])
  for _ in range(50):
    doc = _doc()
    for _ in range(int(rng.integers(1, 4))):
      part = ("images", "categories", "annotations")[int(rng.integers(3))]
      item = doc[part][int(rng.integers(len(doc[part])))]
      if rng.uniform() < 0.2 or not isinstance(item, dict):
        doc[part][doc[part].index(item)] = odd()
      else:
        item[sorted(item)[int(rng.integers(len(item)))]] = odd()
    for policy in objects.ON_BAD_BOX:
      try:
        annotations = _read(tmp_path, doc, on_bad_box=policy)
      except objects.AnnotationError:   # (no usable category left)
        continue
      for entry in annotations.entries.values():
        for o in entry.objects:
          assert all(type(v) is float and 0 <= v <= 1 for v in o.bbox)
          assert o.bbox[0] < o.bbox[2] and o.bbox[1] < o.bbox[3]
          assert 0 <= o.label < len(annotations.class_names)
