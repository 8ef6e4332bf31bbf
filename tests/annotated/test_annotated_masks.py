"""Builds with masks over real-photo crops: a COCO file with segmentation stores class and
object masks equal, pixel for pixel, to what pycocotools' COCO API draws from the file;
mask folders (palette + classes.txt, CVAT RGB + labelmap.txt) store their class ids;
`verify` agrees and names a changed pixel; bad masks are bad items naming them; the
segmentation pipeline reads such a build as it reads voc_segmentation."""

import json
import pathlib
import shutil

import numpy as np
import PIL.Image
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from imagesets.annotated import annotated_build
from imagesets.building import annotated_builder
from imagesets.building import problems
from imagesets.reading import input_pipeline as ip
from imagesets.verifying import round_trip
from imagesets_testing import annotation_files

SPLITS = {"train": 0.6, "test": 0.4}
BASE_KEYS = {"image", "file_name", "height", "width", "channels", "format"}


@pytest.fixture(scope="module")
def known(tmp_path_factory):
  return annotation_files.write(tmp_path_factory.mktemp("labelled"), seed=3, count=14)


@pytest.fixture(scope="module")
def sources(known) -> dict[str, pathlib.Path]:
  """{build: its annotations}: COCO with polygons and uncompressed RLE, the same as
  compressed RLE strings, a palette-mask folder, CVAT's RGB export."""
  compressed = known.root / "coco" / "compressed.json"
  compressed.write_text(json.dumps(annotation_files.compressed_coco(
      json.loads(known.coco.read_text()))))
  return {"coco": known.coco, "coco_rle": compressed, "masks": known.masks,
          "cvat": known.masks_cvat}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return tmp_path_factory.mktemp("tfds")


@pytest.fixture(scope="module")
def built(known, sources, data_dir) -> dict:
  return {name: annotated_build.build(
      known.images_dir, path, f"seg_{name}", data_dir=data_dir, check_registered=False,
      options=annotated_builder.AnnotatedConfig(name="given", split_proportions=SPLITS))
          for name, path in sources.items()}


def _stored(builder) -> dict[str, dict]:
  """{file name: example} of every split, read by stock TFDS from the version's folder."""
  reader = tfds.builder_from_directory(builder.data_dir)
  return {example["file_name"].decode(): example for split in reader.info.splits
          for example in tfds.as_numpy(reader.as_dataset(split=split, shuffle_files=False))}


@pytest.mark.parametrize("name", ["coco", "coco_rle"])
def test_coco_masks_are_what_pycocotools_draws_from_the_file(built, known, sources, name):
  builder = built[name]
  features = builder.info.features
  assert set(features.keys()) == BASE_KEYS | {"objects", "class_mask", "object_mask"}
  for key in ("class_mask", "object_mask"):
    assert features[key].shape == (None, None, 1) and features[key].encoding_format == "png"
  metadata = builder.info.metadata
  assert metadata["mask_class_names"] == ["background", *annotation_files.CLASS_NAMES]
  assert metadata["void_value"] == 255 and metadata["mask_source"] == "objects"
  assert builder.info.supervised_keys is None   # boxes too: as TFDS's coco
  stored = _stored(builder)
  assert sorted(stored) == known.images
  seen = set()
  for file_name, example in stored.items():
    want_class, want_object = annotation_files.coco_reference_masks(sources[name], file_name)
    assert example["class_mask"].shape == (*known.sizes[file_name], 1), file_name
    np.testing.assert_array_equal(example["class_mask"][..., 0], want_class, err_msg=file_name)
    np.testing.assert_array_equal(example["object_mask"][..., 0], want_object,
                                  err_msg=file_name)
    seen.update(np.unique(want_class).tolist())
  assert seen == {0, 1, 2, 3, 4, 5, 255}   # every class, background and crowd void


@pytest.mark.parametrize("name", ["masks", "cvat"])
def test_mask_folder_builds_store_each_masks_class_ids(built, known, name):
  builder = built[name]
  assert set(builder.info.features.keys()) == BASE_KEYS | {"class_mask"}
  assert builder.info.supervised_keys == ("image", "class_mask")
  metadata = builder.info.metadata
  assert metadata["task"] == "segmentation" and metadata["annotation_format"] == "masks"
  assert metadata["mask_class_names"] == list(annotation_files.MASK_CLASS_NAMES)
  assert "num_negatives" not in metadata
  for file_name, example in _stored(builder).items():
    np.testing.assert_array_equal(example["class_mask"][..., 0],
                                  known.class_mask(file_name, crowd_void=name == "masks"),
                                  err_msg=file_name)
  image, mask = next(iter(tfds.as_numpy(tfds.builder_from_directory(builder.data_dir)
                                        .as_dataset(split="train", as_supervised=True))))
  assert image.shape[:2] == mask.shape[:2] and mask.shape[2] == 1


def test_verify_passes_and_names_a_changed_mask_pixel(built, known, tmp_path):
  for name in ("coco_rle", "masks"):
    report = round_trip.verify(built[name].data_dir, known.images_dir)
    assert report.ok, report.lines()
    assert report.checked == report.identical == len(known.images)
  folder = tmp_path / "masks"
  shutil.copytree(known.masks, folder)
  file_name = known.images[4]
  mask_path = folder / f"{file_name.rsplit('.', 1)[0]}.png"
  with PIL.Image.open(mask_path) as image:
    ids, palette = np.array(image), image.getpalette()
  ids[5, 9] = 3 if ids[5, 9] != 3 else 4    # one pixel, another class
  changed = PIL.Image.fromarray(ids)
  changed.putpalette(palette)
  changed.save(mask_path)
  report = round_trip.verify(built["masks"].data_dir, known.images_dir, folder)
  assert [(p.where, p.reason) for p in report.mismatches] == [
      (file_name, f"class_mask: 1 pixel(s) differ from the annotations' (first at x 9, y 5: "
                  f"stored {known.class_mask(file_name)[5, 9]}, the annotations give "
                  f"{ids[5, 9]})")]
  # COCO: one polygon moved by 2 pixels changes that image's class and object masks only.
  document = json.loads(known.coco.read_text())
  (moved,) = [a for a in document["annotations"] if not a["iscrowd"]][:1]
  moved["segmentation"] = [[v + 2 for v in polygon] for polygon in moved["segmentation"]]
  edited = tmp_path / "edited.json"
  edited.write_text(json.dumps(document))
  report = round_trip.verify(built["coco"].data_dir, known.images_dir, edited)
  (image,) = [i["file_name"] for i in document["images"] if i["id"] == moved["image_id"]]
  assert {p.where for p in report.mismatches} == {image}, report.lines()
  assert sorted(p.reason.split(":")[0] for p in report.mismatches) == [
      "class_mask", "object_mask"]


def test_masks_of_the_wrong_size_or_values_are_bad_items_naming_them(known, tmp_path):
  folder = tmp_path / "masks"
  shutil.copytree(known.masks, folder)
  small, odd = known.images[2], known.images[6]
  height, width = known.sizes[small]
  stem = lambda name: folder / f"{name.rsplit('.', 1)[0]}.png"
  PIL.Image.fromarray(known.class_mask(small)[:height - 1]).save(stem(small))
  spoiled = known.class_mask(odd)
  spoiled[0, 0] = 17
  PIL.Image.fromarray(spoiled).save(stem(odd))
  build = lambda name, **options: annotated_build.build(
      known.images_dir, folder, name, data_dir=tmp_path / "tfds", check_registered=False,
      options=annotated_builder.AnnotatedConfig(name="given", split_proportions=SPLITS,
                                                **options))
  with pytest.raises(problems.InvalidSourceError) as stopped:
    build("bad_masks")
  assert [p.where for p in stopped.value.problems] == sorted([small, odd])
  reasons = {p.where: p.reason for p in stopped.value.problems}
  assert reasons[small] == (f"mask {stem(small)} is {width}x{height - 1} (width x height), the "
                            f"image is {width}x{height} upright: export the mask for this image")
  assert "value(s) 17 are neither class ids of classes.txt (0-5) nor 255" in reasons[odd]
  builder = build("bad_masks_skipped", skip_bad_files=True)
  assert sorted(builder.info.metadata["skipped_files"]) == sorted([small, odd])
  assert sum(s.num_examples for s in builder.info.splits.values()) == len(known.images) - 2


def test_masks_follow_an_image_stored_smaller(known, tmp_path):
  builder = annotated_build.build(
      known.images_dir, known.masks, "small_masks", data_dir=tmp_path, check_registered=False,
      options=annotated_builder.AnnotatedConfig(name="given", split_proportions=SPLITS,
                                                image_size=40))
  resized = 0
  for file_name, example in _stored(builder).items():
    height, width = example["image"].shape[:2]
    mask = known.class_mask(file_name)
    want = np.asarray(PIL.Image.fromarray(mask).resize((width, height), PIL.Image.NEAREST))
    np.testing.assert_array_equal(example["class_mask"][..., 0], want, err_msg=file_name)
    resized += mask.shape != want.shape
  assert resized
  report = round_trip.verify(builder.data_dir, known.images_dir)
  assert report.ok and report.reconverted == resized, report.lines()


@pytest.mark.parametrize("name", ["cvat", "coco"])
def test_the_segmentation_pipeline_reads_a_build_as_it_reads_voc(built, known, data_dir,
                                                                  name):
  stored = [e for e in tfds.as_numpy(tfds.builder_from_directory(built[name].data_dir)
                                     .as_dataset(split="train", shuffle_files=False))]
  crop = (max(e["height"] for e in stored), max(e["width"] for e in stored))
  ds = ip.segmentation_train(f"seg_{name}", data_dir=str(data_dir), batch_size=2,
                             crop_size=crop, mode="resize_with_crop_or_pad", flip=False,
                             seed=0, num_epochs=1)
  assert ds.element_spec["mask"].shape == (2, *crop, 1)
  # The crop holds every image: each mask comes out whole, padded with 255. Its classes
  # (pixel counts per class id) are those of one stored example of the split.
  def classes(mask):
    return tuple(np.bincount(mask[mask != 255].ravel(), minlength=256).tolist())
  expected = [classes(e["class_mask"]) for e in stored]
  batches = [tf.nest.map_structure(np.asarray, b) for b in ds]
  assert sum(len(b["mask"]) for b in batches) == len(stored) // 2 * 2
  for batch in batches:
    assert batch["mask"].dtype == np.uint8 and batch["image"].shape == (2, *crop, 3)
    for mask in batch["mask"]:
      assert classes(mask) in expected
      expected.remove(classes(mask))
      assert set(np.unique(mask)) <= set(range(len(annotation_files.MASK_CLASS_NAMES))) | {255}
