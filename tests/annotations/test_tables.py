"""CSV and JSONL image labels: round trips, headers, bad rows and lines."""

import json

import pytest

from imagesets.annotations import objects
from imagesets.annotations import tables
from imagesets_testing import annotation_files

IMAGES = ["a.jpg", "b.jpg", "sub/c.jpg", "d.jpg"]


@pytest.fixture(scope="module", params=[0, 1, 2, 3])
def known(request, tmp_path_factory):
  return annotation_files.write(tmp_path_factory.mktemp("known"), seed=request.param,
                                count=6 + 3 * request.param)


@pytest.mark.parametrize("format, multi", [("csv", False), ("csv", True), ("jsonl", False),
                                           ("jsonl", True)])
def test_known_labels_come_back(known, format, multi):
  path = getattr(known, f"{format}_{'multi' if multi else 'single'}")
  read = tables.read_csv if format == "csv" else tables.read_jsonl
  annotations = read(str(path), annotation_files.list_images(known.images_dir))
  assert known.mismatches(annotations, format, multi=multi) == []
  assert annotations.negatives == (sum(not o for o in known.objects.values()) if multi else 0)


def _csv(tmp_path, text: str | bytes, images=IMAGES, **options):
  path = tmp_path / "labels.csv"
  path.write_bytes(text if isinstance(text, bytes) else text.encode())
  return tables.read_csv(str(path), images, images_root="/data/images", **options)


def _jsonl(tmp_path, lines: list, images=IMAGES):
  path = tmp_path / "labels.jsonl"
  path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n"
                          for line in lines))
  return tables.read_jsonl(str(path), images, images_root="/data/images")


def _reasons(annotations) -> list[tuple[str, str]]:
  return [(p.where, p.reason) for p in annotations.problems]


def test_classification_csv_sorted_class_ids_and_unlisted_images(tmp_path):
  annotations = _csv(tmp_path, "\ufefffile_name , label\r\nb.jpg,dog\r\n a.jpg , cat \r\n"
                               "\r\nsub/c.jpg,dog\r\n")
  assert annotations.task == "classification" and annotations.class_names == ("cat", "dog")
  assert {name: e.labels for name, e in annotations.entries.items()} == {
      "a.jpg": (0,), "b.jpg": (1,), "sub/c.jpg": (1,)}
  assert annotations.unlisted == ("d.jpg",) and annotations.problems == ()
  assert annotations.format == "csv" and annotations.negatives == 0


@pytest.mark.parametrize("column", tables.NAME_KEYS)
def test_multi_label_csv_with_any_image_column_and_extra_columns(tmp_path, column):
  annotations = _csv(tmp_path, f'{column},labels,notes\n"a.jpg","dog; cat;dog",x\n'
                               'b.jpg,,"no labels, a negative"\nsub/c.jpg,bird,\n')
  assert annotations.task == "multi_label"
  assert annotations.class_names == ("bird", "cat", "dog")
  assert {name: e.labels for name, e in annotations.entries.items()} == {
      "a.jpg": (1, 2), "b.jpg": (), "sub/c.jpg": (0,)}
  assert annotations.negatives == 1 and annotations.problems == ()


@pytest.mark.parametrize("text, words", [
    ("", "empty: a CSV of labels starts with a header row"),
    ("a.jpg,cat\n", "line 1: header"),
    ("file_name,label,labels\n", "line 1: header"),
    ("file_name,image,label\n", "line 1: header"),
    ("file_name,label,label\n", "line 1: header"),
    ("file_name,category\n", "line 1: header"),
    ("file_name,labels\na.jpg,\n", "no class names"),
    ('file_name,label\n"a.jpg,cat\nb.jpg,dog\n', r"line 3: not readable as CSV \(unexpected end"),
    ('file_name,label\n"a"b.jpg,cat\n', "line 2: not readable as CSV"),
    (b"file_name,label\na.jpg,caf\xe9\n", "line 2: not UTF-8"),
])
def test_unreadable_csv_files_are_one_line_errors(tmp_path, text, words):
  with pytest.raises(objects.AnnotationError, match=words) as e:
    _csv(tmp_path, text)
  assert "\n" not in str(e.value)


def test_bad_rows_are_problems_naming_their_line_all_at_once(tmp_path):
  annotations = _csv(tmp_path, "\n".join([
      "file_name,label",
      "a.jpg,cat",
      "b.jpg",
      "b.jpg,cat,extra",
      "a.jpg,dog",
      "sub/c.jpg,",
      "../etc/passwd,cat",
      "C:\\x.jpg,cat",
      "gone.jpg,cat",
      'd.jpg," "',
      "", ""]))
  assert _reasons(annotations) == [
      ("labels.csv line 3", "1 fields, the header has 2"),
      ("labels.csv line 4", "3 fields, the header has 2"),
      ("labels.csv line 5", "a second entry for a.jpg (the first: labels.csv line 2)"),
      ("labels.csv line 6", "no label: classification needs exactly one per image"),
      ("labels.csv line 7",
       "file name '../etc/passwd' has a '..' component: it must stay inside the images folder"),
      ("labels.csv line 8", "file name 'C:\\\\x.jpg' is a Windows path: write it relative to "
                            "the images folder with '/'"),
      ("labels.csv line 9", "gone.jpg: no such image in /data/images"),
      ("labels.csv line 10", "no label: classification needs exactly one per image")]
  assert list(annotations.entries) == ["a.jpg"]
  # Images with a row, even a bad one, are not unlisted; b.jpg's rows name no image.
  assert annotations.unlisted == ("b.jpg",)


def test_a_row_with_a_cell_over_several_lines_is_named_by_its_lines(tmp_path):
  # Labeling tools export free-text columns (comments, notes) with line breaks quoted.
  annotations = _csv(tmp_path, "\n".join([
      "file_name,label,notes",
      'a.jpg,cat,"seen twice',
      'by two people"',
      "gone.jpg,dog,",
      "a.jpg,dog,",
      'b.jpg,,"no label',
      "",
      'yet"',
      "d.jpg,dog,", ""]))
  assert _reasons(annotations) == [
      ("labels.csv line 4", "gone.jpg: no such image in /data/images"),
      ("labels.csv line 5", "a second entry for a.jpg (the first: labels.csv lines 2-3)"),
      ("labels.csv lines 6-8", "no label: classification needs exactly one per image")]
  assert list(annotations.entries) == ["a.jpg", "d.jpg"]


def test_a_multi_label_file_with_one_row_per_label_says_so(tmp_path):
  annotations = _csv(tmp_path, "file_name,labels\na.jpg,cat\na.jpg,dog\n")
  ((where, reason),) = _reasons(annotations)
  assert where == "labels.csv line 3" and "a second entry for a.jpg" in reason


def test_csv_and_jsonl_lines_over_the_limit_are_refused(tmp_path):
  long = "x" * (objects.MAX_LINE_BYTES + 1)
  with pytest.raises(objects.AnnotationError, match="labels.csv line 3: longer than"):
    _csv(tmp_path, f"file_name,label\na.jpg,cat\nb.jpg,{long}\n")
  with pytest.raises(objects.AnnotationError, match="labels.jsonl line 2: longer than"):
    _jsonl(tmp_path, [{"file_name": "a.jpg", "label": "cat"}, {"file_name": long, "label": "x"}])


def test_jsonl_classification_and_multi_label(tmp_path):
  annotations = _jsonl(tmp_path, [{"file_name": "b.jpg", "label": "dog"}, "",
                                  {"filename": "a.jpg", "label": "cat", "score": 0.9}])
  assert annotations.task == "classification" and annotations.format == "jsonl"
  assert {n: e.labels for n, e in annotations.entries.items()} == {"a.jpg": (0,), "b.jpg": (1,)}
  assert annotations.unlisted == ("d.jpg", "sub/c.jpg")
  annotations = _jsonl(tmp_path, [{"image": "a.jpg", "labels": ["dog", "cat", "dog"]},
                                  {"image": "b.jpg", "labels": []}])
  assert annotations.task == "multi_label" and annotations.negatives == 1
  assert annotations.entries["a.jpg"].labels == (0, 1)


def test_bad_jsonl_lines_are_problems_naming_their_line_all_at_once(tmp_path):
  annotations = _jsonl(tmp_path, [
      {"file_name": "a.jpg", "labels": ["cat"]},
      '{"file_name": "b.jpg", "labels": ["cat"]',
      '["b.jpg", "cat"]',
      {"file_name": "b.jpg"},
      {"file_name": "b.jpg", "label": "cat"},
      {"file_name": "b.jpg", "labels": "cat"},
      {"file_name": "b.jpg", "labels": ["cat", 3, " dog"]},
      {"file_name": "/b.jpg", "labels": ["cat"]},
      {"file_name": "b.jpg", "image": "c.jpg", "labels": ["cat"]},
      "[" * 100_000,
      '{"file_name": "b.jpg", "labels": ["cat"], "labels": ["dog"]}',
      {"file_name": "a.jpg", "labels": ["dog"]}])
  found = [(where, reason.split(" (")[0].split(":")[0]) for where, reason in _reasons(annotations)]
  assert found == [
      ("labels.jsonl line 2", "not a JSON object"),
      ("labels.jsonl line 3", "['b.jpg', 'cat'] needs one of the keys file_name, filename, "
                              "image and one of label, labels"),
      ("labels.jsonl line 4", "{'file_name'"),
      ("labels.jsonl line 5", "'label', but earlier lines have 'labels'"),
      ("labels.jsonl line 6", "labels 'cat' is not a list of strings"),
      ("labels.jsonl line 7", "class name 3 is not a string"),
      ("labels.jsonl line 7", "class name ' dog' has control characters or surrounding spaces"),
      ("labels.jsonl line 8", "file name '/b.jpg' is absolute"),
      ("labels.jsonl line 9", "{'file_name'"),
      ("labels.jsonl line 10", "not a JSON object"),
      ("labels.jsonl line 11", "the key 'labels' twice in one object, {'file_name'"),
      ("labels.jsonl line 12", "a second entry for a.jpg")]


@pytest.mark.parametrize("lines", [[], [""], [{"file_name": "a.jpg"}]])
def test_a_jsonl_file_with_no_labelled_line_is_an_error(tmp_path, lines):
  with pytest.raises(objects.AnnotationError, match="no line with an image and a label"):
    _jsonl(tmp_path, lines)


def test_a_file_whose_every_row_is_bad_names_the_rows_not_only_no_class(tmp_path):
  with pytest.raises(objects.AnnotationError) as stopped:
    _csv(tmp_path, "file_name,label\nsub/,cat\n/etc/passwd,dog\n")
  said = str(stopped.value)
  assert "no class names" in said and "2 problem(s) found before" in said
  assert "line 2" in said and "line 3" in said
  with pytest.raises(objects.AnnotationError, match=r"problem\(s\) found before"):
    _jsonl(tmp_path, [{"file_name": "a.jpg", "label": 7}])


@pytest.mark.parametrize("column", ["label", "labels"])
def test_a_label_cell_that_is_json_is_a_problem_not_a_class_name(tmp_path, column):
  # Label Studio's CSV export writes an image's several choices as {"choices": [...]}.
  annotations = _csv(tmp_path, "\n".join([
      f"file_name,{column}",
      'a.jpg,"{""choices"": [""cat"", ""dog""]}"',
      'b.jpg,"[""cat""]"',
      "d.jpg,[cat]",
      'sub/c.jpg,"[1]"', ""]))
  assert [(where, reason.split(", not class names")[0])
          for where, reason in _reasons(annotations)] == [
      ("labels.csv line 2", "label cell '{\"choices\": [\"cat\", \"dog\"]}' is JSON"),
      ("labels.csv line 3", "label cell '[\"cat\"]' is JSON")]
  assert "labels column separated by ';' (cat;dog)" in annotations.problems[0].reason
  # (JSON of no names is a name: a class may be called "[1]")
  assert list(annotations.entries) == ["d.jpg", "sub/c.jpg"]
  assert annotations.class_names == ("[1]", "[cat]") and not annotations.unlisted


def test_a_jsonl_record_with_two_image_keys_is_told_to_keep_one(tmp_path):
  annotations = _jsonl(tmp_path, [{"file_name": "b.jpg", "image": "c.jpg", "label": "cat"},
                                  {"file_name": "a.jpg", "label": "cat", "labels": ["dog"]},
                                  {"file_name": "d.jpg", "label": "dog"}])
  assert [reason.split(" has the keys ")[1] for _, reason in _reasons(annotations)] == [
      "file_name, image, which say the same: keep one",
      "label, labels, which say the same: keep one"]
