"""Two builds of one config, in two processes, give byte-identical shards; the direct
writer for all-scalar examples gives protobuf's own deterministic bytes."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import imagesets  # noqa: F401  (installs the deterministic serializer)
from conftest import REPO, records_by_split, shard_bytes, tfds_cli
from imagesets import reproducible
from imagesets import sample_images
from imagesets.flowers import flowers_dataset_builder as flowers
from imagesets.voc_segmentation import fake_voc
from imagesets.voc_segmentation import voc_segmentation_dataset_builder as voc
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


# --- the direct writer for all-scalar features (imagesets.reproducible._ScalarWriter) ---

def _protobuf(serializer, example) -> bytes:
  return serializer.get_tf_example(example).SerializeToString(deterministic=True)


def _serializer(spec: dict):
  features = features_lib.FeaturesDict(spec)
  return features, example_serializer.ExampleSerializer(features.get_serialized_info())


def test_direct_writer_matches_protobuf_on_edge_values():
  features, serializer = _serializer({
      "image": features_lib.Image(shape=(None, None, 3), encoding_format="jpeg"),
      "label": features_lib.ClassLabel(names=["a", "b", "ü"]),
      "image_id": features_lib.Text(),  # a key with another key as prefix: upb's order
      "i32": features_lib.Scalar(np.int32),
      "i64": features_lib.Scalar(np.int64),
      "u8": features_lib.Scalar(np.uint8),
  })
  assert reproducible._scalar_writer(serializer) is not None
  rng = np.random.default_rng(0)
  cases = [(b"", "", 0, 0, 0), (b"x" * 127, "ünïcødé", -1, -(1 << 63), 255),
           (b"y" * 128, "a" * 300, (1 << 31) - 1, (1 << 63) - 1, 128),
           (rng.bytes(300_000), "\n", -(1 << 31), 1 << 40, 7)]
  for image, name, i32, i64, u8 in cases:
    encoded = features.encode_example({"image": image, "label": 2, "image_id": name, "i32": i32,
                                       "i64": i64, "u8": u8})
    fast = reproducible._scalar_writer(serializer).write(encoded)
    assert fast is not None
    assert fast == _protobuf(serializer, encoded)
    assert serializer.serialize_example(encoded) == fast


def test_other_values_and_features_go_through_tfds():
  _, serializer = _serializer({"flag": features_lib.Scalar(np.bool_),
                               "n": features_lib.Scalar(np.int64)})
  assert reproducible._scalar_writer(serializer) is None  # bool: TFDS converts it
  example = {"flag": np.asarray(True), "n": np.asarray(3)}
  assert serializer.serialize_example(example) == _protobuf(serializer, example)
  _, serializer = _serializer({"v": features_lib.Tensor(shape=(3,), dtype=np.float32)})
  assert reproducible._scalar_writer(serializer) is None
  _, serializer = _serializer({"n": features_lib.Scalar(np.int32)})
  with pytest.raises(Exception, match="out of bounds|overflow|Overflow"):  # TFDS's own error
    serializer.serialize_example({"n": 1 << 40})


def test_every_builder_writes_canonical_records_through_the_direct_writer(
    tmp_path, tiny_data_dir, monkeypatch):
  """Each record our builders write is exactly protobuf's deterministic serialization of
  itself, and each went through the direct writer."""
  written = []
  original = reproducible._ScalarWriter.write
  monkeypatch.setattr(reproducible._ScalarWriter, "write",
                      lambda self, example: written.append(original(self, example)) or written[-1])
  roots = {"flowers": tmp_path / "photos", "voc": tmp_path / "voc"}
  for i in range(6):
    path = roots["flowers"] / f"c{i % 2}" / f"{i}.jpg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(sample_images.jpeg(30, 40, seed=i))
  voc_folder = fake_voc.write_tree(roots["voc"], num_train=2, num_val=2, num_unlabelled=0)
  builders = [
      flowers.Builder(config=flowers.FlowersConfig(name="canon", root=str(roots["flowers"]),
                                                   split_proportions={"train": 1.0}),
                      data_dir=tmp_path / "out"),
      voc.Builder(data_dir=tmp_path / "out"),
      tfds.builder("synthetic_images/tiny", data_dir=tmp_path / "out"),
  ]
  records = []
  for builder in builders:
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
        manual_dir=str(voc_folder.parent)))
    for split in records_by_split(builder.data_dir).values():
      records += split
  assert written and None not in written
  assert sorted(written) == sorted(records)  # every record came from the direct writer
  for record in records:
    assert tf.train.Example.FromString(record).SerializeToString(deterministic=True) == record
