"""Two builds of one config, in two processes, give byte-identical shards; TFDS itself
stays as it was for every other dataset."""

import subprocess

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import imagesets  # noqa: F401
from conftest import records_by_split, tfds_cli, warm
from imagesets.building import deterministic_writer
from imagesets.class_folders import class_folders_dataset_builder as class_folders
from imagesets.voc_segmentation import voc_segmentation_dataset_builder as voc
from imagesets_testing import fake_voc
from imagesets_testing import sample_images
from tensorflow_datasets.core import example_serializer
from tensorflow_datasets.core import features as features_lib
from tensorflow_datasets.core import shuffle
from tensorflow_datasets.core import writer as writer_lib


@pytest.mark.parametrize("file_format, pattern", [("tfrecord", "*.tfrecord-*"),
                                                  ("array_record", "*.array_record-*")])
def test_two_cli_builds_write_identical_shards(tmp_path, file_format, pattern):
  # Separate processes: upb randomises map order per process, so this fails without
  # the deterministic writer.
  for run in ("a", "b"):
    tfds_cli("build", "datasets/synthetic_images", "--config", "variable",
             "--file_format", file_format, "--data_dir", str(tmp_path / run), fresh=True)
  first, second = ({p.name: p.read_bytes() for p in sorted(
      (tmp_path / run / "synthetic_images" / "variable" / "1.0.0").glob(pattern))}
                   for run in ("a", "b"))
  assert len(first) == 8  # train and test, MIN_SHARDS each
  assert first == second


def test_canonical_reorders_map_entries_only():
  features = features_lib.FeaturesDict({
      "image": features_lib.Image(shape=(None, None, 3), encoding_format="jpeg"),
      "image_id": features_lib.Text(),  # a key with another key as prefix
      **{k: features_lib.Scalar(tf.int64) for k in "dbca"}})
  serializer = example_serializer.ExampleSerializer(features.get_serialized_info())
  example = features.encode_example({"image": np.random.default_rng(0).bytes(3000),
                                     "image_id": "ü", **{k: -(1 << 40) for k in "dbca"}})
  record = serializer.serialize_example(example)  # TFDS's own bytes: map order may vary
  canonical = deterministic_writer.canonical(record)
  assert canonical == serializer.get_tf_example(example).SerializeToString(deterministic=True)
  assert len(canonical) == len(record)  # TFDS's shard sizes stay right
  assert tf.train.Example.FromString(canonical) == tf.train.Example.FromString(record)


def test_every_builder_writes_canonical_records(tmp_path):
  """Each record our builders write is protobuf's deterministic serialization of itself:
  made by the workers (class folders, VOC, synthetic_images: prepared_records); a split a
  builder yields to TFDS itself goes through our writer (DeterministicExampleWriter)."""
  roots = {"flowers": tmp_path / "photos", "voc": tmp_path / "voc"}
  for i in range(6):
    path = roots["flowers"] / f"c{i % 2}" / f"{i}.jpg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(sample_images.jpeg(30, 40, seed=i))
  voc_folder = fake_voc.write_tree(roots["voc"], num_train=2, num_val=2, num_unlabelled=0)
  builders = [
      class_folders.Builder(config=class_folders.ClassFoldersConfig(name="canon", root=str(roots["flowers"]),
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
  assert len(records) == 6 + 4 + 16
  for record in records:
    assert tf.train.Example.FromString(record).SerializeToString(deterministic=True) == record


class _StockBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """A plain TFDS dataset, as any user of TFDS might build beside ours."""

  VERSION = tfds.core.Version("1.0.0")

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self, features=tfds.features.FeaturesDict({"x": tfds.features.Scalar(np.int64)}))

  def _split_generators(self, dl_manager):
    return {"train": self._generate_examples()}

  def _generate_examples(self):
    for i in range(5):
      yield i, {"x": i}


def test_tfds_is_unchanged_for_other_datasets(tmp_path, monkeypatch):
  # A fresh process: nothing of TFDS's changes when imagesets is imported.
  script = """
import tensorflow_datasets as tfds
from tensorflow_datasets.core import example_serializer, shuffle, dataset_builder
before = (example_serializer.ExampleSerializer.serialize_example, shuffle.MAX_MEM_BUFFER_SIZE,
          shuffle.BUCKETS_NUMBER, dataset_builder.GeneratorBasedBuilder._example_writer,
          dataset_builder.GeneratorBasedBuilder.download_and_prepare)
import imagesets
after = (example_serializer.ExampleSerializer.serialize_example, shuffle.MAX_MEM_BUFFER_SIZE,
         shuffle.BUCKETS_NUMBER, dataset_builder.GeneratorBasedBuilder._example_writer,
         dataset_builder.GeneratorBasedBuilder.download_and_prepare)
assert before == after, (before, after)
print("unchanged")
"""
  out = subprocess.run([warm("python"), "-c", script], capture_output=True, text=True)
  assert out.stdout.strip() == "unchanged", out.stderr[-3000:]

  # In this process: build one of ours, then a stock dataset; the stock one is written by
  # TFDS's own writer and serializer, with TFDS's shuffle settings.
  tfds.builder("synthetic_images/tiny", data_dir=tmp_path).download_and_prepare()
  seen = []
  write = writer_lib.ExampleWriter.write
  monkeypatch.setattr(writer_lib.ExampleWriter, "write",
                      lambda self, path, examples: seen.append(type(self)) or write(self, path, examples))
  serialize = example_serializer.ExampleSerializer.serialize_example
  assert serialize.__module__ == "tensorflow_datasets.core.example_serializer"
  stock = _StockBuilder(data_dir=tmp_path)
  stock.download_and_prepare()
  assert seen and set(seen) == {writer_lib.ExampleWriter}
  assert shuffle.MAX_MEM_BUFFER_SIZE == 1000 << 20 and shuffle.BUCKETS_NUMBER == 1000
  assert len(list(stock.as_dataset(split="train"))) == 5
