"""prepared_records: records made by the workers, written in hashed-key order, give exactly
the shards TFDS's own writer (plus our deterministic writer) gives, in any process."""

import dataclasses
import json
import pathlib
import pickle
import struct

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import imagesets  # noqa: F401
from conftest import shard_bytes, tfds_cli
from imagesets.building import prepared_records
from imagesets.building import builder_base
from imagesets.building import sharding
from imagesets.class_folders import class_folders_dataset_builder as class_folders
from imagesets_testing import sample_images
from tensorflow_datasets.core import example_serializer
from tensorflow_datasets.core import hashing


def stock_writer(patch):
  """Builds of our builders go through TFDS's own split writer (what every build did before)."""
  patch.setattr(builder_base.ImageSetBuilder, "_generate_all_splits",
                lambda self, dl_manager, download_config, use_beam:
                tfds.core.GeneratorBasedBuilder._generate_splits(self, dl_manager, download_config))


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
  root = tmp_path_factory.mktemp("photos")
  for i in range(40):
    path = root / f"c{i % 3}" / f"{i:03d}.jpg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(sample_images.jpeg(60 + i, 80, seed=i))
  (root / "c1" / "broken.jpg").write_bytes(sample_images.jpeg(60, 80)[:300])
  return root


def _build(root, data_dir, **config):
  builder = class_folders.Builder(
      config=class_folders.ClassFoldersConfig(name="p", root=str(root), skip_bad_files=True,
                                              **config),
      data_dir=data_dir)
  builder.download_and_prepare()
  return builder


@pytest.fixture(scope="module")
def tfds_writer_build(photos, tmp_path_factory):
  """The same build through TFDS's own writer (what every build did before)."""
  with pytest.MonkeyPatch.context() as patch:
    stock_writer(patch)
    return _build(photos, tmp_path_factory.mktemp("tfds_writer"))


def test_shards_equal_tfds_writer_shards(photos, tfds_writer_build, tmp_path):
  ours = _build(photos, tmp_path)
  expected = shard_bytes(pathlib.Path(tfds_writer_build.data_dir))
  assert len(expected) >= 8  # every split, at least 4 shards each
  assert shard_bytes(pathlib.Path(ours.data_dir)) == expected
  assert ([s.shard_lengths for s in ours.info.splits.values()]
          == [s.shard_lengths for s in tfds_writer_build.info.splits.values()])
  assert list(ours.info.metadata["skipped_files"]) == ["c1/broken.jpg"]
  assert dict(ours.info.metadata) == dict(tfds_writer_build.info.metadata)


def test_spilled_records_write_the_same_shards(photos, tfds_writer_build, tmp_path, monkeypatch):
  monkeypatch.setattr(prepared_records, "MEMORY_LIMIT", 20_000)  # a few photos in memory
  ours = _build(photos, tmp_path)
  assert (shard_bytes(pathlib.Path(ours.data_dir))
          == shard_bytes(pathlib.Path(tfds_writer_build.data_dir)))
  assert not list(pathlib.Path(tmp_path).rglob("records_*.tmp"))  # spill files removed


def test_array_record_builds_equal_tfds_writer_builds(photos, tmp_path, monkeypatch):
  ours = class_folders.Builder(
      config=class_folders.ClassFoldersConfig(name="p", root=str(photos), skip_bad_files=True),
      data_dir=tmp_path / "ours", file_format="array_record")
  ours.download_and_prepare()
  stock_writer(monkeypatch)
  stock = class_folders.Builder(
      config=class_folders.ClassFoldersConfig(name="p", root=str(photos), skip_bad_files=True),
      data_dir=tmp_path / "stock", file_format="array_record")
  stock.download_and_prepare()
  shards = {p.name: p.read_bytes() for p in pathlib.Path(ours.data_dir).glob("*.array_record*")}
  assert len(shards) >= 8
  assert shards == {p.name: p.read_bytes()
                    for p in pathlib.Path(stock.data_dir).glob("*.array_record*")}
  source = ours.as_data_source(split="train")
  assert [source[i]["file_name"] for i in range(len(source))] == [
      stock.as_data_source(split="train")[i]["file_name"] for i in range(len(source))]


def test_two_processes_write_identical_shards(photos, tmp_path):
  # upb randomises protobuf map order per process: the workers must serialize deterministically.
  config = json.dumps({"name": "p", "root": str(photos), "skip_bad_files": True})
  for run in ("a", "b"):
    tfds_cli("build", "datasets/class_folders", "--config", config,
             "--data_dir", str(tmp_path / run), fresh=True)
  first, second = (shard_bytes(tmp_path / run / "class_folders" / "p" / "1.0.0")
                   for run in ("a", "b"))
  assert len(first) >= 8 and first == second


def test_hashed_order_is_tfds_shuffle_order():
  keys = [f"c{i % 3}/{i}.jpg" for i in range(50)]
  hasher = hashing.Hasher("train")
  order = prepared_records.hashed_order("train", keys)
  assert [keys[position] for _, position in order] == sorted(keys, key=hasher.hash_key)
  assert [hkey for hkey, _ in order] == sorted(hasher.hash_key(key) for key in keys)


def test_examples_yielded_to_tfds_sorted_in_memory_or_spilled_give_tfds_shards(tmp_path,
                                                                             monkeypatch):
  # A builder that yields its examples to TFDS (synthetic_images' examples, as it did before
  # it went through `generation`): we make and sort the records ourselves.
  import yielding_synthetic

  sorted_splits = []
  sorted_records = prepared_records._sorted_records  # pylint: disable=protected-access
  monkeypatch.setattr(prepared_records, "_sorted_records",
                      lambda split, *args: (sorted_splits.append(split),
                                            sorted_records(split, *args))[1])

  def build(where):
    builder = yielding_synthetic.Builder(config="tiny", data_dir=tmp_path / where)
    builder.download_and_prepare()
    return shard_bytes(pathlib.Path(builder.data_dir))

  ours = build("ours")
  assert sorted(sorted_splits) == ["test", "train"]  # (the path this test is about)
  monkeypatch.setattr(prepared_records, "MEMORY_LIMIT", 3_000)  # spills after a few images
  spilled = build("spilled")
  stock_writer(monkeypatch)
  assert ours == spilled == build("stock")
  assert len(ours) >= 8
  assert not list(tmp_path.rglob("buckets_*.tmp"))  # bucket files removed


def test_sorted_spill_gives_keys_in_order(tmp_path):
  pending = prepared_records._Sorted(tmp_path, limit=100)  # pylint: disable=protected-access
  keys = [(i * 0x9E3779B97F4A7C15_F00D << 40) % (1 << 128) for i in range(300)]
  for key in keys:
    pending.add(key, key.to_bytes(16, "big"))
  assert list(pending) == [(key, key.to_bytes(16, "big")) for key in sorted(keys)]
  pending.discard()
  assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("planned", [None, 1], ids=["spilled", "a_plan_undone"])
def test_duplicate_keys_are_refused(tmp_path, planned):
  template = tfds.core.ShardedFileTemplate(data_dir=tmp_path, dataset_name="d", split="train",
                                           filetype_suffix="tfrecord")
  with pytest.raises(ValueError, match="same key"):
    prepared_records.write_split("train", [(3, b"a"), (5, b"b"), (5, b"c")], template, None,
                                 tfds.core.FileFormat.TFRECORD,
                                 planned=planned and (lambda: planned))
  assert not list(tmp_path.iterdir())  # nothing written, or nothing left (the planned shard)


def test_records_are_tfds_records_for_every_kind_of_feature():
  features = tfds.features.FeaturesDict({
      "image": tfds.features.Image(shape=(None, None, 3), encoding_format="jpeg"),
      "mask": tfds.features.Image(shape=(None, None, 1), encoding_format="png"),
      "label": tfds.features.ClassLabel(names=["ant", "bee"]),
      "name": tfds.features.Text(),
      "height": tfds.features.Scalar(np.int32),
      "big": tfds.features.Scalar(np.int64),
      "huge": tfds.features.Scalar(np.uint64),
      "small": tfds.features.Scalar(np.uint8),
      "score": tfds.features.Scalar(np.float32),
      "flag": tfds.features.Scalar(np.bool_),
      "box": tfds.features.Tensor(shape=(4,), dtype=np.float32),
      "objects": tfds.features.Sequence({"area": np.int64, "tag": tfds.features.Text()}),
  })
  serializer = example_serializer.ExampleSerializer(features.get_serialized_info())
  maker = prepared_records.RecordMaker(features)
  maker = pickle.loads(pickle.dumps(maker))  # as the workers get it
  for i, label in enumerate(["bee", 0, np.int64(1)]):
    example = {
        "image": sample_images.jpeg(20, 30, seed=i),
        "mask": np.full((5, 6, 1), i, np.uint8),
        "label": label, "name": f"fleur-{i}-é", "height": np.int32(20 + i),
        "big": -(1 << 40) - i, "huge": (1 << 64) - 1 - i, "small": 200 + i, "score": 0.5 * i,
        "flag": bool(i % 2), "box": np.arange(4, dtype=np.float32) * i,
        "objects": {"area": list(range(i)), "tag": [f"t{j}" for j in range(i)]},
    }
    expected = serializer.get_tf_example(features.encode_example(example))
    assert maker.make(example) == expected.SerializeToString(deterministic=True), i


@pytest.mark.parametrize("seed", range(4))
def test_one_value_records_are_protobufs_own_bytes(seed):
  """Scalars set in the proto in place (the keras cache's pixels, labels, names; sizes;
  optional features left out): byte for byte what TFDS's Example serializes to."""
  rng = np.random.default_rng(seed)
  features = tfds.features.FeaturesDict({
      "image": tfds.features.Tensor(shape=(7, 5, 3), dtype=np.uint8,
                                    encoding=tfds.features.Encoding.BYTES),
      "label": tfds.features.ClassLabel(num_classes=300),
      "file_name": tfds.features.Text(),
      "width": tfds.features.Scalar(np.int32),
      "offset": tfds.features.Scalar(np.int64),
      "ä": tfds.features.Scalar(np.uint8),  # a key beyond ASCII
      "Z": tfds.features.Text(),
      "image_id": tfds.features.Text(),  # keys with another key as prefix (VOC's)
      "imag": tfds.features.Scalar(np.int64, optional=True),
  })
  serializer = example_serializer.ExampleSerializer(features.get_serialized_info())
  maker = prepared_records.RecordMaker(features)
  for offset in [0, 1, 127, 128, 16383, 16384, -1, -(1 << 63), (1 << 63) - 1,
                 int(rng.integers(-(1 << 62), 1 << 62))]:
    example = {"image": rng.integers(0, 256, (7, 5, 3), dtype=np.uint8),
               "label": int(rng.integers(300)), "file_name": "é/" * int(rng.integers(0, 90)),
               "width": np.int32(rng.integers(-(1 << 31), 1 << 31)), "offset": offset,
               "ä": np.uint8(rng.integers(256)), "Z": "", "image_id": "2012_000003",
               "imag": None if offset % 2 else offset}
    expected = serializer.get_tf_example(features.encode_example(example))
    assert maker.make(example) == expected.SerializeToString(deterministic=True), offset


def test_an_example_of_optional_features_all_left_out_is_tfds_record():
  features = tfds.features.FeaturesDict({
      "a": tfds.features.Scalar(np.int64, optional=True),
      "b": tfds.features.Scalar(np.int64, optional=True)})
  serializer = example_serializer.ExampleSerializer(features.get_serialized_info())
  example = {"a": None, "b": None}
  expected = serializer.get_tf_example(features.encode_example(example))
  assert prepared_records.RecordMaker(features).make(example) == (
      expected.SerializeToString(deterministic=True)) == b"\n\x00"


def _tfrecord_file(folder: pathlib.Path, count: int) -> pathlib.Path:
  """planned.tfrecord: `count` records of 100 bytes, record i all bytes i (TensorFlow's writer)."""
  path = folder / "planned.tfrecord"
  with tf.io.TFRecordWriter(str(path)) as writer:
    for i in range(count):
      writer.write(bytes([i]) * 100)
  return path


def test_planned_shards_misframed_by_a_bad_length_are_an_error(tmp_path):
  """A length that still fits the file (its CRC is not checked) misframes what follows:
  the records read back must be those written, in number and bytes."""
  path = _tfrecord_file(tmp_path, 4)
  data = path.read_bytes()
  path.write_bytes(struct.pack("<Q", 100 + 4 + 12 + 100) + data[8:])  # swallows record 1
  spill = prepared_records._Spill(tmp_path, prepared_records.MEMORY_LIMIT)  # pylint: disable=protected-access
  spill.adopt([path], 4, 400)
  with pytest.raises(OSError, match=r"read back as 3 records of 416 bytes, written as 4 of 400"):
    list(spill)
  spill.discard()
  assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("cut", [1, 13, 60, 111])  # into the last CRC, data, header
def test_a_shard_read_back_cut_short_is_an_error_not_a_short_record(tmp_path, cut):
  path = _tfrecord_file(tmp_path, 3)
  assert list(prepared_records.tfrecords(path)) == [bytes([i]) * 100 for i in range(3)]
  data = path.read_bytes()
  path.write_bytes(data[:-cut])
  with pytest.raises(OSError, match="planned.tfrecord is cut short"):
    list(prepared_records.tfrecords(path))
  path.write_bytes(struct.pack("<Q", 1 << 62) + data[8:])  # a length past the end
  with pytest.raises(OSError, match="planned.tfrecord is cut short"):
    list(prepared_records.tfrecords(path))


def _version_files(cache: pathlib.Path) -> dict[str, bytes]:
  """{path: bytes} of every file of the cache's version folders (shards, info, metadata)."""
  return {str(p.relative_to(cache)): p.read_bytes()
          for p in sorted(cache.glob("*/1.0.0/**/*")) if p.is_file()}


@pytest.mark.parametrize("broken", [False, True], ids=["as_planned", "a_file_skipped"])
def test_keras_cache_shards_written_as_planned_equal_the_spilled_ones(
    photos, tmp_path, monkeypatch, broken):
  """The keras cache writes its shards as the records come (planned from the first record);
  a skipped file (40 photos + 1 broken: one record fewer than planned) undoes the plan. Both
  give every file of the version folder byte for byte as the spill path does, for two splits."""
  import shutil
  tree = tmp_path / "tree"
  shutil.copytree(photos, tree)
  if not broken:
    (tree / "c1" / "broken.jpg").unlink()
  call = dict(image_size=(20, 24), validation_split=0.25, subset="both", seed=3,
              skip_bad_files=True, verbose=False)
  read_back, spilled = [], []
  real_tfrecords, real_add = prepared_records.tfrecords, prepared_records._Spill.add  # pylint: disable=protected-access
  monkeypatch.setattr(prepared_records, "tfrecords",
                      lambda path: read_back.append(path) or real_tfrecords(path))
  monkeypatch.setattr(prepared_records._Spill, "add",  # pylint: disable=protected-access
                      lambda self, record: spilled.append(record) or real_add(self, record))
  imagesets.image_dataset_from_directory(tree, cache_dir=tmp_path / "planned", **call)
  assert bool(read_back) == broken  # the plan undone only when a file was skipped
  assert not spilled  # and then read back into the final shards, not copied (review-29c 3)
  assert not list((tmp_path / "planned").rglob("*.tmp*"))  # nothing half-written left over
  with monkeypatch.context() as spill_path:
    spill_path.setattr(prepared_records, "_is_tfrecord", lambda file_format: False)
    imagesets.image_dataset_from_directory(tree, cache_dir=tmp_path / "spilled", **call)
  planned, expected = _version_files(tmp_path / "planned"), _version_files(tmp_path / "spilled")
  assert len([name for name in expected if ".tfrecord-" in name]) == 8  # 2 splits x 4 shards
  assert planned == expected


@dataclasses.dataclass(frozen=True)
class _SmallShards(sharding.MinShardsConfig):
  """Shards of 2-16 KB: 137 records of 100 bytes make 4 shards, 138 make 8 (TFDS reads the
  sizes from the class, `calculate_number_shards` being a classmethod)."""
  min_shard_size: int = 2000
  max_shard_size: int = 16000

_WRITE_EXAMPLES = prepared_records.write_examples


def _spy_on_writes(monkeypatch) -> list[tuple[str, int]]:
  """(file name, records) of each shard written from now on."""
  writes = []

  def counted(path, items, file_format):
    pairs = list(items)
    writes.append((pathlib.Path(path).name, len(pairs)))
    return _WRITE_EXAMPLES(path, iter(pairs), file_format)

  monkeypatch.setattr(prepared_records, "write_examples", counted)
  return writes


def _write_both_ways(tmp_path, records, planned, shard_config, monkeypatch, given=iter):
  """{way: (files, shard_lengths, num_bytes, shards written)} of `records` (given as
  `given(records)`) written by the spill path and as planned (`planned` records)."""
  written = {}
  for name, plan in (("spilled", None), ("planned", planned)):
    (tmp_path / name).mkdir()
    template = tfds.core.ShardedFileTemplate(data_dir=tmp_path / name, dataset_name="d",
                                             split="train", filetype_suffix="tfrecord")
    writes = _spy_on_writes(monkeypatch)
    info = prepared_records.write_split("train", given(records), template, shard_config,
                                        tfds.core.FileFormat.TFRECORD, planned=plan)()
    written[name] = ({p.name: p.read_bytes() for p in (tmp_path / name).iterdir()},
                     info.shard_lengths, info.num_bytes, writes)
  return written


@pytest.mark.parametrize("given", [iter, list], ids=["an_iterator", "a_list"])
@pytest.mark.parametrize("planned", [3, 5, 8])
def test_a_plan_missed_by_the_count_writes_what_the_spill_writes(tmp_path, monkeypatch, planned,
                                                                 given):
  """5 records planned as 3, 5 or 8: 4 shards (the shard floor) either way, written as the
  spill path writes them, and nothing else left in the folder; records given as a list are
  not read twice when the plan is undone (review-29c finding 2)."""
  records = [(key, bytes([key]) * (100 + key)) for key in range(5)]
  written = _write_both_ways(tmp_path, records, lambda: planned, sharding.MinShardsConfig(),
                             monkeypatch, given)
  assert written["planned"][:3] == written["spilled"][:3]  # files, shard_lengths, bytes
  assert len(written["spilled"][0]) == 4


@pytest.mark.parametrize("count, planned", [(137, 137), (138, 138), (139, 139), (137, 138)])
def test_a_split_near_a_shard_count_step_waits_for_its_real_size(
    tmp_path, monkeypatch, count, planned):
  """137 records of 100 bytes make 4 shards, 138 make 8: a plan within 1 % of that step
  cannot know the count from its first record, so nothing is written before the split is
  taken (review-29c finding 1: dropping the first record there lost it, with every test
  passing). The shards are the spill path's, byte for byte."""
  records = [(key, bytes([key]) * 100) for key in range(count)]
  written = _write_both_ways(tmp_path, records, lambda: planned, _SmallShards(), monkeypatch)
  assert written["planned"] == written["spilled"]  # files, shard_lengths, bytes, writes
  files, shard_lengths, num_bytes, _ = written["planned"]
  assert len(files) == len(shard_lengths) == (4 if count < 138 else 8)
  assert sum(shard_lengths) == count and num_bytes == 100 * count


@pytest.mark.parametrize("planned", [3, 8])
def test_a_plan_undone_writes_each_record_once_more_only(tmp_path, monkeypatch, planned):
  """5 records planned as 8 (a bad file skipped) or as 3: each record is written twice in
  all, once as planned (or, past the plan, to the spill) and once to its final shard. The
  planned shards are read straight into the final ones: before, they were copied into the
  spill first, a file past MEMORY_LIMIT (review-29c finding 3)."""
  monkeypatch.setattr(prepared_records, "MEMORY_LIMIT", 0)  # whatever is spilled is a file
  spilled = []
  real_add = prepared_records._Spill.add  # pylint: disable=protected-access
  monkeypatch.setattr(prepared_records._Spill, "add",  # pylint: disable=protected-access
                      lambda self, record: spilled.append(record) or real_add(self, record))
  records = [(key, bytes([key]) * (100 + key)) for key in range(5)]
  written = _write_both_ways(tmp_path, records, lambda: planned, sharding.MinShardsConfig(),
                             monkeypatch)
  assert written["planned"][:3] == written["spilled"][:3]  # files, shard_lengths, bytes
  final = written["spilled"][3]
  assert sum(n for _, n in final) == 5  # the spill path: one copy in the spill, then these
  assert spilled[:5] == [record for _, record in records]
  writes = written["planned"][3]
  assert writes[-len(final):] == final  # the final shards, after the planned ones
  assert sum(n for _, n in writes) + len(spilled[5:]) == 2 * 5
  assert len(spilled[5:]) == max(0, 5 - planned)  # only the records past the plan
  assert list((tmp_path / "planned").glob("*.tmp")) == []
