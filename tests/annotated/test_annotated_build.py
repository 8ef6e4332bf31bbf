"""Builds from every annotation format over real-photo crops: what is stored is what the
annotation file says (boxes to 1e-6, labels and flags exactly), `verify` agrees, stock
TFDS reads it without the package, bad annotations stop the build naming each."""

import json
import pathlib
import subprocess

import numpy as np
import PIL.Image
import pytest
import tensorflow_datasets as tfds

from conftest import REPO, beam_download_config, records_by_split, warm
from imagesets import constants
from imagesets.annotated import annotated_build
from imagesets.annotations import masks
from imagesets.building import annotated_builder
from imagesets.building import incremental
from imagesets.building import named_versions
from imagesets.building import problems
from imagesets.verifying import round_trip
from imagesets_testing import annotation_files
from imagesets_testing import real_photos
from imagesets_testing import sample_images
from imagesets_testing import tfds_names
import cli_runs

# (format, the Known attribute of its file, multi-label tables)
FORMATS = [("coco", "coco", False), ("voc", "voc", False), ("yolo", "yolo", False),
           ("csv", "csv_multi", True), ("jsonl", "jsonl_single", False)]


@pytest.fixture(scope="module")
def known(tmp_path_factory):
  return annotation_files.write(tmp_path_factory.mktemp("labelled"), seed=3, count=14)


@pytest.fixture(scope="module")
def built(known, tmp_path_factory):
  """{format: prepared builder} of every format, each its own dataset."""
  data_dir = tmp_path_factory.mktemp("tfds")
  out = {}
  for format, attribute, _ in FORMATS:
    out[format] = annotated_build.build(
        known.images_dir, getattr(known, attribute), f"parts_{format}", data_dir=data_dir,
        options=annotated_builder.AnnotatedConfig(name="given", 
            split_proportions={"train": 0.6, "test": 0.4}), check_registered=False)
  return out


def _stored(builder) -> dict[str, dict]:
  """{file name: example} of every split, read by stock TFDS from the version's folder."""
  reader = tfds.builder_from_directory(builder.data_dir)
  out = {}
  for split in reader.info.splits:
    for example in tfds.as_numpy(reader.as_dataset(split=split, shuffle_files=False)):
      out[example["file_name"].decode()] = example
  return out


@pytest.mark.parametrize("format,attribute,multi", FORMATS)
def test_every_box_label_and_flag_round_trips(built, known, format, attribute, multi):
  builder = built[format]
  stored = _stored(builder)
  assert sorted(stored) == known.images  # negatives kept, nothing else
  features = builder.info.features
  if format in ("csv", "jsonl"):
    key = "labels" if multi else "label"
    assert features[key].feature.names if multi else features[key].names
    for file_name, labels in known.expected_labels(multi).items():
      got = stored[file_name][key]
      assert (tuple(got) if multi else (int(got),)) == labels, file_name
    return
  assert features["objects"]["label"].names == list(known.class_names(format))
  flag_names = [name for name in features["objects"].keys() if name not in ("bbox", "label")]
  assert flag_names == {"coco": ["is_crowd"], "voc": ["difficult", "truncated", "pose"],
                        "yolo": []}[format]
  for file_name, expected in known.expected_objects(format).items():
    objects = stored[file_name]["objects"]
    assert len(objects["label"]) == len(expected), file_name
    for k, (bbox, label, flags) in enumerate(expected):
      np.testing.assert_allclose(objects["bbox"][k], bbox, rtol=0, atol=1e-6)
      assert objects["label"][k] == label
      if format == "coco":
        assert objects["is_crowd"][k] == flags[0]
      if format == "voc":
        assert (objects["difficult"][k], objects["truncated"][k], objects["pose"][k]) == flags
    height, width = known.sizes[file_name]
    assert (stored[file_name]["height"], stored[file_name]["width"]) == (height, width)
  metadata = builder.info.metadata
  assert metadata["num_negatives"] == sum(not o for o in known.objects.values())
  assert metadata["max_objects_per_image"] == max(len(o) for o in known.objects.values())
  assert sum(metadata["num_objects_per_class"].values()) == sum(
      len(o) for o in known.objects.values())


@pytest.mark.parametrize("format,attribute,multi", FORMATS)
def test_verify_passes_and_sees_a_changed_annotation(built, known, format, attribute, multi,
                                                     tmp_path):
  builder = built[format]
  report = round_trip.verify(builder.data_dir, known.images_dir)
  assert report.ok, report.lines()
  assert report.checked == len(known.images) and report.identical == len(known.images)
  if format != "coco":
    return
  edited = json.loads(known.coco.read_text())
  edited["annotations"][0]["bbox"][0] += 3  # one box moved by 3 pixels
  path = tmp_path / "edited.json"
  path.write_text(json.dumps(edited))
  report = round_trip.verify(builder.data_dir, known.images_dir, path)
  assert not report.ok and len(report.mismatches) == 1, report.lines()
  assert "bbox" in report.mismatches[0].reason
  swapped = json.loads(known.coco.read_text())
  first, second = swapped["categories"][0], swapped["categories"][1]
  first["name"], second["name"] = second["name"], first["name"]
  path.write_text(json.dumps(swapped))
  report = round_trip.verify(builder.data_dir, known.images_dir, path)
  assert [p.reason for p in report.mismatches if "class names" in p.reason], report.lines()


def test_stock_tfds_loads_a_detection_build_without_the_package(built):
  builder = built["coco"]
  code = ("import sys, tensorflow_datasets as tfds\n"
          f"ds = tfds.load('{builder.name}:1.0.0', split='train', data_dir=sys.argv[1])\n"
          "n = sum(int(e['objects']['bbox'].shape[0]) for e in tfds.as_numpy(ds))\n"
          "assert not any(m.startswith('imagesets') for m in sys.modules)\n"
          "print(n)\n")
  done = subprocess.run([warm("python"), "-c", code, str(pathlib.Path(builder.data_dir).parents[1])],
                        capture_output=True, text=True, cwd="/", timeout=300)
  assert done.returncode == 0, done.stderr[-2000:]
  expected = sum(len(e["objects"]["label"]) for e in tfds.as_numpy(
      tfds.builder_from_directory(builder.data_dir).as_dataset(split="train")))
  assert int(done.stdout.split()[-1]) == expected > 0


def test_a_rebuild_is_a_no_op_and_changed_annotations_are_refused(built, known, tmp_path):
  builder = built["coco"]
  data_dir = pathlib.Path(builder.data_dir).parents[1]
  options = annotated_builder.AnnotatedConfig(name="given", split_proportions={"train": 0.6, "test": 0.4})
  said = []
  again = annotated_build.build(known.images_dir, known.coco, builder.name, data_dir=data_dir,
                                options=options, check_registered=False, log=said.append)
  assert "nothing to do" in said[-1] and again.info.splits["train"].num_examples
  edited = json.loads(known.coco.read_text())
  edited["annotations"][0]["bbox"][1] += 1
  path = tmp_path / "instances.json"
  path.write_text(json.dumps(edited))
  with pytest.raises(named_versions.VersionExistsError, match=r"<annotations>"):
    annotated_build.build(known.images_dir, path, builder.name, data_dir=data_dir,
                          options=options, check_registered=False)


def _coco(images: list[dict], annotations: list[dict]) -> dict:
  return {"images": images, "annotations": annotations,
          "categories": [{"id": 1, "name": "part"}, {"id": 2, "name": "tool"}]}


def _photo(path: pathlib.Path, size=(90, 60), orientation: int | None = None) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  pixels = next(iter(real_photos.photos().values()))[:size[1], :size[0]]
  exif = PIL.Image.Exif()
  if orientation:
    exif[0x0112] = orientation
  PIL.Image.fromarray(np.ascontiguousarray(pixels)).save(path, "JPEG", exif=exif.tobytes())


def test_bad_annotations_stop_the_build_naming_each_before_any_image_is_read(tmp_path):
  for name in ("a.jpg", "b.jpg"):
    _photo(tmp_path / "images" / name)
  coco = _coco([{"id": 1, "file_name": "a.jpg", "width": 90, "height": 60},
                {"id": 2, "file_name": "../b.jpg", "width": 90, "height": 60},
                {"id": 3, "file_name": "missing.jpg", "width": 90, "height": 60}],
               [{"id": 1, "image_id": 1, "category_id": 7, "bbox": [1, 1, 5, 5]},
                {"id": 2, "image_id": 1, "category_id": 1, "bbox": [80, 1, 20, 5]}])
  (tmp_path / "coco.json").write_text(json.dumps(coco))
  with pytest.raises(problems.InvalidSourceError) as stopped:
    annotated_build.build(tmp_path / "images", tmp_path / "coco.json", "bad",
                          data_dir=tmp_path / "tfds", check_registered=False)
  text = str(stopped.value)
  for said in ("category", "../b.jpg", "missing.jpg", "annotation id 2"):
    assert said in text, text
  assert not (tmp_path / "tfds" / "bad").exists()


def test_clipped_boxes_and_unlisted_images_are_named_in_the_metadata(tmp_path):
  for name in ("a.jpg", "b.jpg", "c.jpg", "extra.jpg"):
    _photo(tmp_path / "images" / name)
  coco = _coco([{"id": i, "file_name": f"{n}.jpg", "width": 90, "height": 60}
                for i, n in enumerate("abc", 1)],
               [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [80, 10, 20, 5]},
                {"id": 2, "image_id": 2, "category_id": 2, "bbox": [10, 10, 20, 20]}])
  (tmp_path / "coco.json").write_text(json.dumps(coco))
  builder = annotated_build.build(
      tmp_path / "images", tmp_path / "coco.json", "clipped", data_dir=tmp_path / "tfds",
      check_registered=False, options=annotated_builder.AnnotatedConfig(name="given", 
          on_bad_box="clip", split_proportions={"train": 1.0}))
  metadata = builder.info.metadata
  assert metadata["unlisted_images"] == ["extra.jpg"]
  assert len(metadata["fixed_boxes"]) == 1 and "annotation id 1" in metadata["fixed_boxes"][0]
  assert metadata["num_negatives"] == 1  # c.jpg: listed, no annotations, kept
  stored = _stored(builder)
  np.testing.assert_allclose(stored["a.jpg"]["objects"]["bbox"][0],
                             [10 / 60, 80 / 90, 15 / 60, 1.0], atol=1e-6)


@pytest.mark.parametrize("declared,ok", [((60, 90), True), ((90, 60), False)])
def test_boxes_are_read_on_the_upright_photo(tmp_path, declared, ok):
  # Stored 90 wide, 60 high, EXIF orientation 6: upright it is 60 wide, 90 high.
  _photo(tmp_path / "images" / "turned.jpg", size=(90, 60), orientation=6)
  _photo(tmp_path / "images" / "plain.jpg")
  height, width = declared[1], declared[0]
  coco = _coco([{"id": 1, "file_name": "turned.jpg", "width": width, "height": height},
                {"id": 2, "file_name": "plain.jpg", "width": 90, "height": 60}],
               [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [6, 9, 30, 45]}])
  (tmp_path / "coco.json").write_text(json.dumps(coco))
  build = lambda: annotated_build.build(
      tmp_path / "images", tmp_path / "coco.json", "turned", data_dir=tmp_path / "tfds",
      check_registered=False, options=annotated_builder.AnnotatedConfig(name="given", 
          split_proportions={"train": 1.0}))
  if not ok:
    with pytest.raises(problems.InvalidSourceError, match=r"turned.jpg: the annotations give 90x60 .*"
                       r"photo is 60x90 upright \(the size before EXIF rotation"):
      build()
    return
  stored = _stored(build())["turned.jpg"]
  assert (stored["height"], stored["width"]) == (90, 60)  # stored upright
  np.testing.assert_allclose(stored["objects"]["bbox"][0], [9 / 90, 6 / 60, 54 / 90, 36 / 60],
                             atol=1e-6)


def test_the_command_line_builds_from_annotations_and_says_what_it_left_out(known, tmp_path):
  done = cli_runs.in_process("build", known.images_dir, "--name", "cli_parts",
                             "--annotations", known.coco, "--data-dir", tmp_path / "tfds",
                             "--splits", "train=0.5,test=0.5")
  assert done.returncode == 0, done.stderr
  assert "cli_parts:1.0.0" in done.stdout
  boxes = sum(len(o) for o in known.objects.values())
  assert f"{boxes} boxes, 2 image(s) without any" in done.stdout
  later = cli_runs.in_process("build", known.images_dir, "--name", "cli_parts",
                              "--annotations", known.coco, "--data-dir", tmp_path / "tfds",
                              "--splits", "train=0.5,test=0.5", "--version", "1.1.0")
  assert later.returncode == 0, later.stderr
  assert "built on cli_parts:1.0.0: kept 14 of its 14 photos" in later.stdout
  wrong = cli_runs.in_process("build", known.images_dir, "--name", "cli_parts2",
                              "--annotations", known.coco, "--leakage", "drop",
                              "--data-dir", tmp_path / "tfds")
  assert wrong.returncode == 2 and "--leakage: not an option of a build from annotations" in (
      wrong.stderr)
  orphan = cli_runs.in_process("build", known.images_dir, "--name", "cli_parts3",
                               "--on-bad-box", "clip", "--data-dir", tmp_path / "tfds")
  assert orphan.returncode == 2 and "--annotations FILE" in orphan.stderr


def test_the_annotated_builder_builds_its_example_with_the_stock_tfds_cli(tmp_path):
  done = subprocess.run([warm("tfds"), "build",
                         str(REPO / "datasets" / "annotated"), "--data_dir", str(tmp_path),
                         "--config", "example"], capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  builder = tfds.builder_from_directory(tmp_path / "annotated" / "example" / "1.0.0")
  assert builder.info.metadata["task"] == "detection"
  assert round_trip.verify(builder.data_dir, REPO / "datasets" / "annotated" / "dummy_data"
                           / "images").ok


def test_the_fingerprint_is_what_the_annotations_say_from_whichever_files(known, tmp_path):
  # A YOLO build given its data.yaml: its label files and names count; a stray file in an
  # annotation folder does not.
  import shutil
  yolo = tmp_path / "yolo"
  shutil.copytree(known.yolo, yolo)
  options = annotated_builder.AnnotatedConfig(name="given", split_proportions={"train": 1.0})
  build = lambda: annotated_build.build(known.images_dir, yolo / "data.yaml", "yolo_parts",
                                        data_dir=tmp_path / "tfds", options=options,
                                        check_registered=False, log=said.append)
  said = []
  build()
  (yolo / "labels" / ".DS_Store").write_bytes(b"\0\1")
  build()
  assert "nothing to do" in said[-1]
  label_file = next(p for p in sorted((yolo / "labels").rglob("*.txt")) if p.read_text().strip())
  first, rest = label_file.read_text().split("\n", 1)
  label_file.write_text(" ".join(["0"] + first.split()[1:]) + "\n" + rest
                        if first.split()[0] != "0" else
                        " ".join(["1"] + first.split()[1:]) + "\n" + rest)
  with pytest.raises(named_versions.VersionExistsError, match="<annotations>"):
    build()


def test_a_mask_folder_counts_by_its_masks_pixels_not_where_it_is(known, tmp_path):
  import shutil
  options = annotated_builder.AnnotatedConfig(name="given", split_proportions={"train": 1.0})
  build = lambda folder: annotated_build.build(known.images_dir, folder, "mask_parts",
                                               data_dir=tmp_path / "tfds", options=options,
                                               check_registered=False, log=said.append)
  said = []
  shutil.copytree(known.masks, tmp_path / "masks")
  build(tmp_path / "masks")
  shutil.move(tmp_path / "masks", tmp_path / "moved")
  build(tmp_path / "moved")
  assert "nothing to do" in said[-1]
  mask_file = next(p for p in sorted((tmp_path / "moved").rglob("*.png"))
                   if np.asarray(PIL.Image.open(p)).any())
  with PIL.Image.open(mask_file) as opened:
    edited = opened.copy()
  pixels = np.asarray(edited).copy()
  pixels[pixels != 0] = 0  # (its objects erased: the same file name, other pixels)
  edited.frombytes(pixels.tobytes())
  edited.save(mask_file)
  with pytest.raises(named_versions.VersionExistsError, match="<annotations>"):
    build(tmp_path / "moved")


def test_a_version_folder_that_is_not_a_finished_version_is_named_not_taken(known, tmp_path):
  (tmp_path / "tfds" / "half" / "1.0.0").mkdir(parents=True)
  with pytest.raises(FileExistsError, match=r"half/1.0.0 exists but is not a finished version"):
    annotated_build.build(known.images_dir, known.coco, "half", data_dir=tmp_path / "tfds",
                          check_registered=False)


def test_a_build_that_finds_its_version_made_by_another_of_other_content_says_so(known,
                                                                                  tmp_path):
  # Two builds of one NAME:VERSION take turns on its lock; the second finds the first's
  # version there: it is its own only when built from the same content.
  data_dir = tmp_path / "tfds"
  annotated_build.build(known.images_dir, known.coco, "raced", data_dir=data_dir,
                        check_registered=False)
  other = annotated_builder.AnnotatedConfig(name="given", images=str(known.images_dir),
                                            annotations=str(known.voc))
  cls = named_versions.named_builder(
      annotated_builder.AnnotatedBuilder, "raced", "1.0.0", source="x",
      about=named_versions.About(), default_description=lambda features: "",
      metadata={"content_fingerprint": "other", "content_files": {}, "content_options": {}},
      OPTIONS=other)
  with pytest.raises(named_versions.VersionExistsError, match="built from other content"):
    cls(data_dir=data_dir).download_and_prepare()


def test_a_copy_of_a_photo_with_other_objects_is_a_conflict_the_same_objects_are_not(tmp_path):
  from imagesets.analysis import duplicates
  photos = list(real_photos.photos().values())
  for name, pixels in (("a.jpg", photos[0]), ("b.jpg", photos[3])):
    path = tmp_path / "images" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    PIL.Image.fromarray(np.ascontiguousarray(pixels[:60, :90])).save(path, "JPEG")
    (tmp_path / "images" / name.replace(".", "_copy.")).write_bytes(path.read_bytes())
  boxes = {"a.jpg": [1], "a_copy.jpg": [2], "b.jpg": [1, 2], "b_copy.jpg": [2, 1]}
  images = [{"id": i, "file_name": n, "width": 90, "height": 60}
            for i, n in enumerate(sorted(boxes))]
  annotations = [{"id": 10 * i + k, "image_id": i, "category_id": c, "bbox": [5 + k, 5, 20, 20]}
                 for i, n in enumerate(sorted(boxes)) for k, c in enumerate(boxes[n])]
  (tmp_path / "coco.json").write_text(json.dumps(_coco(images, annotations)))
  builder = annotated_build.build(
      tmp_path / "images", tmp_path / "coco.json", "copies", data_dir=tmp_path / "tfds",
      check_registered=False, options=annotated_builder.AnnotatedConfig(
          name="given", split_proportions={"train": 1.0}))
  report = json.loads((pathlib.Path(builder.data_dir) / duplicates.REPORT_FILE).read_text())
  groups = {tuple(sorted(m["file_name"] for m in g["members"])): g for g in report["groups"]}
  a, b = groups[("a.jpg", "a_copy.jpg")], groups[("b.jpg", "b_copy.jpg")]
  assert a["label_conflict"] and {m["label"] for m in a["members"]} == {"1 part", "1 tool"}
  assert not b["label_conflict"] and {m["label"] for m in b["members"]} == {"1 part, 1 tool"}


def test_diff_counts_an_example_whose_objects_changed(known, built, tmp_path):
  from imagesets.reading import sources
  from imagesets.reports import version_diff
  from imagesets.reports import version_examples
  edited = json.loads(known.coco.read_text())
  boxed = next(a for a in edited["annotations"])
  edited["annotations"] = [a for a in edited["annotations"] if a is not boxed]
  path = tmp_path / "instances.json"
  path.write_text(json.dumps(edited))
  data_dir = pathlib.Path(built["coco"].data_dir).parents[1]
  options = annotated_builder.AnnotatedConfig(name="given",
                                              split_proportions={"train": 0.6, "test": 0.4})
  annotated_build.build(known.images_dir, path, "parts_coco", version="1.0.1",
                        data_dir=data_dir, options=options, check_registered=False)
  sides = [[version_diff.Entry.of(e.split, e.file_name, e.label, e.image)
            for e in version_examples.every_example(
                sources.open_source(f"parts_coco:{v}", str(data_dir)), "reading")]
           for v in ("1.0.0", "1.0.1")]
  result = version_diff.diff(*sides)
  changed = [item for split in result.splits.values() for item in split["relabelled"]]
  image = next(i["file_name"] for i in edited["images"] if i["id"] == boxed["image_id"])
  assert [item["file_name"] for item in changed] == [image]
  assert changed[0]["old_label"] != changed[0]["label"]


def test_the_page_pictures_each_example_with_its_boxes_class_names_and_mask(built, known):
  import base64
  import io
  from imagesets.reading import sources
  from imagesets.reports import report_page
  from imagesets.reports import version_examples
  builder = built["coco"]
  catalog = builder._page_catalog(pathlib.Path(builder.data_dir))
  stored = _stored(builder)
  names = known.class_names("coco")
  masked = 0
  for located in (e for split in catalog.values() for e in split):
    objects = stored[located.file_name]["objects"]
    assert [b[4] for b in located.boxes] == [names[i] for i in objects["label"]]
    np.testing.assert_allclose([b[:4] for b in located.boxes] or np.zeros((0, 4)),
                               objects["bbox"], atol=1e-6)
    mask = np.asarray(PIL.Image.open(io.BytesIO(located.mask)))
    np.testing.assert_array_equal(mask, stored[located.file_name]["class_mask"][..., 0])
    masked += bool(mask.any())
  assert masked >= 2
  # (a version read back, not the build's catalog: the same masks)
  source = sources.open_source(f"{builder.name}:{builder.version}", str(
      pathlib.Path(builder.data_dir).parents[1]))
  read_back = {e.file_name: e.mask for e in version_examples.every_example(source, "reading")}
  assert read_back == {e.file_name: e.mask for split in catalog.values() for e in split}
  grey = io.BytesIO()
  PIL.Image.new("RGB", (192, 96), (128, 128, 128)).save(grey, "PNG")
  drawn = report_page.thumbnail(grey.getvalue(), [(0.25, 0.25, 0.75, 0.75, "cat")])
  pixels = np.asarray(PIL.Image.open(io.BytesIO(base64.b64decode(drawn.split(",", 1)[1]))))
  assert pixels.shape[:2] == (48, 96)
  edge, inside = pixels[int(0.75 * 47), 48].astype(int), pixels[30, 60].astype(int)
  assert np.abs(edge - 128).max() > 60 and np.abs(inside - 128).max() < 12
  assert report_page.thumbnail(grey.getvalue()) != drawn
  # the mask: its ids tinted in VOC's colours at half opacity, background (0) left clear
  photo = next(e for split in catalog.values() for e in split
               if np.asarray(PIL.Image.open(io.BytesIO(e.mask))).any())

  def shown(uri):
    return np.asarray(PIL.Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))),
                      np.float32)

  plain = shown(report_page.thumbnail(photo.image))
  tinted = shown(report_page.thumbnail(photo.image, mask=photo.mask))
  ids = np.asarray(PIL.Image.open(io.BytesIO(photo.mask)).resize(
      plain.shape[1::-1], PIL.Image.Resampling.NEAREST))
  want = np.where((ids != 0)[..., None], (plain + masks.pascal_palette()[ids]) / 2, plain)
  assert np.abs(tinted - want).mean() < 4  # (JPEG's error)
  assert np.abs(tinted - plain)[ids != 0].mean() > 4 * np.abs(tinted - plain)[ids == 0].mean()
  rgb, small, jpeg = io.BytesIO(), io.BytesIO(), io.BytesIO()
  height, width = np.asarray(PIL.Image.open(io.BytesIO(photo.mask))).shape
  PIL.Image.new("RGB", (width, height), (255, 0, 0)).save(rgb, "PNG")
  PIL.Image.new("L", (width // 2, height), 1).save(small, "PNG")  # (not the image's size)
  PIL.Image.new("L", (width, height), 1).save(jpeg, "JPEG")
  # (left off, the picture still drawn)
  for unusable in (b"not a png", rgb.getvalue(), small.getvalue(), jpeg.getvalue()):
    assert report_page.thumbnail(photo.image, mask=unusable) == report_page.thumbnail(photo.image)
  page = (pathlib.Path(builder.data_dir) / report_page.PAGE_FILE).read_text()
  assert "class_mask tinted in PASCAL VOC&#x27;s colours" in page


@pytest.mark.parametrize("format,attribute", [("coco", "coco"), ("csv", "csv_multi")])
def test_a_beam_build_writes_the_local_builds_records_and_reports(built, known, tmp_path,
                                                                  format, attribute):
  # COCO: boxes, flags and both masks; CSV: multi-label tags.
  local = built[format]
  beam = annotated_build.build(
      known.images_dir, getattr(known, attribute), f"parts_{format}", data_dir=tmp_path,
      options=annotated_builder.AnnotatedConfig(
          name="given", split_proportions={"train": 0.6, "test": 0.4}),
      check_registered=False,
      beam_options=beam_download_config(multi_processing=False).beam_options)
  assert beam.info.features.to_json() == local.info.features.to_json()
  assert records_by_split(beam.data_path) == records_by_split(local.data_path)
  assert dict(beam.info.metadata) == dict(local.info.metadata)
  # (the page too: Beam writes no record index, so its page is read from the records)
  for report in ("duplicates.json", "quality.json", "README.md", "report.html"):
    assert ((pathlib.Path(beam.data_path) / report).read_bytes()
            == (pathlib.Path(local.data_path) / report).read_bytes()), report


@pytest.mark.parametrize("format,key", [("coco", "objects"), ("csv", "labels")])
def test_the_page_counts_each_example_under_every_class_it_shows(built, known, format, key):
  # Counted from the stored records here; the build's own page (its record index, no record
  # read) and a page computed from the records must both say it.
  from imagesets.reports import report_page
  from imagesets.reports import version_examples
  from imagesets.reports import version_report
  builder = built[format]
  reader = tfds.builder_from_directory(builder.data_dir)
  feature = reader.info.features[key].feature
  names = (feature["label"] if key == "objects" else feature).names
  none = "(no objects)" if key == "objects" else "(no labels)"
  want, examples = {}, {}
  for split in reader.info.splits:
    counts = dict.fromkeys(names, 0)
    rows = list(tfds.as_numpy(reader.as_dataset(split=split, shuffle_files=False)))
    for row in rows:
      ids = row[key]["label"] if key == "objects" else row[key]
      for name in ({names[i] for i in ids} or {none}):
        counts[name] = counts.get(name, 0) + 1
    want[split], examples[split] = counts, len(rows)
  assert any(sum(c.values()) > examples[s] for s, c in want.items())  # several classes
  assert any(none in c for c in want.values())                         # and negatives
  folder = pathlib.Path(builder.data_dir)
  for source in (version_examples.Folder(builder, folder, catalog=builder._page_catalog(folder)),
                 version_examples.Folder.at(folder)):
    content = version_report.content(source)
    assert content.counts == want and content.examples == examples
    html = report_page.render(content)
    assert "An example counts under each class it shows" in html
    # every class shown is pictured, and the examples without any under their own heading
    assert set(content.grid) == {n for n in (*names, none) if any(want[s].get(n) for s in want)}
    assert f"{len(names)} class(es)" in content.facts[0]


def test_a_label_file_whose_image_is_a_webp_names_it_with_the_fix(tmp_path):
  known = annotation_files.write(tmp_path / "labelled", seed=4, count=8)
  jpeg = known.images_dir / "img_003.jpg"
  jpeg.rename(jpeg.with_suffix(".webp"))   # (the bytes do not matter: it is never read)
  source = annotated_builder.read_source(annotated_builder.AnnotatedConfig(
      name="given", images=str(known.images_dir), annotations=str(known.yolo)))
  assert [p.reason for p in source.annotations.problems if "img_003" in p.reason] == [
      f"no image img_003.* in {known.images_dir} that a build reads (it reads "
      f"{', '.join(constants.IMAGE_SUFFIXES)} files; 'img_003.webp' is not one: convert it "
      "to JPEG or PNG)"]


def _made(builder) -> int:
  """The examples a build made (on Beam: the images its workers fingerprinted)."""
  if builder.generation.use_beam:
    return builder.generation.beam_counters["fingerprinted"]
  return sum(len(builder.generation.written(split)) for split in builder.info.splits)


def _grown_coco(known, root: pathlib.Path) -> dict:
  """A copy of the known images and COCO file under `root`, changed: one image's box moved,
  one photo re-encoded, one removed, one added with an object of a new category (listed
  last: every other class keeps its id). {what: image file name}."""
  import shutil
  shutil.copytree(known.images_dir, root / "images")
  document = json.loads(known.coco.read_text())
  by_id = {i["id"]: i["file_name"] for i in document["images"]}
  boxed = sorted({by_id[a["image_id"]] for a in document["annotations"]})
  moved, edited, removed = boxed[0], boxed[1], boxed[2]
  box = next(a for a in document["annotations"] if by_id[a["image_id"]] == moved)
  box["bbox"][0] += 1
  path = root / "images" / edited
  path.write_bytes(sample_images.encode(np.asarray(PIL.Image.open(path))[::-1], "JPEG"))
  gone = next(i["id"] for i in document["images"] if i["file_name"] == removed)
  document["images"] = [i for i in document["images"] if i["id"] != gone]
  document["annotations"] = [a for a in document["annotations"] if a["image_id"] != gone]
  (root / "images" / removed).unlink()
  _photo(root / "images" / "added.jpg", size=(90, 60))
  new_id = max(c["id"] for c in document["categories"]) + 1
  document["categories"].append({"id": new_id, "name": "zz_new", "supercategory": "thing"})
  document["images"].append({"id": 999, "file_name": "added.jpg", "height": 60, "width": 90})
  document["annotations"].append({"id": 9999, "image_id": 999, "category_id": new_id,
                                  "bbox": [10, 5, 30, 20], "area": 600, "iscrowd": 0,
                                  "segmentation": [[10, 5, 40, 5, 40, 25, 10, 25]]})
  (root / "instances.json").write_text(json.dumps(document))
  return {"moved": moved, "edited": edited, "removed": removed, "added": "added.jpg"}


@pytest.mark.parametrize("runner", ["local", "beam"])
def test_a_new_version_makes_only_the_changed_images_and_reads_as_a_full_build(known, tmp_path,
                                                                               runner):
  # COCO with boxes, flags and both masks, built on the version before and in full.
  options = annotated_builder.AnnotatedConfig(name="given",
                                              split_proportions={"train": 0.6, "test": 0.4})
  build = lambda images, coco, data_dir, version, **kw: annotated_build.build(
      images, coco, "grown", version=version, data_dir=data_dir, options=options,
      check_registered=False, **kw)
  first = build(known.images_dir, known.coco, tmp_path / "data", "1.0.0")
  assert _made(first) == 14
  _grown_coco(known, tmp_path / "tree")
  said = []
  on = {"beam_options": beam_download_config(workers=2).beam_options} if runner == "beam" else {}
  later = build(tmp_path / "tree" / "images", tmp_path / "tree" / "instances.json",
                tmp_path / "data", "1.1.0", from_version=incremental.LATEST, log=said.append,
                **on)
  assert _made(later) == 3, said  # the moved box, the edited photo, the added one
  assert "built on grown:1.0.0: kept 11 of its 14 photos" in said[-1]
  full = build(tmp_path / "tree" / "images", tmp_path / "tree" / "instances.json",
               tmp_path / "full", "1.1.0")
  assert _made(full) == 14
  v2, whole = pathlib.Path(later.data_path), pathlib.Path(full.data_path)
  assert records_by_split(v2) == records_by_split(whole)
  assert dict(later.info.metadata) == dict(full.info.metadata)
  assert later.info.features.to_json() == full.info.features.to_json()
  for report in ("duplicates.json", "quality.json"):
    assert (v2 / report).read_bytes() == (whole / report).read_bytes(), report
  assert round_trip.verify(v2, str(tmp_path / "tree" / "images"),
                           str(tmp_path / "tree" / "instances.json")).ok
  # and a version built on that one (on Beam: on the record index its workers wrote), of
  # the same tree, makes nothing
  again = build(tmp_path / "tree" / "images", tmp_path / "tree" / "instances.json",
                tmp_path / "data", "1.2.0", from_version=incremental.LATEST)
  assert _made(again) == 0
  assert records_by_split(again.data_path) == records_by_split(whole)


def test_a_renamed_class_keeps_every_record_and_another_layout_builds_in_full(known, tmp_path):
  options = annotated_builder.AnnotatedConfig(name="given",
                                              split_proportions={"train": 0.6, "test": 0.4})
  build = lambda annotations, version, log=None, data_dir="data", **kw: annotated_build.build(
      known.images_dir, annotations, "renamed", version=version, data_dir=tmp_path / data_dir,
      options=options, check_registered=False, log=log or (lambda line: None), **kw)
  build(known.coco, "1.0.0", from_version=incremental.LATEST)
  document = json.loads(known.coco.read_text())
  category = min(document["categories"], key=lambda c: c["id"])
  assert any(a["category_id"] == category["id"] for a in document["annotations"])
  category["name"] = "renamed_" + category["name"]
  (tmp_path / "renamed.json").write_text(json.dumps(document))
  # (records hold class ids: a new name is the features' only change)
  later = build(tmp_path / "renamed.json", "1.1.0", from_version=incremental.LATEST)
  full = build(tmp_path / "renamed.json", "1.1.0", data_dir="full")
  assert _made(later) == 0 and _made(full) == 14
  assert records_by_split(later.data_path) == records_by_split(full.data_path)
  assert later.info.features.to_json() == full.info.features.to_json()
  assert dict(later.info.metadata) == dict(full.info.metadata)
  for annotation in document["annotations"]:
    annotation.pop("segmentation")  # no masks: the records hold other features
  (tmp_path / "boxes.json").write_text(json.dumps(document))
  said = []
  plain = build(tmp_path / "boxes.json", "1.2.0", said.append, from_version=incremental.LATEST)
  assert _made(plain) == 14
  assert ("building renamed:1.2.0 in full, not on renamed:1.1.0: renamed:1.1.0 has "
          "annotations of another layout (its masks differ)") in said, said
  # other flags (YOLO has none, VOC pose, truncated, difficult): in full too
  said = []
  build(known.yolo, "2.0.0", data_dir="flags")
  voc = build(known.voc, "2.1.0", said.append, data_dir="flags", from_version=incremental.LATEST)
  assert _made(voc) == 14
  assert any("annotations of another layout (its flag_names, flag_classes differ)" in line
             for line in said), said


def test_a_mask_folder_built_on_its_version_before_makes_the_edited_mask_again(known, tmp_path):
  import shutil
  options = annotated_builder.AnnotatedConfig(name="given",
                                              split_proportions={"train": 0.6, "test": 0.4})
  build = lambda version, data_dir, **kw: annotated_build.build(
      known.images_dir, tmp_path / "masks", "painted", version=version,
      data_dir=tmp_path / data_dir, options=options, check_registered=False, **kw)
  shutil.copytree(known.masks, tmp_path / "masks")
  build("1.0.0", "data")
  mask_file = next(p for p in sorted((tmp_path / "masks").rglob("*.png"))
                   if np.asarray(PIL.Image.open(p)).any())
  with PIL.Image.open(mask_file) as opened:
    edited = opened.copy()
  pixels = np.asarray(edited).copy()
  pixels[pixels != 0] = 0
  edited.frombytes(pixels.tobytes())
  edited.save(mask_file)
  later = build("1.1.0", "data", from_version=incremental.LATEST)
  full = build("1.1.0", "full")
  assert _made(later) == 1 and _made(full) == 14
  assert records_by_split(later.data_path) == records_by_split(full.data_path)
  assert dict(later.info.metadata) == dict(full.info.metadata)


def test_a_mask_that_cannot_be_read_is_a_bad_item_of_its_image(known, tmp_path):
  import shutil
  shutil.copytree(known.masks, tmp_path / "masks")
  victim = sorted((tmp_path / "masks").rglob("*.png"))[0]
  victim.write_bytes(b"\x89PNG\r\n\x1a\n cut short")  # (a link there is an annotation problem)
  build = lambda skip: annotated_build.build(
      known.images_dir, tmp_path / "masks", f"unreadable_{int(skip)}", data_dir=tmp_path / "data",
      check_registered=False, options=annotated_builder.AnnotatedConfig(
          name="given", split_proportions={"train": 1.0}, skip_bad_files=skip))
  with pytest.raises(problems.InvalidSourceError, match=f"{victim.name}.* cannot be read"):
    build(False)
  built = build(True)
  assert len(built.info.metadata["skipped_files"]) == 1
  assert built.info.splits["train"].num_examples == 13


@pytest.mark.parametrize("attribute,edit,remade", [
    # one image relabelled: it alone is made again
    ("jsonl_single", lambda text: text.replace('"label": "cat"}', '"label": "dog"}', 1), 1),
    # a tag that sorts first renumbers every class (table classes are the sorted names):
    # every image is made again but the one left without tags
    ("csv_multi", lambda text: text.replace(",,someone\n", ",aardvark,someone\n", 1), 13)])
def test_a_table_built_on_its_version_before_keeps_what_still_says_the_same(
    known, tmp_path, attribute, edit, remade):
  options = annotated_builder.AnnotatedConfig(name="given",
                                              split_proportions={"train": 0.6, "test": 0.4})
  build = lambda table, data_dir, version, **kw: annotated_build.build(
      known.images_dir, table, "tagged", version=version, data_dir=data_dir, options=options,
      check_registered=False, **kw)
  build(getattr(known, attribute), tmp_path / "data", "1.0.0")
  table = tmp_path / getattr(known, attribute).name
  table.write_text(edit(getattr(known, attribute).read_text()))
  assert table.read_text() != getattr(known, attribute).read_text()
  later = build(table, tmp_path / "data", "1.1.0", from_version=incremental.LATEST)
  assert _made(later) == remade
  full = build(table, tmp_path / "full", "1.1.0")
  assert records_by_split(later.data_path) == records_by_split(full.data_path)
  assert dict(later.info.metadata) == dict(full.info.metadata)


@pytest.mark.parametrize("format,attribute,multi", FORMATS)
def test_the_digest_of_annotations_without_mask_files_is_the_one_versions_recorded(
    known, format, attribute, multi):
  # (versions already built keep their fingerprint: the digest of what asdict gave)
  import dataclasses
  import hashlib
  options = annotated_builder.AnnotatedConfig(name="given", images=str(known.images_dir),
                                              annotations=str(getattr(known, attribute)))
  read = annotated_builder.read_source(options).annotations
  recorded = dataclasses.asdict(read)
  del recorded["source"]
  assert annotated_build.annotation_digest(annotated_build.said(read, {})) == hashlib.sha256(
      json.dumps(recorded, sort_keys=True).encode()).hexdigest()


def test_a_kept_record_whose_label_is_not_its_entrys_gives_a_full_build(known, tmp_path):
  """A base shard forged consistently (one record's label changed, its index's size and
  SHA-256 made to match): rewriting that shard reads each kept record's label."""
  import tensorflow as tf
  from imagesets.building import record_index
  options = annotated_builder.AnnotatedConfig(name="given", split_proportions={"train": 1.0})
  build = lambda table, version, **kw: annotated_build.build(
      known.images_dir, table, "forged", version=version, data_dir=tmp_path / "data",
      options=options, check_registered=False, **kw)
  base = pathlib.Path(build(known.jsonl_single, "1.0.0").data_path)
  name = next(p.name for p in sorted(base.glob("*.tfrecord-*"))
              if len(record_index.read(base, p.name, "train").records) >= 2)
  records = [r.numpy() for r in tf.data.TFRecordDataset(str(base / name))]
  forged = tf.train.Example.FromString(records[0])
  labels = forged.features.feature["label"].int64_list.value
  labels[0] = (labels[0] + 1) % len(known.class_names("jsonl_single"))
  records[0] = forged.SerializeToString()
  with tf.io.TFRecordWriter(str(base / name)) as writer:
    for record in records:
      writer.write(record)
  index_path = record_index.path_of(base, name)
  index = json.loads(index_path.read_text())
  index["records"][0][1] = len(records[0])
  index["sha256"] = record_index.sha256_of(base / name)
  index_path.write_text(json.dumps(index))
  dropped = index["records"][1][0]  # (its shard is rewritten without it)
  table = tmp_path / "table.jsonl"
  table.write_text("".join(line for line in known.jsonl_single.read_text().splitlines(True)
                           if json.loads(line)["file_name"] != dropped))
  said = []
  later = build(table, "1.1.0", from_version=incremental.LATEST, log=said.append)
  assert _made(later) == 13
  assert any("in full, not on forged:1.0.0" in line and "index does not describe the shard"
             in line and name in line for line in said), said


def test_a_build_runs_frozen_from_its_name_lookup_on_and_thaws_after(tmp_path, monkeypatch):
  """As a class-folders build (tests/class_folders/test_named_build.py): from the name's
  lookup, which imports TFDS's builders, objects are frozen and young collections batched
  (parallel_map.frozen_gc); after, the collector is as before."""
  import gc
  from imagesets.building import parallel_map
  seen = []
  check = named_versions.check_name
  monkeypatch.setattr(named_versions, "check_name", lambda *args, **kwargs: seen.append(
      (gc.get_freeze_count() > 0, gc.get_threshold()[0])) or check(*args, **kwargs))
  _photo(tmp_path / "images" / "a.jpg")
  (tmp_path / "coco.json").write_text(json.dumps(_coco(
      [{"id": 1, "file_name": "a.jpg", "width": 90, "height": 60}],
      [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20]}])))
  before = gc.get_threshold()
  annotated_build.build(tmp_path / "images", tmp_path / "coco.json", "frozen_parts",
                        data_dir=tmp_path / "tfds", check_registered=False,
                        options=annotated_builder.AnnotatedConfig(
                            name="frozen_parts", split_proportions={"train": 1.0}))
  assert seen == [(True, parallel_map.YOUNG_COLLECTION)]
  assert gc.get_freeze_count() == 0 and gc.get_threshold() == before


def test_the_name_is_looked_up_among_tfds_builders_by_its_first_build_only(tmp_path,
                                                                           monkeypatch):
  # (recorded beside the versions once a build succeeded: tests/building/test_named_versions.py)
  looked = tfds_names.count_lookups(monkeypatch)
  _photo(tmp_path / "images" / "a.jpg")
  coco = tmp_path / "coco.json"
  coco.write_text(json.dumps(_coco(
      [{"id": 1, "file_name": "a.jpg", "width": 90, "height": 60}],
      [{"id": 1, "image_id": 1, "category_id": 9, "bbox": [10, 10, 20, 20]}])))  # (no class 9)
  options = annotated_builder.AnnotatedConfig(name="looked_parts",
                                              split_proportions={"train": 1.0})
  build = lambda version: annotated_build.build(
      tmp_path / "images", coco, "looked_parts", version=version, data_dir=tmp_path / "tfds",
      options=options, from_version=incremental.LATEST)
  with pytest.raises(problems.InvalidSourceError):
    build("1.0.0")
  assert looked == ["looked_parts"] and not (tmp_path / "tfds" / "looked_parts").exists()
  coco.write_text(json.dumps(_coco(
      [{"id": 1, "file_name": "a.jpg", "width": 90, "height": 60}],
      [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20]}])))
  build("1.0.0")
  build("1.1.0")
  assert looked == ["looked_parts"] * 2  # (the failed build's, the first build's)
