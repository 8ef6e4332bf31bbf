"""What an example holds, read from its features: every stage's one question."""

import numpy as np
import tensorflow_datasets as tfds

from imagesets.annotations import schema


def test_each_task_is_read_from_its_features_and_described():
  names = ["cat", "dog", "person"]
  classification = schema.of(tfds.features.FeaturesDict({
      "image": tfds.features.Image(), "label": tfds.features.ClassLabel(names=names)}))
  assert (classification.task, classification.key) == ("classification", "label")
  assert classification.describe(schema.annotation({"label": 1})) == "dog"
  assert classification.describe(schema.annotation({"label": "cat"})) == "cat"  # (class folders)
  tags = schema.of({"labels": tfds.features.Sequence(tfds.features.ClassLabel(names=names))})
  assert tags.task == "multi_label"
  assert tags.describe(schema.annotation({"labels": [2, 0, 2]})) == "cat+person"
  assert tags.describe(schema.annotation({"labels": []})) == "(no labels)"
  boxes = schema.of({"objects": tfds.features.Sequence({
      "bbox": tfds.features.BBoxFeature(), "label": tfds.features.ClassLabel(names=names)})})
  assert boxes.task == "detection"
  found = schema.annotation({"objects": {"bbox": [[0, 0, 1, 1]] * 3, "label": [2, 0, 2]}})
  assert found == [0, 2, 2] and boxes.describe(found) == "1 cat, 2 person"
  assert boxes.describe([]) == "(no objects)"
  png = tfds.features.Image(shape=(None, None, 1), encoding_format="png")
  masks = schema.of({"image": tfds.features.Image(), "class_mask": png})
  assert masks.task == "none" and masks.describe(schema.annotation({"class_mask": b""})) is None
  assert masks.mask == "class_mask" and boxes.mask is None and classification.mask is None
  boxes_and_masks = schema.of({"objects": tfds.features.Sequence({
      "label": tfds.features.ClassLabel(names=names)}), "class_mask": png})
  assert (boxes_and_masks.task, boxes_and_masks.mask) == ("detection", "class_mask")
  # (a class_mask the page cannot decode as ids is no mask to it)
  for other in (tfds.features.Image(encoding_format="jpeg"), tfds.features.Tensor(
      shape=(None, None), dtype=np.uint8)):
    assert schema.of({"image": tfds.features.Image(), "class_mask": other}).mask is None
