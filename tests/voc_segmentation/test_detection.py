"""voc_segmentation/detection: VOC2012's boxes (Annotations/*.xml, ImageSets/Main) as TFDS's
voc/2012 stores them, built from VOC-shaped trees and tars made here."""

import pathlib
import re
from xml.etree import ElementTree

import numpy as np
import pytest
import tensorflow_datasets as tfds

import imagesets  # noqa: F401
from conftest import registered as registered_files
from imagesets import registry
from imagesets.building import problems
from imagesets.voc_segmentation import voc_boxes
from imagesets.voc_segmentation import voc_pairs
from imagesets.voc_segmentation import voc_segmentation_dataset_builder as voc
from imagesets.voc_segmentation import voc_source
from imagesets_testing import fake_voc

NUM_TRAIN, NUM_VAL, NUM_UNLABELLED = 6, 5, 3
# tensorflow_datasets/object_detection/voc.py's _VOC_LABELS and _VOC_POSES, in its order.
TFDS_LABELS = ["aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair",
               "cow", "diningtable", "dog", "horse", "motorbike", "person", "pottedplant",
               "sheep", "sofa", "train", "tvmonitor"]
TFDS_POSES = ["frontal", "rear", "left", "right", "unspecified"]


def _build(data_dir, manual_dir):
  builder = voc.Builder(config="detection", data_dir=data_dir)
  builder.download_and_prepare(
      download_config=tfds.download.DownloadConfig(manual_dir=str(manual_dir)))
  return builder


def _main_list(folder, name):
  return (folder / voc_boxes.LISTS_DIR / name).read_text().split()


def _expected(folder, image_id):
  """What TFDS's voc.py makes of Annotations/<id>.xml (read here with the stdlib parser:
  these files are the test's own)."""
  root = ElementTree.parse(folder / voc_boxes.ANNOTATIONS_DIR / f"{image_id}.xml").getroot()
  width, height = (float(root.find(f"size/{key}").text) for key in ("width", "height"))
  objects = []
  for obj in root.findall("object"):
    box = {key: float(obj.find(f"bndbox/{key}").text) for key in ("xmin", "ymin", "xmax", "ymax")}
    objects.append({
        "bbox": [box["ymin"] / height, box["xmin"] / width, box["ymax"] / height,
                 box["xmax"] / width],
        "label": TFDS_LABELS.index(obj.find("name").text.lower()),
        "pose": TFDS_POSES.index(obj.find("pose").text.lower()),
        "is_truncated": obj.find("truncated").text == "1",
        "is_difficult": obj.find("difficult").text == "1"})
  return objects


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
  root = tmp_path_factory.mktemp("voc_tree")
  return root, fake_voc.write_tree(root, num_train=NUM_TRAIN, num_val=NUM_VAL,
                                   num_unlabelled=NUM_UNLABELLED)


@pytest.fixture(scope="module")
def built(tree, tmp_path_factory):
  root, _ = tree
  return _build(tmp_path_factory.mktemp("tfds"), root)


def test_every_box_label_pose_and_flag_is_stored(tree, built):
  _, folder = tree
  seen, num_objects, counts = set(), 0, {"difficult": 0, "truncated": 0, "fewer": 0}
  for split in ("train", "validation"):
    raw = built.as_dataset(split=split, decoders={"image": tfds.decode.SkipDecoding()})
    for example in tfds.as_numpy(raw):
      image_id = example["image_id"].decode()
      assert example["image/filename"].decode() == f"{image_id}.jpg"
      assert example["image"] == (folder / voc_pairs.JPEG_DIR / f"{image_id}.jpg").read_bytes()
      expected, stored = _expected(folder, image_id), example["objects"]
      assert len(expected) >= 1 and len(stored["label"]) == len(expected)
      np.testing.assert_allclose(stored["bbox"], [o["bbox"] for o in expected], rtol=0, atol=1e-6)
      for key in ("label", "pose", "is_truncated", "is_difficult"):
        assert stored[key].tolist() == [o[key] for o in expected], (image_id, key)
      assert example["labels"].tolist() == sorted({o["label"] for o in expected})
      assert example["labels_no_difficult"].tolist() == sorted(
          {o["label"] for o in expected if not o["is_difficult"]})
      num_objects += len(expected)
      counts["difficult"] += sum(o["is_difficult"] for o in expected)
      counts["truncated"] += sum(o["is_truncated"] for o in expected)
      counts["fewer"] += len(example["labels_no_difficult"]) < len(example["labels"])
      seen.add(image_id)
  assert len(seen) == NUM_TRAIN + NUM_VAL + NUM_UNLABELLED
  assert all(counts.values()), counts  # the tree exercises every flag and both label lists
  assert built.info.metadata["num_objects"] == num_objects
  assert built.info.metadata["max_objects_per_image"] == max(
      len(_expected(folder, i)) for i in seen)


def test_splits_are_imagesets_main_with_the_images_without_masks(tree, built):
  _, folder = tree
  ids = {split: sorted(e["image_id"].decode() for e in tfds.as_numpy(built.as_dataset(split=split)))
         for split in ("train", "validation")}
  assert ids == {"train": _main_list(folder, "train.txt"),
                 "validation": _main_list(folder, "val.txt")}
  assert len(ids["train"]) == NUM_TRAIN + 2 and len(ids["validation"]) == NUM_VAL + 1
  segmentation = set(_main_list(folder, "trainval.txt")) - set(
      (folder / voc_pairs.LISTS_DIR / "trainval.txt").read_text().split())
  assert len(segmentation) == NUM_UNLABELLED  # images without masks are examples here
  assert set(built.info.splits.keys()) == {"train", "validation"}
  assert built.info.full_name == f"voc_segmentation/detection/{voc.Builder.VERSION}"


def test_features_are_tfds_voc_s_plus_the_image_id(built):
  features = voc.Builder(config="detection", data_dir=built.data_dir_root).info.features
  assert set(features.keys()) == {"image", "image/filename", "image_id", "objects", "labels",
                                  "labels_no_difficult"}
  objects = features["objects"].feature
  assert set(objects.keys()) == {"bbox", "label", "pose", "is_truncated", "is_difficult"}
  assert isinstance(objects["bbox"], tfds.features.BBoxFeature)
  assert objects["label"].names == TFDS_LABELS == list(voc_pairs.CLASS_NAMES[1:])
  assert objects["pose"].names == TFDS_POSES
  assert objects["is_truncated"].dtype == objects["is_difficult"].dtype == np.bool_
  for key in ("labels", "labels_no_difficult"):
    assert features[key].feature.names == TFDS_LABELS
  assert features["image"].encoding_format == "jpeg"


def test_verify_says_it_has_no_round_trip_for_detection_yet(tree, built):
  from imagesets.verifying import round_trip  # pylint: disable=import-outside-toplevel
  root, _ = tree
  assert "Annotations" in registry.no_round_trip("voc_segmentation", "detection")
  with pytest.raises(ValueError, match=rf"^voc_segmentation/detection/{voc.Builder.VERSION}: no "
                                       "round trip for this config yet \\(its examples are boxes"):
    round_trip.verify(built.data_path, root)


def test_the_detection_pipelines_read_it_with_its_max_objects(built):
  from imagesets.reading import input_pipeline  # pylint: disable=import-outside-toplevel
  stored = list(tfds.as_numpy(built.as_dataset(split="validation")))
  batch = next(iter(input_pipeline.detection_eval(
      "voc_segmentation/detection", split="validation", data_dir=str(built.data_dir_root),
      batch_size=len(stored), image_size=32)))
  most = built.info.metadata["max_objects_per_image"]
  assert batch["bounding_boxes"]["boxes"].shape == (len(stored), most, 4)
  assert batch["bounding_boxes"]["labels"].numpy().tolist() == [
      e["objects"]["label"].tolist() + [-1] * (most - len(e["objects"]["label"])) for e in stored]


def test_normalised_exactly_as_tfds_voc_with_names_and_poses_lower_cased(tmp_path):
  folder = tmp_path / "VOC2012"
  (folder / voc_pairs.JPEG_DIR).mkdir(parents=True)
  (folder / voc_boxes.ANNOTATIONS_DIR).mkdir()
  fake_voc.PIL.Image.new("RGB", (500, 375)).save(folder / voc_pairs.JPEG_DIR / "a.jpg")
  objects = [
      {"name": "Person", "pose": "Left", "truncated": 1, "difficult": 0,
       "bndbox": {"xmin": 1, "ymin": 2, "xmax": 500, "ymax": 375}},
      {"name": "dog", "pose": "Frontal", "truncated": 0, "difficult": 1,
       "bndbox": {"xmin": 120.5, "ymin": 33, "xmax": 121, "ymax": 34}}]
  (folder / voc_boxes.ANNOTATIONS_DIR / "a.xml").write_text(
      fake_voc.annotation_xml("a", (375, 500), objects))
  assert "<part>" in (folder / voc_boxes.ANNOTATIONS_DIR / "a.xml").read_text()  # a head box
  example, found = voc_boxes.load_example("a", folder)
  assert found == []
  assert len(example["objects"]["label"]) == 2  # person parts are not objects, as in TFDS
  np.testing.assert_array_equal(example["objects"]["bbox"], [
      [2 / 375, 1 / 500, 1.0, 1.0], [33 / 375, 120.5 / 500, 34 / 375, 121 / 500]])
  assert example["objects"]["label"] == [14, 11]
  assert example["objects"]["pose"] == [TFDS_POSES.index("left"), TFDS_POSES.index("frontal")]
  assert example["objects"]["is_truncated"] == [True, False]
  assert example["objects"]["is_difficult"] == [False, True]
  assert (example["labels"], example["labels_no_difficult"]) == ([11, 14], [14])
  # An image without objects (none in VOC's Main lists, allowed as in TFDS) encodes too.
  (folder / voc_boxes.ANNOTATIONS_DIR / "a.xml").write_text(fake_voc.annotation_xml("a", (375, 500), []))
  empty, found = voc_boxes.load_example("a", folder)
  assert found == [] and empty["objects"]["bbox"].shape == (0, 4) and empty["labels"] == []
  encoded = voc.Builder(config="detection", data_dir=tmp_path / "tfds").info.features.encode_example(empty)
  assert encoded["objects"]["label"].shape == (0,)


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<annotation><filename>&lol9;</filename></annotation>
"""
EXTERNAL_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE annotation [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<annotation><filename>&secret;</filename></annotation>
"""


def _set_first(folder, image_id, tag, value):
  """Annotations/<id>.xml with the text of its first <tag> replaced by `value`."""
  path = folder / voc_boxes.ANNOTATIONS_DIR / f"{image_id}.xml"
  text, count = re.subn(rf"<{tag}>[^<]*</{tag}>", f"<{tag}>{value}</{tag}>", path.read_text(),
                        count=1)
  assert count == 1, (image_id, tag)
  path.write_text(text)


def test_hostile_and_bad_xml_in_the_archive_are_each_named_in_one_error(tmp_path, monkeypatch):
  root = tmp_path / "src"
  folder = fake_voc.write_tree(root, num_train=NUM_TRAIN, num_val=NUM_VAL, num_unlabelled=0)
  ids = _main_list(folder, "train.txt") + _main_list(folder, "val.txt")
  xml = folder / voc_boxes.ANNOTATIONS_DIR
  (xml / f"{ids[0]}.xml").write_text(BILLION_LAUGHS)
  (xml / f"{ids[1]}.xml").write_text(EXTERNAL_ENTITY)
  (xml / f"{ids[2]}.xml").write_text("<annotation><size></annotation>")
  (xml / f"{ids[3]}.xml").unlink()
  _set_first(folder, ids[4], "name", "unicorn")
  _set_first(folder, ids[5], "xmax", "999")
  _set_first(folder, ids[6], "width", "7")
  _set_first(folder, ids[7], "truncated", "yes")
  (folder / voc_pairs.JPEG_DIR / f"{ids[8]}.jpg").unlink()
  with (folder / voc_boxes.LISTS_DIR / "val.txt").open("a") as listing:
    listing.write(f"{ids[9]}\n")  # already in train.txt or val.txt
  manual = tmp_path / "manual"
  manual.mkdir()
  tar = fake_voc.write_tar(root, manual / voc_source.TAR_NAME)
  monkeypatch.setattr(voc.Builder, "url_infos", registered_files(tar))  # the test tar as VOC's
  with pytest.raises(problems.InvalidSourceError) as caught:
    _build(tmp_path / "tfds", manual)
  expected = [
      (0, "Annotations/{}.xml line 2: a DOCTYPE or ENTITY declaration, refused"),
      (1, "Annotations/{}.xml line 2: a DOCTYPE or ENTITY declaration, refused"),
      (2, "Annotations/{}.xml line 1 column 21: malformed XML (mismatched tag)"),
      (3, "Annotations/{}.xml is missing"),
      (4, "Annotations/{}.xml: object 1: <name> 'unicorn' is not one of VOC's 20 classes"),
      (5, "Annotations/{}.xml: object 1: box outside the image: x "),
      (6, "Annotations/{}.xml: <size> is 7x"),
      (7, "Annotations/{}.xml: object 1: <truncated> 'yes' is not 0 or 1"),
      (8, "JPEGImages/{}.jpg is missing"),
      (9, "listed 2 times"),
  ]
  found = caught.value.problems
  for index, reason in expected:
    assert any(p.where == ids[index] and p.reason.startswith(reason.format(ids[index]))
               for p in found), (ids[index], reason, found)
  assert len({p.where for p in found}) == len(expected), found
  message = str(caught.value)
  assert "lollol" not in message and "root:" not in message  # nothing was expanded
  assert str(tmp_path) not in message.split("\n", 1)[1].rsplit("\nFix:", 1)[0]  # relative names
  assert "Fix: every id listed in ImageSets/Main/train.txt and val.txt needs" in message
  assert not list((tmp_path / "tfds").glob("voc_segmentation/detection/*/*.tfrecord*"))


class DetectionDummyDataTest(tfds.testing.DatasetBuilderTestCase):
  DATASET_CLASS = voc.Builder
  BUILDER_CONFIG_NAMES_TO_TEST = ["detection"]
  SPLITS = {"train": 4, "validation": 3}


def test_the_dummy_data_has_the_detection_files():
  folder = pathlib.Path(voc.__file__).parent / "dummy_data" / voc_pairs.IN_ARCHIVE
  listed = _main_list(folder, "train.txt") + _main_list(folder, "val.txt")
  assert sorted(listed) == sorted(p.stem for p in (folder / voc_pairs.JPEG_DIR).glob("*.jpg"))
  assert all((folder / voc_boxes.ANNOTATIONS_DIR / f"{i}.xml").is_file() for i in listed)
