"""Contracts of the TFDS non-public names we use (imagesets.tfds_internals): what each takes
and gives, on small examples. A TFDS release that changes one fails here, by name."""

import inspect
import pathlib
import json

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from imagesets import tfds_internals


def _features():
  return tfds.features.FeaturesDict({
      "image": tfds.features.Image(shape=(None, None, 3), encoding_format="png"),
      "label": tfds.features.ClassLabel(names=["a", "b"]),
      "meta": {"height": np.int32, "name": tfds.features.Text()},
  })


def _example():
  return {"image": np.zeros((2, 3, 3), np.uint8), "label": "b",
          "meta": {"height": np.int32(2), "name": "x"}}


def test_protos_are_tf_train_example_and_feature():
  example = tf.train.Example(features=tf.train.Features(feature={
      "a": tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 2]))}))
  ours = tfds_internals.Example.FromString(example.SerializeToString())
  assert list(ours.features.feature["a"].int64_list.value) == [1, 2]
  assert isinstance(ours.features.feature["a"], tfds_internals.Feature)


def test_shard_config_and_classproperty_and_small_utilities(tmp_path):
  assert tfds_internals.ShardConfig().get_number_shards(10 << 20, 100) == 1
  assert tfds_internals.ShardConfig(num_shards=7).num_shards == 7
  assert {"num_shards", "min_shard_size", "max_shard_size"} <= set(
      inspect.signature(tfds_internals.ShardConfig).parameters)

  class WithProperty:
    @tfds_internals.classproperty
    @classmethod
    def name(cls):
      return cls.__name__
  assert WithProperty.name == "WithProperty"

  assert tfds_internals.flatten_nest_dict({"a": {"b": 1}, "c": 2}) == {"a/b": 1, "c": 2}
  assert tfds_internals.is_string_dtype(np.object_) and tfds_internals.is_integer_dtype(np.int32)
  assert not tfds_internals.is_integer_dtype(np.float32)
  assert not tfds_internals.is_string_dtype(np.int64)

  checksums = tmp_path / "c.txt"
  checksums.write_text("http://x/f.tgz\t12\t" + "ab" * 32 + "\tf.tgz\n")
  info = tfds_internals.load_url_infos(checksums)["http://x/f.tgz"]
  assert (int(info.size), info.checksum, info.filename) == (12, "ab" * 32, "f.tgz")


def test_record_path_gives_tfds_serializer_records():
  features = _features()
  specs = tfds_internals.flat_example_specs(features)
  assert set(specs) == {"image", "label", "meta/height", "meta/name"}
  assert all(isinstance(spec, tfds.features.TensorInfo) for spec in specs.values())
  encoded = tfds_internals.flatten_nest_dict(features.encode_example(_example()))
  record = tfds_internals.dict_to_example(encoded, specs).SerializeToString(deterministic=True)
  parsed = features.deserialize_example_np(record)
  assert (parsed["label"], parsed["meta"]["height"]) == (1, 2)
  feature = tfds_internals.item_to_feature(encoded["meta/height"], specs["meta/height"])
  assert list(feature.int64_list.value) == [2]


def test_key_hasher_is_tfds_shuffle_hash():
  hash_key = tfds_internals.key_hasher("train")
  assert hash_key("a/1.jpg") == tfds_internals.key_hasher("train")("a/1.jpg")
  assert hash_key("a/1.jpg") != tfds_internals.key_hasher("test")("a/1.jpg")
  assert all(0 <= hash_key(key) < 1 << 128 for key in ("x", b"x", 5))


def test_shard_specs_index_files_and_file_adapters(tmp_path):
  template = tfds.core.ShardedFileTemplate(data_dir=tmp_path, dataset_name="d", split="train",
                                           filetype_suffix="tfrecord")
  specs = tfds_internals.shard_specs(10, 1000, template, tfds_internals.ShardConfig(num_shards=3))
  assert [spec.examples_number for spec in specs] == [3, 4, 3]  # TFDS's boundaries
  assert [pathlib_name(spec.path) for spec in specs] == [
      f"d-train.tfrecord-0000{i}-of-00003" for i in range(3)]
  adapter = tfds_internals.file_adapter(tfds.core.FileFormat.TFRECORD)
  adapter.write_examples(specs[0].path, iter([(1, b"r1"), (2, b"r2"), (3, b"r3")]))
  assert [r.numpy() for r in tf.data.TFRecordDataset(str(specs[0].path))] == [b"r1", b"r2", b"r3"]
  tfds_internals.write_index_file(tmp_path / "index", [0, 10, 20])
  assert json.loads((tmp_path / "index").read_text()) == {"index": ["0", "10", "20"]}


def pathlib_name(path) -> str:
  return str(path).rsplit("/", 1)[-1]


def test_split_builder_takes_what_we_give_it():
  parameters = inspect.signature(tfds_internals.SplitBuilder).parameters
  assert {"split_dict", "features", "dataset_size", "beam_options", "beam_runner",
          "max_examples_per_split", "example_writer", "shard_config",
          "ignore_duplicates"} <= set(parameters)
  submit = inspect.signature(tfds_internals.SplitBuilder.submit_split_generation).parameters
  assert list(submit) == ["self", "split_name", "generator", "filename_template",
                          "disable_shuffling", "nondeterministic_order"]
  assert hasattr(tfds_internals.SplitBuilder, "normalize_legacy_split_generators")


def test_builder_hooks_are_there_and_filename_template_names_a_split(tmp_path):
  tfds_internals.check_builder_hooks()
  from imagesets.synthetic_images import synthetic_images_dataset_builder as synthetic
  builder = synthetic.Builder(config="tiny", data_dir=tmp_path)
  template = tfds_internals.filename_template(builder, "train")
  assert template.split == "train" and template.dataset_name == "synthetic_images"


def test_a_missing_name_fails_naming_our_function_and_the_fallback(monkeypatch):
  monkeypatch.setattr(tfds_internals, "_writer", None)
  with pytest.raises(tfds_internals.TFDSInternalsChanged,
                     match=r"tfds_internals.shard_specs: TFDS .* has no "
                           r"core.writer._get_shard_specs; fallback: let TFDS's own writer"):
    tfds_internals.shard_specs(1, 1, None, None)
  monkeypatch.setattr(tfds.core.GeneratorBasedBuilder, "_get_filename_template",
                      lambda self, split: None)
  with pytest.raises(tfds_internals.TFDSInternalsChanged,
                     match=r"check_builder_hooks: .*GeneratorBasedBuilder._get_filename_template.*"
                           r"fallback: build with the stock GeneratorBasedBuilder"):
    tfds_internals.check_builder_hooks()


# Golden values of TFDS 4.9.10: the shard bytes of every build depend on them (the order of
# examples in a shard is by key hash; records are TFDS's serialization). A TFDS release that
# changes them changes every build's bytes: this fails, naming our function and the fallback.
_GOLDEN_KEY_HASHES = [(("train", "a/1.jpg"), 0x4be6a853cf8557eae32a4c22c4b632f5),
                      (("test", b"class0/007.jpg"), 0x6deab9cd3dce5a6837fcab0097e949d7),
                      (("train", 12345), 0x1d568c86ec0b61efaabbe21082d1b8fc)]
_GOLDEN_EXAMPLE_SHA256 = "09dafc3c9f72e741aeef95ac7ba763d557c22c62452298151aa30ade5bb4afcf"
_GOLDEN_FEATURE_SHA256 = "5ee619b03833acd7a4b6b0714422d87564ade7a19583b3ba0e194d1dd4741fe2"


def _changed(function: str, what: str) -> str:
  return (f"imagesets.tfds_internals.{function}: TFDS {tfds.__version__} {what} than TFDS "
          f"4.9.10, so built shards change bytes; fallback: {tfds_internals._RECORDS_FALLBACK}")


def test_key_hashes_are_tfds_4_9_10s():
  for (salt, key), expected in _GOLDEN_KEY_HASHES:
    assert tfds_internals.key_hasher(salt)(key) == expected, _changed(
        "key_hasher", f"hashes key {key!r} of split {salt!r} otherwise")


def test_serialized_records_are_tfds_4_9_10s_bytes():
  # No image: its encoding is TensorFlow's (PNG/zlib), not TFDS's serialization.
  import hashlib
  features = tfds.features.FeaturesDict({
      "label": tfds.features.ClassLabel(names=["a", "b"]),
      "meta": {"height": np.int32, "name": tfds.features.Text()},
      "values": tfds.features.Tensor(shape=(None,), dtype=np.float32)})
  specs = tfds_internals.flat_example_specs(features)
  encoded = tfds_internals.flatten_nest_dict(features.encode_example(
      {"label": "b", "meta": {"height": np.int32(2), "name": "x é"},
       "values": np.array([0.5, -1.25], np.float32)}))
  record = tfds_internals.dict_to_example(encoded, specs).SerializeToString(deterministic=True)
  assert hashlib.sha256(record).hexdigest() == _GOLDEN_EXAMPLE_SHA256, _changed(
      "dict_to_example", "serializes an example otherwise")
  feature = tfds_internals.item_to_feature(encoded["values"], specs["values"])
  assert hashlib.sha256(feature.SerializeToString(deterministic=True)).hexdigest() == (
      _GOLDEN_FEATURE_SHA256), _changed("item_to_feature", "serializes a feature otherwise")


def test_generate_splits_locally_does_what_tfds_generate_splits_does(tmp_path):
  """generate_splits_locally is TFDS 4.9.10's GeneratorBasedBuilder._generate_splits without
  Beam: given a stock SplitBuilder it writes the same shards and SplitInfos as TFDS's own."""
  from tensorflow_datasets.core import split_builder as split_builder_lib
  import yielding_synthetic  # (a builder that yields its examples, as TFDS's own builders)

  def build(data_dir, ours: bool):
    builder = yielding_synthetic.Builder(config="tiny", data_dir=data_dir)

    def generate_splits(dl_manager, download_config):
      if not ours:  # TFDS's own, as every TFDS dataset runs it
        return tfds.core.GeneratorBasedBuilder._generate_splits(  # pylint: disable=protected-access
            builder, dl_manager, download_config)
      return tfds_internals.generate_splits_locally(builder, dl_manager, split_builder_lib.SplitBuilder(
          split_dict=builder.info.splits, features=builder.info.features,
          dataset_size=builder.info.dataset_size,
          max_examples_per_split=download_config.max_examples_per_split, beam_options=None,
          beam_runner=None, shard_config=download_config.get_shard_config(),
          example_writer=builder._example_writer(),  # pylint: disable=protected-access
          ignore_duplicates=download_config.ignore_duplicates))

    builder._generate_splits = generate_splits  # pylint: disable=protected-access
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=2))
    shards = {p.name: p.read_bytes() for p in sorted(pathlib.Path(builder.data_dir).glob("*.tfrecord-*"))}
    splits = {name: (info.num_examples, info.shard_lengths, info.num_bytes)
              for name, info in builder.info.splits.items()}
    return shards, splits

  theirs, ours = build(tmp_path / "tfds", ours=False), build(tmp_path / "ours", ours=True)
  assert len(theirs[0]) == 4 and theirs[1]["train"][0] == 12
  assert ours == theirs, ("imagesets.tfds_internals.generate_splits_locally no longer does what "
                          f"TFDS {tfds.__version__}'s GeneratorBasedBuilder._generate_splits does; "
                          f"fallback: {tfds_internals._RECORDS_FALLBACK}")


def test_generate_splits_on_beam_does_what_tfds_generate_splits_does(tmp_path):
  """generate_splits_on_beam is TFDS 4.9.10's GeneratorBasedBuilder._generate_splits on
  Beam: the same shards and SplitInfos; besides, it adds the builder's work before the
  writers, gives each split the shard config asked for, and leaves a split whose generator
  is None to the builder."""
  beam = pytest.importorskip("apache_beam")
  import yielding_synthetic

  class OnBeam(yielding_synthetic.Builder, skip_registration=True):
    __module__ = yielding_synthetic.Builder.__module__  # (where TFDS finds its metadata)
    skipped = ()

    def _split_generators(self, dl_manager):
      config = self.builder_config
      return {split: None if split in self.skipped else beam.Create(list(
                  yielding_synthetic._yielded(config, split_id=i, count=count)))
              for i, (split, count) in enumerate([("train", config.num_train),
                                                  ("test", config.num_test)])}

    def _process_pipeline_result(self, pipeline_result):  # (TFDS's: no `generation` here)
      tfds.core.GeneratorBasedBuilder._process_pipeline_result(self, pipeline_result)

  def build(data_dir, ours: bool, configs=None, skipped=()):
    builder = OnBeam(config="tiny", data_dir=data_dir)
    builder.skipped, added, returned = skipped, [], []

    def generate_splits(dl_manager, download_config):
      if not ours:
        return tfds.core.GeneratorBasedBuilder._generate_splits(  # pylint: disable=protected-access
            builder, dl_manager, download_config)
      returned[:] = tfds_internals.generate_splits_on_beam(
          builder, dl_manager, download_config, before_writers=added.append,
          shard_config_of=lambda split: (configs or {}).get(split))
      return [info for _, _, info in returned if info is not None]

    builder._generate_splits = generate_splits  # pylint: disable=protected-access
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
        num_shards=2, beam_options=beam.options.pipeline_options.PipelineOptions(
            ["--direct_running_mode=in_memory"])))
    shards = {p.name: p.read_bytes() for p in sorted(pathlib.Path(builder.data_dir).glob("*.tfrecord-*"))}
    splits = {name: (info.num_examples, info.shard_lengths, info.num_bytes)
              for name, info in builder.info.splits.items()}
    if ours:
      assert len(added) == 1 and isinstance(added[0], beam.Pipeline)
    return shards, splits, returned

  theirs, ours = build(tmp_path / "tfds", ours=False), build(tmp_path / "ours", ours=True)
  assert len(theirs[0]) == 4 and theirs[1]["train"][0] == 12
  assert ours[:2] == theirs[:2], (
      "imagesets.tfds_internals.generate_splits_on_beam no longer does what TFDS "
      f"{tfds.__version__}'s GeneratorBasedBuilder._generate_splits does; fallback: build "
      "versions on a base locally")
  shards, splits, _ = build(tmp_path / "configs", ours=True,
                            configs={"train": tfds_internals.ShardConfig(num_shards=3)})
  assert len(splits["train"][1]) == 3 and len(splits["test"][1]) == 2
  shards, splits, returned = build(tmp_path / "skipped", ours=True, skipped=("test",))
  assert [(split, info is None) for split, _, info in returned] == [("train", False),
                                                                   ("test", True)]
  assert returned[1][1].split == "test" and not [n for n in shards if "-test." in n]


def test_progress_bars_on_follows_tfds_switch():
  assert tfds_internals.progress_bars_on()
  tfds.disable_progress_bar()
  try:
    assert not tfds_internals.progress_bars_on()
  finally:
    tfds.display_progress_bar(True)


def test_known_without_importing_asks_every_provider_as_builder_cls_does(monkeypatch):
  from imagesets_testing import tfds_names
  for name in (tfds_names.REGISTERED, tfds_names.ABSTRACT):
    assert tfds_internals.known_without_importing(name)
  assert not tfds_internals.known_without_importing(tfds_names.PROVIDED)
  tfds_names.with_provider(monkeypatch)
  assert tfds_internals.known_without_importing(tfds_names.PROVIDED)
  assert not tfds_internals.known_without_importing("no_such_parts_anywhere")
  with pytest.raises(tfds.core.DatasetNotFoundError):  # (what builder_cls says of a free name)
    tfds.builder_cls("no_such_parts_anywhere")


def test_an_empty_split_is_read_from_tfds_writers_refusal():
  """TFDS's Beam writer refuses an empty split in these words (a worker's traceback wraps
  them): `generation.Generation.beam_stop` says it as a local build does."""
  writer = tfds.core.writer.BeamWriter
  assert "The total number of generated examples is" in inspect.getsource(writer)
  error = RuntimeError("Traceback ...\nValueError: The total number of generated examples is "
                       "0 for split test. This should be >0! [while running 'test_write']")
  assert tfds_internals.empty_split_in(error) == "test"
  assert tfds_internals.empty_split_in(RuntimeError("examples is 0 for split")) is None
