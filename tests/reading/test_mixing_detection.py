"""mixing of detection datasets (+ the tf.data and Grain detection pipelines on a mix): a
COCO build and a VOC XML build over real-photo crops, whose class ids list the same names
in other orders (COCO's by category id, VOC's sorted), read as one: every object keeps its
class by name and its box, each part's records once an epoch, in worker processes to the
end of the epoch, and a position resumes the rest."""

import collections
import hashlib

import numpy as np
import pytest

from imagesets.annotated import annotated_build
from imagesets.building import annotated_builder
from imagesets.reading import input_pipeline as ip
from imagesets.reading import mixed_records
from imagesets.reading import mixing
from imagesets_testing import annotation_files
from imagesets_testing import photo_datasets

# A window of the whole image every time: no window of area 1 has this aspect ratio, and
# both pipelines then fall back to the whole image, so every box is kept as stored.
WHOLE = dict(area_range=(1.0, 1.0), aspect_ratio_range=(100.0, 100.0), flip=False)


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
  """(data_dir, [(spec, {image digest: ((name, bbox), ...)})]: COCO (TFRecord), VOC
  (ArrayRecord)), every image in "train"."""
  data_dir = tmp_path_factory.mktemp("tfds")
  made = []
  for name, seed, count, fmt, file_format in (("coco_boxes", 5, 12, "coco", "tfrecord"),
                                              ("voc_boxes", 6, 9, "voc", "array_record")):
    known = annotation_files.write(tmp_path_factory.mktemp(name), seed=seed, count=count)
    builder = annotated_build.build(
        known.images_dir, getattr(known, fmt), name, data_dir=data_dir,
        check_registered=False, file_format=file_format,
        options=annotated_builder.AnnotatedConfig(name="given",
                                                  split_proportions={"train": 1.0}))
    truth = {hashlib.sha256((known.images_dir / file).read_bytes()).digest():
             tuple((o.name, o.bbox) for o in objects) for file, objects in known.objects.items()}
    made.append((f"{name}:{builder.version}", truth))
  return str(data_dir), made


def _mix(parts, **kwargs):
  data_dir, made = parts
  return mixing.mix([mixing.Part(spec, data_dir) for spec, _ in made], **kwargs)


def _unmatched(examples, parts, epochs=1):
  """What of `examples` [(source, ((name, box), ...))] and of the parts' records (each
  `epochs` times) the other does not match: boxes to 1e-5, names and order exactly."""
  pool = [(k, objects) for k, (_, truth) in enumerate(parts[1]) for objects in truth.values()
          for _ in range(epochs)]
  left = []
  for source, objects in examples:
    match = next((i for i, (k, want) in enumerate(pool) if k == source and len(want) == len(objects)
                  and all(n == m and np.allclose(b, c, atol=1e-5)
                          for (n, b), (m, c) in zip(want, objects))), None)
    if match is None:
      left.append((source, objects))
    else:
      pool.pop(match)
  return left, pool


def test_the_class_ids_of_each_part_are_mapped_by_name(parts):
  mix = _mix(parts)
  assert mix.task == "detection"
  assert mix.classes == annotation_files.CLASS_NAMES   # the first part's (COCO id) order
  voc_order = sorted(annotation_files.CLASS_NAMES)
  assert mix.label_ids == ((0, 1, 2, 3, 4),
                           tuple(mix.classes.index(name) for name in voc_order))
  assert mix.label_ids[1] != mix.label_ids[0]   # the same names under other ids
  union = _mix(parts, labels="union")
  assert union.classes == tuple(voc_order)


@pytest.mark.parametrize("renamed", [False, True])
def test_records_hold_every_object_by_class_name_with_its_box(parts, renamed):
  data_dir, made = parts
  animals = {"cat": "animal", "dog": "animal"}
  mix = mixing.mix([mixing.Part(made[0][0], data_dir, label_map=animals if renamed else None),
                    mixing.Part(made[1][0], data_dir)], labels="union")
  examples = []
  for e in mixed_records.records(mix.run(), 0).take(mix.examples_per_epoch).as_numpy_iterator():
    boxes, labels = e["objects"]["bbox"], e["objects"]["label"]
    assert boxes.shape == (len(labels), 4) and boxes.dtype == np.float32
    examples.append((int(e["source"]), tuple((mix.classes[label], box)
                                             for label, box in zip(labels, boxes))))
  assert collections.Counter(s for s, _ in examples) == {0: 12, 1: 9}
  if renamed:   # part 0's cats and dogs are the mix's animals; part 1's keep their names
    assert "animal" in mix.classes
    examples = [(s, tuple((animals.get(n, n) if s == 0 else n, b) for n, b in objects))
                for s, objects in examples]
    truth = [{k: tuple((animals.get(n, n) if part == 0 else n, b) for n, b in objects)
              for k, objects in t.items()} for part, (_, t) in enumerate(made)]
    parts = (data_dir, [(spec, t) for (spec, _), t in zip(made, truth)])
  assert _unmatched(examples, parts) == ([], [])


def test_labels_are_mapped_by_part_minus_one_kept_and_an_unlisted_id_refused():
  import tensorflow as tf
  label_ids = ((2, 0), (1, 3, 0))   # part 0: 2 classes, part 1: 3
  assert mixing.mapped_labels(label_ids, 1, [2, -1, 0]).tolist() == [0, -1, 1]
  got = mixed_records.mapped_label_tensor(label_ids, tf.constant([0, 0, 1, 1], tf.int64),
                                          tf.constant([1, -1, 2, 0], tf.int64))
  assert got.numpy().tolist() == [0, -1, 0, 1]
  with pytest.raises(ValueError, match="^a record of part 0 has label 2, not one of its 2 "
                                       "class ids: its features do not describe its records$"):
    mixing.mapped_labels(label_ids, 0, [1, 2])
  with pytest.raises(tf.errors.InvalidArgumentError, match="a label its part's features do "
                                                           "not list"):
    mixed_records.mapped_label_tensor(label_ids, tf.constant([0], tf.int64),
                                      tf.constant([2], tf.int64))


def test_a_dataset_with_tags_beside_its_objects_is_a_detection_part():
  # TFDS's own voc holds "labels" (the image's tags) and "objects": it mixes by its objects.
  import tensorflow_datasets as tfds
  names = ["cat", "dog"]
  features = tfds.features.FeaturesDict({
      "image": tfds.features.Image(), "labels": tfds.features.Sequence(
          tfds.features.ClassLabel(names=names)),
      "objects": tfds.features.Sequence({"bbox": tfds.features.BBoxFeature(),
                                         "label": tfds.features.ClassLabel(names=names)})})

  class Source:
    class builder:
      class info:
        pass
  Source.builder.info.features = features
  part = mixing.Part("voc_like")
  assert mixing._task_and_names(part, Source, "image", "label") == ("detection", names)
  with pytest.raises(ValueError, match="^label_key='labels': voc_like.* is a detection dataset"):
    mixing._task_and_names(part, Source, "image", "labels")


def _keras_examples(batches, classes):
  out = []
  for b in batches:
    for source, boxes, labels in zip(b["source"], b["bounding_boxes"]["boxes"],
                                     b["bounding_boxes"]["labels"]):
      assert ((labels == -1) == (boxes == -1).all(-1)).all()
      out.append((int(source), tuple((classes[label], box)
                                     for label, box in zip(labels, boxes) if label != -1)))
  return out


def test_tf_data_training_keeps_the_classes_by_name_and_resumes(parts):
  import tensorflow as tf
  mix = _mix(parts, labels="union")

  def train(**more):
    return ip.detection_train(mix, batch_size=4, image_size=16, num_epochs=2,
                              drop_remainder=False, **WHOLE, **more)
  batches = [tf.nest.map_structure(np.asarray, b) for b in train()]
  assert batches[0]["images"].shape[1:] == (16, 16, 3)
  assert batches[0]["bounding_boxes"]["boxes"].shape[1:] == (
      max(len(o) for _, truth in parts[1] for o in truth.values()), 4)
  assert _unmatched(_keras_examples(batches, mix.classes), parts, epochs=2) == ([], [])
  pipeline = train(with_position=True)
  taken = list(pipeline.dataset.take(3))
  rest = [tf.nest.map_structure(np.asarray, b)
          for b in train(start=mixing.position(pipeline, [3 * 4]))]
  assert len(taken) + len(rest) == len(batches)
  for a, b in zip(rest, batches[3:]):
    np.testing.assert_array_equal(a["images"], b["images"])
    np.testing.assert_array_equal(a["bounding_boxes"]["boxes"], b["bounding_boxes"]["boxes"])
    np.testing.assert_array_equal(a["bounding_boxes"]["labels"], b["bounding_boxes"]["labels"])


def test_one_detection_datasets_pipeline_has_no_position(parts):
  data_dir, made = parts
  with pytest.raises(ValueError, match="with_position=True.*a mix of one part"):
    ip.detection_train(made[0][0], data_dir=data_dir, batch_size=4, image_size=16,
                       with_position=True)


def test_grain_worker_processes_read_the_mix_to_the_end_with_the_classes_by_name(parts):
  from imagesets.reading import grain_pipeline as gp
  mix = _mix(parts, labels="union")
  loader = gp.detection_train(mix, batch_size=5, image_size=16, num_epochs=1, worker_count=2,
                              drop_remainder=False, seed=None, **WHOLE)
  examples = _keras_examples(list(loader), mix.classes)
  assert collections.Counter(s for s, _ in examples) == {0: 12, 1: 9}
  assert _unmatched(examples, parts) == ([], [])
  # In this process, a position taken after 2 batches resumes the rest.
  def train(**more):
    return gp.detection_train(mix, batch_size=5, image_size=16, num_epochs=1,
                              drop_remainder=False, seed=None, **WHOLE, **more)
  loader = train()
  batches = list(loader)
  iterator = iter(loader)
  for _ in range(2):
    next(iterator)
  rest = list(train(start=gp.position(loader, iterator.get_state())))
  assert len(rest) == len(batches) - 2
  for a, b in zip(rest, batches[2:]):
    np.testing.assert_array_equal(a["images"], b["images"])
    np.testing.assert_array_equal(a["bounding_boxes"]["boxes"], b["bounding_boxes"]["boxes"])
    np.testing.assert_array_equal(a["source"], b["source"])


def test_a_mix_of_other_tasks_or_options_the_parts_decide_are_refused_in_one_line(parts):
  from imagesets.reading import grain_pipeline as gp
  data_dir, made = parts
  photo_datasets.build(data_dir, "pets", ["cat", "dog"], 8, seed=1, size=(32, 24))
  with pytest.raises(ValueError) as error:
    mixing.mix([mixing.Part(made[0][0], data_dir), mixing.Part("pets:1.0.0", data_dir)])
  assert str(error.value) == (f"{made[0][0]}[train] is a detection dataset and "
                              "pets:1.0.0[train] a classification one: the parts of a mix "
                              "share one task")
  detection, classification = _mix(parts), mixing.mix([mixing.Part("pets:1.0.0", data_dir)])
  for pipeline in (ip, gp):
    with pytest.raises(ValueError, match="^the mix's parts are detection datasets: read it "
                                         "with detection_train$"):
      pipeline.classification_train(detection, batch_size=2)
    with pytest.raises(ValueError, match="^the mix's parts are classification datasets: read "
                                         "it with classification_train$"):
      pipeline.detection_train(classification, batch_size=2)
    with pytest.raises(ValueError, match=r"^split='train' with a mix: the parts give"):
      pipeline.detection_train(detection, batch_size=2, split="train")
    with pytest.raises(ValueError, match=r"^a mix is for training; evaluate each part .*"
                                         r"\(detection_eval\(part.dataset"):
      pipeline.detection_eval(detection, batch_size=2)
  with pytest.raises(ValueError, match="^shuffle_buffer=7 with a mix"):
    ip.detection_train(detection, batch_size=2, shuffle_buffer=7)
  with pytest.raises(ValueError, match="^start= resumes a mixed pipeline"):
    ip.detection_train(made[0][0], data_dir=data_dir, batch_size=2, start={"a": 1})
