"""Two builds of one config, in two processes, give byte-identical shards."""

import tensorflow as tf

import imagesets  # noqa: F401  (installs the deterministic serializer)
from conftest import REPO, shard_bytes, tfds_cli
from tensorflow_datasets.core import example_serializer
from tensorflow_datasets.core import features as features_lib


def test_two_cli_builds_write_identical_shards(tmp_path):
  # Separate processes: upb randomises map order per process, so this fails without
  # imagesets.reproducible.
  for run in ("a", "b"):
    tfds_cli("build", "datasets/synthetic_images", "--config", "variable",
             "--data_dir", str(tmp_path / run))
  first = shard_bytes(tmp_path / "a" / "synthetic_images" / "variable" / "1.0.0")
  second = shard_bytes(tmp_path / "b" / "synthetic_images" / "variable" / "1.0.0")
  assert len(first) == 8  # train and test, MIN_SHARDS each
  assert first == second


def test_serializer_writes_features_in_key_order():
  features = features_lib.FeaturesDict({k: features_lib.Scalar(tf.int64) for k in "dbca"})
  serializer = example_serializer.ExampleSerializer(features.get_serialized_info())
  serialized = serializer.serialize_example(features.encode_example({k: 1 for k in "dbca"}))
  positions = [serialized.index(b"\n\x01" + k.encode()) for k in "abcd"]
  assert positions == sorted(positions)
  assert tf.train.Example.FromString(serialized).features.feature["c"].int64_list.value == [1]
