"""grain_pipeline's detection loaders on an ArrayRecord build from a COCO file over real-photo
crops: keras 3's box dict, the stored boxes through evaluation exactly (and as the tf.data
pipeline gives them), training batches equal to a numpy reference computed from the stored
records with Grain's per-record generators, in worker processes to the end of the epochs."""

import grain.python as grain
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from imagesets.annotated import annotated_build
from imagesets.building import annotated_builder
from imagesets.reading import grain_pipeline as gp
from imagesets.reading import input_pipeline as ip
from imagesets.reading import numpy_box_ops
from imagesets.reading import numpy_ops
from imagesets_testing import annotation_files

SIZE = 48
SEED = 3


@pytest.fixture(scope="module")
def detection(tmp_path_factory):
  """(data_dir, builder, the stored examples of each split by index, image bytes encoded)."""
  known = annotation_files.write(tmp_path_factory.mktemp("labelled"), seed=5, count=16)
  data_dir = tmp_path_factory.mktemp("tfds")
  builder = annotated_build.build(
      known.images_dir, known.coco, "boxes", data_dir=data_dir, check_registered=False,
      file_format="array_record",
      options=annotated_builder.AnnotatedConfig(name="given", split_proportions={
          "train": 0.5, "test": 0.5}))
  stored = {}
  for split in ("train", "test"):
    source = builder.as_data_source(split, decoders={"image": tfds.decode.SkipDecoding()})
    stored[split] = [{"image": source[i]["image"],
                      "bbox": np.asarray(source[i]["objects"]["bbox"], np.float32).reshape(-1, 4),
                      "label": np.asarray(source[i]["objects"]["label"], np.int64)}
                     for i in range(len(source))]
  return str(data_dir), builder, stored


def _boxes(batches):
  return (np.concatenate([b["bounding_boxes"]["boxes"] for b in batches]),
          np.concatenate([b["bounding_boxes"]["labels"] for b in batches]))


@pytest.mark.parametrize("bounding_box_format,max_boxes", [("rel_yxyx", None), ("xyxy", None),
                                                           ("rel_yxyx", 2)])
def test_eval_gives_each_stored_box_in_keras_layout_padded_with_minus_one(
    detection, bounding_box_format, max_boxes):
  data_dir, builder, stored = detection
  most = builder.info.metadata["max_objects_per_image"]
  width = most if max_boxes is None else max_boxes
  batches = list(gp.detection_eval("boxes", data_dir=data_dir, batch_size=3, image_size=SIZE,
                                   bounding_box_format=bounding_box_format,
                                   max_boxes=max_boxes))
  assert len(batches) == -(-len(stored["test"]) // 3)   # the last one partial
  images = np.concatenate([b["images"] for b in batches])
  boxes, labels = _boxes(batches)
  assert images.shape == (len(stored["test"]), SIZE, SIZE, 3) and images.dtype == np.uint8
  assert boxes.shape == (len(stored["test"]), width, 4) and boxes.dtype == np.float32
  assert labels.shape == (len(stored["test"]), width) and labels.dtype == np.int32
  assert any(len(e["label"]) > 2 for e in stored["test"])   # max_boxes=2 cuts some
  assert any(len(e["label"]) == 0 for e in stored["test"])  # and an image without objects
  for example, got_image, got_boxes, got_labels in zip(stored["test"], images, boxes, labels):
    n = min(len(example["label"]), width)
    want = example["bbox"][:n]
    if bounding_box_format == "xyxy":
      want = want[:, [1, 0, 3, 2]] * SIZE
    np.testing.assert_allclose(got_boxes[:n], want, rtol=0, atol=1e-4)
    assert got_labels[:n].tolist() == example["label"][:n].tolist()
    assert (got_boxes[n:] == -1).all() and (got_labels[n:] == -1).all()
    np.testing.assert_array_equal(
        got_image, numpy_ops.resize(numpy_ops.decode(example["image"]), SIZE))


def test_eval_batches_are_the_tf_data_pipelines_in_both_modes(detection):
  data_dir, _, stored = detection
  boxes = {}
  for mode in ip.DETECTION_EVAL_MODES:
    kwargs = dict(data_dir=data_dir, batch_size=4, image_size=(SIZE, SIZE + 16), mode=mode,
                  bounding_box_format="xywh")
    grain_batches = list(gp.detection_eval("boxes", **kwargs))
    boxes[mode] = _boxes(grain_batches)[0]
    tf_batches = [tf.nest.map_structure(np.asarray, b)
                  for b in ip.detection_eval("boxes", **kwargs)]
    assert len(grain_batches) == len(tf_batches) == 2
    (grain_boxes, grain_labels), (tf_boxes, tf_labels) = _boxes(grain_batches), _boxes(tf_batches)
    assert grain_labels.tolist() == tf_labels.tolist()
    np.testing.assert_allclose(grain_boxes, tf_boxes, rtol=0, atol=1e-3)   # pixels of a frame
    grain_images = np.concatenate([b["images"] for b in grain_batches]).astype(np.float32)
    tf_images = np.concatenate([b["images"] for b in tf_batches]).astype(np.float32)
    assert grain_images.shape == tf_images.shape == (len(stored["test"]), SIZE, SIZE + 16, 3)
    assert np.abs(grain_images - tf_images).mean() < 4   # OpenCV vs TensorFlow bilinear
  # The letterbox moved the boxes (a wide frame: boxes squeezed in x), so the modes differ.
  assert not np.allclose(boxes["pad"], boxes["resize"])


def _reference(stored, *, batch_size, num_epochs, workers, seed, most, flip=True,
               min_visible=0.5):
  """The batches a loader should give, from the stored records with numpy_box_ops: grain's
  global shuffle of `seed` (IndexSampler), record i's generator Philox(seed + i); worker w of
  W takes the sampler's indices w, w + W, ... and batches them (the last partial batch
  dropped); the loader gives the workers' batches in turn."""
  sampler = grain.IndexSampler(num_records=len(stored), shuffle=True, seed=seed,
                               num_epochs=num_epochs, shard_options=grain.NoSharding())
  keys = [sampler[i].record_key for i in range(len(sampler))]
  for epoch in range(num_epochs):   # each epoch every record once, in a new order
    assert sorted(keys[epoch * len(stored):(epoch + 1) * len(stored)]) == list(range(len(stored)))
  W = max(1, workers)
  per_worker = [[indices[k:k + batch_size]
                 for k in range(0, len(indices) - batch_size + 1, batch_size)]
                for indices in (list(range(w, len(keys), W)) for w in range(W))]
  order = [per_worker[k % W][k // W] for k in range(sum(len(b) for b in per_worker))]
  batches = []
  for indices in order:
    examples = []
    for index in indices:
      example = stored[keys[index]]
      rng = np.random.Generator(np.random.Philox(key=seed + index))
      image, objects = numpy_box_ops.decode_and_random_crop(
          example["image"], {"bbox": example["bbox"], "label": example["label"]}, SIZE, rng,
          min_visible, ip.DETECTION_CROP_AREA_RANGE, numpy_ops.CROP_ASPECT_RATIO_RANGE)
      if flip:
        image, objects = numpy_box_ops.random_flip_left_right(image, objects, rng)
      examples.append(numpy_box_ops.to_keras(image, objects, most))
    batches.append({"images": np.stack([e["images"] for e in examples]),
                    "boxes": np.stack([e["bounding_boxes"]["boxes"] for e in examples]),
                    "labels": np.stack([e["bounding_boxes"]["labels"] for e in examples])})
  return batches


def _assert_batches_are(got, want):
  assert len(got) == len(want)
  for a, b in zip(got, want):
    np.testing.assert_array_equal(a["images"], b["images"])
    np.testing.assert_array_equal(a["bounding_boxes"]["boxes"], b["boxes"])
    np.testing.assert_array_equal(a["bounding_boxes"]["labels"], b["labels"])


def _check_training_batches(batches, most, batch_size):
  kept = 0
  for batch in batches:
    assert batch["images"].shape == (batch_size, SIZE, SIZE, 3)
    assert batch["images"].dtype == np.uint8
    boxes, labels = batch["bounding_boxes"]["boxes"], batch["bounding_boxes"]["labels"]
    assert boxes.shape == (batch_size, most, 4) and boxes.dtype == np.float32
    assert labels.shape == (batch_size, most) and labels.dtype == np.int32
    padding = labels == -1
    assert ((boxes == -1).all(-1) == padding).all()
    # the kept objects first, then padding
    assert (np.sort(padding, axis=1) == padding).all()
    real = boxes[~padding]
    assert ((real >= 0) & (real <= 1)).all()
    assert (real[:, 0] <= real[:, 2]).all() and (real[:, 1] <= real[:, 3]).all()
    kept += int((~padding).sum())
  return kept


def test_training_in_two_worker_processes_to_the_end_is_the_numpy_reference(detection):
  data_dir, builder, stored = detection
  most = builder.info.metadata["max_objects_per_image"]
  loader = gp.detection_train("boxes", data_dir=data_dir, batch_size=2, image_size=SIZE,
                              seed=SEED, num_epochs=2, worker_count=2)
  batches = list(loader)
  want = _reference(stored["train"], batch_size=2, num_epochs=2, workers=2, seed=SEED,
                    most=most)
  # 9 records, 2 epochs: 18 indices, 9 for each worker, 4 batches of 2 each.
  assert len(stored["train"]) == 9 and len(batches) == len(want) == 8
  kept = _check_training_batches(batches, most, 2)
  total = 2 * sum(len(e["label"]) for e in stored["train"])
  assert 0 < kept <= total
  _assert_batches_are(batches, want)
  # The reference can tell a flip and a crop: without the flip it is another.
  unflipped = _reference(stored["train"], batch_size=2, num_epochs=2, workers=2, seed=SEED,
                         most=most, flip=False)
  assert any(not np.array_equal(a["boxes"], b["boxes"]) for a, b in zip(want, unflipped))


def test_in_process_training_is_seeded_resumable_and_the_reference(detection):
  data_dir, builder, stored = detection
  most = builder.info.metadata["max_objects_per_image"]

  def loader(seed=SEED):
    return gp.detection_train("boxes", data_dir=data_dir, batch_size=2, image_size=SIZE,
                              seed=seed, num_epochs=2, bounding_box_format="rel_yxyx")
  batches = list(loader())
  assert len(batches) == 2 * len(stored["train"]) // 2
  _check_training_batches(batches, most, 2)
  _assert_batches_are(batches, _reference(stored["train"], batch_size=2, num_epochs=2,
                                          workers=0, seed=SEED, most=most))
  # The same seed gives the same batches; another seed other ones.
  again = list(loader())
  for a, b in zip(batches, again):
    np.testing.assert_array_equal(a["images"], b["images"])
    np.testing.assert_array_equal(a["bounding_boxes"]["boxes"], b["bounding_boxes"]["boxes"])
  other = list(loader(SEED + 1))
  assert not all(np.array_equal(a["bounding_boxes"]["boxes"], b["bounding_boxes"]["boxes"])
                 for a, b in zip(batches, other))
  # A saved state resumes at the next batch (Grain's set_state, a new loader).
  iterator = iter(loader())
  for _ in range(3):
    next(iterator)
  state = iterator.get_state()
  resumed = iter(loader())
  resumed.set_state(state)
  rest = list(resumed)
  assert len(rest) == len(batches) - 3
  for a, b in zip(rest, batches[3:]):
    np.testing.assert_array_equal(a["bounding_boxes"]["boxes"], b["bounding_boxes"]["boxes"])
    np.testing.assert_array_equal(a["images"], b["images"])


def test_a_dataset_without_boxes_is_refused_in_one_line(detection, tmp_path):
  data_dir, _, _ = detection
  known = annotation_files.write(tmp_path / "labelled", seed=2, count=8)
  annotated_build.build(known.images_dir, known.csv_single, "labels_only",
                        data_dir=data_dir, check_registered=False, file_format="array_record",
                        options=annotated_builder.AnnotatedConfig(
                            name="given", split_proportions={"train": 1.0}))
  for make in (gp.detection_train, gp.detection_eval):
    with pytest.raises(ValueError, match=r"labels_only.* has no boxes") as error:
      make("labels_only", data_dir=data_dir, batch_size=2, split="train")
    assert "\n" not in str(error.value)


def test_bad_options_are_refused_before_reading(detection):
  data_dir, _, stored = detection
  with pytest.raises(ValueError, match="mode must be one of"):
    gp.detection_eval("boxes", data_dir=data_dir, batch_size=2, mode="crop")
  with pytest.raises(ValueError, match="box format must be one of"):
    gp.detection_eval("boxes", data_dir=data_dir, batch_size=2, bounding_box_format="yx")
  with pytest.raises(ValueError, match=r"min_visible must be in \[0, 1\]"):
    gp.detection_train("boxes", data_dir=data_dir, batch_size=2, min_visible=1.5)
  with pytest.raises(ValueError, match="fewer than batch_size"):
    gp.detection_train("boxes", data_dir=data_dir, batch_size=len(stored["train"]) + 1,
                       num_epochs=1)


def _examples(batches) -> list[bytes]:
  """Each example of `batches` as bytes: its pixels, boxes and labels."""
  return [image.tobytes() + boxes.tobytes() + labels.tobytes() for b in batches
          for image, boxes, labels in zip(b["images"], b["bounding_boxes"]["boxes"],
                                          b["bounding_boxes"]["labels"])]


def test_a_bucket_is_streamed_with_the_same_boxes_and_resumes_from_a_position(
    detection, tmp_path):
  from imagesets.publishing import publish
  data_dir, builder, stored = detection
  spec = f"boxes:{builder.version}"
  url = f"file://{tmp_path}/bucket"
  publish.publish(spec, data_dir, url, progress=False)
  bucket = dict(data_dir=url, cache_dir=tmp_path / "cache")
  kwargs = dict(batch_size=3, image_size=SIZE, bounding_box_format="xyxy")
  local = list(gp.detection_eval("boxes", data_dir=data_dir, **kwargs))
  streamed = list(gp.detection_eval(spec, **bucket, **kwargs))
  assert len(streamed) == len(local) == 3
  for a, b in zip(streamed, local):
    np.testing.assert_array_equal(a["images"], b["images"])
    np.testing.assert_array_equal(a["bounding_boxes"]["boxes"], b["bounding_boxes"]["boxes"])
    np.testing.assert_array_equal(a["bounding_boxes"]["labels"], b["bounding_boxes"]["labels"])

  def train(**more):
    return gp.detection_train(spec, batch_size=2, image_size=SIZE, seed=SEED, num_epochs=2,
                              **bucket, **more)
  batches = list(train())
  assert len(batches) == 2 * len(stored["train"]) // 2
  most = builder.info.metadata["max_objects_per_image"]
  _check_training_batches(batches, most, 2)
  # Every epoch crops every stored record once: the labels kept are some of its labels.
  kept = np.concatenate([b["bounding_boxes"]["labels"].ravel() for b in batches])
  stored_labels = np.concatenate([e["label"] for e in stored["train"]])
  assert all((kept == label).sum() <= 2 * (stored_labels == label).sum()
             for label in set(kept.tolist()) - {-1})
  loader = train()
  iterator = iter(loader)
  for _ in range(3):
    next(iterator)
  position = gp.position(loader, iterator.get_state())
  rest = list(train(start=position))   # in this process: any worker count may resume
  assert len(rest) == len(batches) - 3
  # (a position promises the records not read, each once, with their crops: the order of
  # the resumed run's reads is its own)
  assert sorted(_examples(rest)) == sorted(_examples(batches[3:]))
