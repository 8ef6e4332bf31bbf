"""input_pipeline's detection pipelines on a build from a COCO file over real-photo crops:
keras 3's box dict, the stored boxes through eval exactly, training boxes that follow the
crop and flip, and batches that go straight into keras' box-aware layers and `fit`."""

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from imagesets.annotated import annotated_build
from imagesets.building import annotated_builder
from imagesets.reading import input_pipeline as ip
from imagesets_testing import annotation_files

SIZE = 64


@pytest.fixture(scope="module")
def detection(tmp_path_factory):
  """(data_dir, the stored examples by file name) of a COCO build, train and test."""
  known = annotation_files.write(tmp_path_factory.mktemp("labelled"), seed=5, count=16)
  data_dir = tmp_path_factory.mktemp("tfds")
  builder = annotated_build.build(
      known.images_dir, known.coco, "boxes", data_dir=data_dir, check_registered=False,
      options=annotated_builder.AnnotatedConfig(name="given", split_proportions={
          "train": 0.5, "test": 0.5}))
  stored = {split: list(tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)))
            for split in ("train", "test")}
  return str(data_dir), builder, stored


def _batches(ds) -> list:
  return [tf.nest.map_structure(np.asarray, batch) for batch in ds]


@pytest.mark.parametrize("bounding_box_format", ["rel_yxyx", "xyxy"])
def test_eval_gives_each_stored_box_in_keras_layout_padded_with_minus_one(
    detection, bounding_box_format):
  data_dir, builder, stored = detection
  most = builder.info.metadata["max_objects_per_image"]
  batches = _batches(ip.detection_eval("boxes", data_dir=data_dir, batch_size=3,
                                       image_size=SIZE,
                                       bounding_box_format=bounding_box_format))
  images = np.concatenate([b["images"] for b in batches])
  boxes = np.concatenate([b["bounding_boxes"]["boxes"] for b in batches])
  labels = np.concatenate([b["bounding_boxes"]["labels"] for b in batches])
  assert images.shape == (len(stored["test"]), SIZE, SIZE, 3) and images.dtype == np.uint8
  assert boxes.shape == (len(stored["test"]), most, 4) and labels.dtype == np.int32
  for example, got_boxes, got_labels in zip(stored["test"], boxes, labels):
    n = len(example["objects"]["label"])
    want = example["objects"]["bbox"]
    if bounding_box_format == "xyxy":
      want = want[:, [1, 0, 3, 2]] * SIZE
    np.testing.assert_allclose(got_boxes[:n], want, rtol=0, atol=1e-4)
    assert got_labels[:n].tolist() == example["objects"]["label"].tolist()
    assert (got_boxes[n:] == -1).all() and (got_labels[n:] == -1).all()


def test_training_boxes_follow_the_crop_and_flip_and_feed_keras(detection):
  data_dir, builder, stored = detection
  ds = ip.detection_train("boxes", data_dir=data_dir, batch_size=4, image_size=SIZE, seed=1,
                          num_epochs=3, min_visible=0.5)
  batches = _batches(ds)
  assert len(batches) == 3 * len(stored["train"]) // 4
  kept = total = 0
  for batch in batches:
    boxes, labels = batch["bounding_boxes"]["boxes"], batch["bounding_boxes"]["labels"]
    padding = labels == -1
    assert ((boxes == -1).all(-1) == padding).all()
    real = boxes[~padding]
    assert ((real >= 0) & (real <= 1)).all()
    assert (real[:, 0] <= real[:, 2]).all() and (real[:, 1] <= real[:, 3]).all()
    kept += int((~padding).sum())
  total = 3 * sum(len(e["objects"]["label"]) for e in stored["train"])
  assert 0 < kept <= total
  # The same seed gives the same batches (crops, flips and boxes).
  again = _batches(ip.detection_train("boxes", data_dir=data_dir, batch_size=4,
                                      image_size=SIZE, seed=1, num_epochs=3))
  for a, b in zip(batches, again):
    np.testing.assert_array_equal(a["bounding_boxes"]["boxes"], b["bounding_boxes"]["boxes"])
  # Straight into keras' box-aware layers and a model's fit.
  flip = keras.layers.RandomFlip("horizontal", bounding_box_format="rel_yxyx", seed=0)
  pairs = ds.take(2).map(lambda b: (b, flip({"images": tf.cast(b["images"], tf.float32),
                                             "bounding_boxes": dict(b["bounding_boxes"])})))
  for before, after in _batches(pairs):
    labels = before["bounding_boxes"]["labels"]
    assert (after["bounding_boxes"]["labels"] == labels).all()
    for boxes, moved, image, out, real in zip(
        before["bounding_boxes"]["boxes"], after["bounding_boxes"]["boxes"],
        before["images"], after["images"], labels != -1):
      mirrored = np.array_equal(out, image[:, ::-1].astype(np.float32))
      want = boxes[real][:, [0, 3, 2, 1]] * [1, -1, 1, -1] + [0, 1, 0, 1] if mirrored else (
          boxes[real])
      np.testing.assert_allclose(moved[real], want, atol=1e-5)
  inputs = keras.Input((SIZE, SIZE, 3))
  x = keras.layers.Rescaling(1 / 255)(inputs)
  x = keras.layers.Conv2D(4, 3, strides=4, activation="relu")(x)
  outputs = keras.layers.Dense(4)(keras.layers.GlobalAveragePooling2D()(x))
  model = keras.Model(inputs, outputs)
  model.compile("sgd", "mse")
  first_box = ds.map(lambda b: (b["images"], b["bounding_boxes"]["boxes"][:, 0]))
  history = model.fit(first_box, epochs=1, verbose=0)
  assert np.isfinite(history.history["loss"][0])


def test_a_dataset_without_boxes_is_refused_in_one_line(detection, tmp_path):
  data_dir, _, _ = detection
  known = annotation_files.write(tmp_path / "labelled", seed=2, count=8)
  annotated_build.build(known.images_dir, known.csv_single, "labels_only",
                        data_dir=data_dir, check_registered=False,
                        options=annotated_builder.AnnotatedConfig(
                            name="given", split_proportions={"train": 1.0}))
  with pytest.raises(ValueError, match=r"labels_only.* has no boxes"):
    ip.detection_train("labels_only", data_dir=data_dir, batch_size=2)
  with pytest.raises(ValueError, match=r"max_boxes=0: give a whole number"):
    ip.detection_eval("boxes", data_dir=data_dir, batch_size=2, max_boxes=0)



def test_a_multi_label_build_gives_multi_hot_labels(tmp_path):
  known = annotation_files.write(tmp_path / "labelled", seed=4, count=10)
  annotated_build.build(known.images_dir, known.csv_multi, "tags", data_dir=tmp_path / "tfds",
                        check_registered=False, options=annotated_builder.AnnotatedConfig(
                            name="given", split_proportions={"train": 0.5, "test": 0.5}))
  builder = tfds.builder_from_directory(tmp_path / "tfds" / "tags" / "1.0.0")
  stored = {e["file_name"].decode(): e["labels"] for e in tfds.as_numpy(
      builder.as_dataset(split="test", shuffle_files=False))}
  batches = _batches(ip.classification_eval("tags", data_dir=str(tmp_path / "tfds"),
                                            label_key="labels", batch_size=len(stored),
                                            image_size=SIZE))
  (batch,) = batches
  names = known.class_names("csv")
  assert batch["label"].shape == (len(stored), len(names)) and batch["label"].dtype == np.float32
  for row, labels in zip(batch["label"], stored.values()):  # (stored order)
    assert np.flatnonzero(row).tolist() == sorted(set(labels.tolist()))
  train = next(iter(ip.classification_train("tags", data_dir=str(tmp_path / "tfds"),
                                            label_key="labels", split="train", batch_size=2,
                                            image_size=SIZE, seed=0)))
  assert train["label"].shape == (2, len(names))
