"""Telling the formats apart, the one entry point, and what holds for every format."""

import os
import pickle
import subprocess
import sys

import pytest

from imagesets.annotations import formats
from imagesets.annotations import objects
from imagesets_testing import annotation_files


@pytest.fixture(scope="module")
def known(tmp_path_factory):
  return annotation_files.write(tmp_path_factory.mktemp("known"), seed=7, count=10)


def _paths(known) -> dict[str, tuple]:
  """{what: (path, format)} of every file and folder form the dataset is written as."""
  return {"coco": (known.coco, "coco"), "voc": (known.voc, "voc"), "yolo": (known.yolo, "yolo"),
          "yolo labels": (known.yolo / "labels", "yolo"), "data.yaml": (known.yolo_yaml, "yolo"),
          "csv": (known.csv_single, "csv"), "csv multi": (known.csv_multi, "csv"),
          "jsonl": (known.jsonl_single, "jsonl"), "jsonl multi": (known.jsonl_multi, "jsonl")}


def test_every_written_form_is_detected_and_read_back(known):
  images = annotation_files.list_images(known.images_dir)
  for what, (path, format) in _paths(known).items():
    assert formats.detect(str(path)) == format, what
    annotations = formats.read(str(path), iter(images), images_root=str(known.images_dir))
    assert known.mismatches(annotations, format, multi="multi" in what) == [], what
    # Every image is an entry or unlisted; the model pickles (it goes to worker processes).
    assert set(annotations.entries) | set(annotations.unlisted) == set(images), what
    assert pickle.loads(pickle.dumps(annotations)) == annotations, what


@pytest.mark.parametrize("name, format", [
    ("x.JSON", "coco"), ("x.csv", "csv"), ("x.jsonl", "jsonl"), ("x.ndjson", "jsonl"),
    ("data.yml", "yolo"), ("classes.txt", "yolo"), ("obj.names", "yolo")])
def test_files_are_detected_by_name(tmp_path, name, format):
  (tmp_path / name).write_text("")
  assert formats.detect(str(tmp_path / name)) == format


def test_folders_are_detected_by_what_they_hold(tmp_path):
  (tmp_path / "voc" / "sub").mkdir(parents=True)
  (tmp_path / "voc" / "sub" / "a.xml").write_text("")
  (tmp_path / "voc" / ".DS_Store").write_text("")
  (tmp_path / "yolo" / "labels").mkdir(parents=True)
  (tmp_path / "yolo" / "data.yaml").write_text("names: [a]\n")
  assert formats.detect(str(tmp_path / "voc")) == "voc"
  assert formats.detect(str(tmp_path / "yolo")) == "yolo"


@pytest.mark.parametrize("files, words", [
    (["a.xml", "b.txt"], "could be voc or yolo: give the format with --format"),
    ([], "no \\*.xml \\(VOC\\), \\*.txt \\(YOLO\\) or \\*.png with labelmap.txt or classes.txt "
         "\\(masks\\) files: give the format with --format \\(one of voc, yolo, masks\\)"),
    (["a.json"], "no \\*.xml"),
])
def test_unclear_folders_name_the_candidates_and_say_format(tmp_path, files, words):
  for name in files:
    (tmp_path / name).write_text("")
  with pytest.raises(objects.AnnotationError, match=words):
    formats.detect(str(tmp_path))


def test_an_unknown_suffix_or_a_missing_path_is_an_error(tmp_path):
  (tmp_path / "labels.xlsx").write_text("")
  with pytest.raises(objects.AnnotationError, match="suffix .xlsx names no annotation format: "
                                                    "give the format with --format"):
    formats.detect(str(tmp_path / "labels.xlsx"))
  with pytest.raises(objects.AnnotationError, match="no such file or folder"):
    formats.read(str(tmp_path / "gone.json"), [])


def test_a_linked_sub_folder_of_annotations_is_a_problem_not_negatives(tmp_path):
  xml = ("<annotation><filename>{}</filename><size><width>10</width><height>10</height>"
         "</size><object><name>dog</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>9</xmax>"
         "<ymax>9</ymax></bndbox></object></annotation>")
  for folder, name in (("ann/train", "a"), ("outside/val", "b")):
    (tmp_path / folder).mkdir(parents=True)
    (tmp_path / folder / f"{name}.xml").write_text(xml.format(f"{name}.jpg"))
  (tmp_path / "ann" / "val").symlink_to(tmp_path / "outside" / "val")
  annotations = formats.read(str(tmp_path / "ann"), ["train/a.jpg", "val/b.jpg"])
  assert [(p.where, p.reason.split(",")[0]) for p in annotations.problems] == [
      ("ann/val", "a link to a folder holding annotation files")]


def test_the_format_given_wins_over_detection(known, tmp_path):
  images = annotation_files.list_images(known.images_dir)
  (known.voc / "README.txt").write_text("exported by a tool\n")
  try:
    with pytest.raises(objects.AnnotationError, match="could be voc or yolo"):
      formats.read(str(known.voc), images)
    assert known.mismatches(formats.read(str(known.voc), images, format="voc"), "voc") == []
  finally:
    (known.voc / "README.txt").unlink()
  renamed = tmp_path / "export.txt"
  renamed.write_bytes(known.coco.read_bytes())
  assert known.mismatches(formats.read(str(renamed), images, format="coco"), "coco") == []


def test_bad_arguments_are_refused(known):
  with pytest.raises(ValueError, match="format='pascal'"):
    formats.read(str(known.voc), [], format="pascal")
  with pytest.raises(ValueError, match="on_bad_box='ignore'"):
    formats.read(str(known.voc), [], on_bad_box="ignore")
  with pytest.raises(objects.AnnotationError, match="not a file: coco annotations are one file"):
    formats.read(str(known.voc), [], format="coco")
  with pytest.raises(objects.AnnotationError, match="not a folder"):
    formats.read(str(known.coco), [], format="voc")


def test_the_layer_and_its_test_data_never_import_tensorflow(tmp_path):
  # Run as the `imagesets` command is (a script of that name), where `import imagesets`
  # does not register with TFDS: what is loaded then is what this layer pulls in.
  script = tmp_path / "imagesets"
  script.write_text(
      "import sys\n"
      "from imagesets.annotations import coco, formats, objects, tables, voc_xml, yolo\n"
      "from imagesets_testing import annotation_files\n"
      "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
      "('tensorflow', 'tensorflow_datasets', 'keras'))\n"
      "assert not loaded, loaded\n"
      "assert 'imagesets.annotations.formats' in sys.modules\n")
  result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
  assert result.returncode == 0, result.stderr


def test_an_annotation_file_that_is_a_fifo_is_named_as_one(tmp_path):
  """Given as the annotations, a FIFO is said to be one (it exists: not "no such file"),
  and never opened for reading (which would wait for a writer)."""
  os.mkfifo(tmp_path / "labels.json")
  with pytest.raises(objects.AnnotationError, match=r"labels.json: a named pipe \(FIFO\), not "
                                                    "a regular file"):
    formats.read(str(tmp_path / "labels.json"), [])
