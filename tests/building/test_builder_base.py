"""Registration, CLI and checksum rules shared by every builder."""


import types

import tensorflow_datasets as tfds

import imagesets  # noqa: F401
from conftest import REPO, run, tfds_cli, warm
from imagesets import checksums


def test_cli_build_through_imports(tmp_path):
  result = tfds_cli("build", "synthetic_images", "--imports", "imagesets", "--config", "tiny",
                    "--data_dir", str(tmp_path))
  assert list((tmp_path / "synthetic_images" / "tiny" / "1.0.0").glob("*.tfrecord-*"))
  # TFDS asks whether the version is prepared before building it; a version folder that
  # does not exist yet is simply not prepared (TFDS warned "Variant folder ... has no
  # dataset_info.json").
  assert "Variant folder" not in result.stdout + result.stderr, result.stdout


def test_builder_file_loads_by_path_beside_the_installed_package():
  # What `tfds build datasets/<name>` and Beam workers do, in both import orders.
  script = """
import sys, importlib
sys.path.insert(0, {datasets!r})
{first}
{second}
import tensorflow_datasets as tfds
assert tfds.builder_cls("synthetic_images").__module__ == (
    "imagesets.synthetic_images.synthetic_images_dataset_builder")
print("ok")
"""
  by_path = "importlib.import_module('synthetic_images.synthetic_images_dataset_builder')"
  for first, second in [("import imagesets", by_path), (by_path, "import imagesets")]:
    out = run([warm("python"), "-c", script.format(datasets=str(REPO / "datasets"),
                                                   first=first, second=second)])
    assert out.stdout.strip().endswith("ok")


def test_schema_command_from_the_issue():
  out = run([warm("python"), "-c", "import imagesets, tensorflow_datasets as tfds; "
             "print(tfds.builder('synthetic_images').info.features)"])
  assert "Image(shape=(224, 224, 3), dtype=uint8)" in out.stdout
  assert "ClassLabel(shape=(), dtype=int64, num_classes=10)" in out.stdout


def test_checksums_come_from_the_top_level_folder():
  builder_cls = tfds.builder_cls("synthetic_images")
  assert str(builder_cls._checksums_path) == f"{checksums.DIRECTORY}/synthetic_images.txt"
  flowers = tfds.core.download.checksums.load_url_infos(
      tfds.core.Path(checksums.DIRECTORY) / "flowers.txt")
  info = flowers["http://download.tensorflow.org/example_images/flower_photos.tgz"]
  assert info.size == 228_813_984
  assert info.checksum == "4c54ace7911aaffe13a365c34f650e71dd5bf1be0a58b464e5a7183e3e595d9c"


def test_a_build_leaves_no_temporary_folder_behind(tmp_path, monkeypatch):
  """TFDS looks a version not built yet up in its own catalogue through a temporary
  folder it never removes; our builders skip that lookup (none of ours is there)."""
  import tempfile
  from imagesets.cli import demo  # noqa: F401  (every builder of ours registered)
  temporary = tmp_path / "tmp"
  temporary.mkdir()
  monkeypatch.setattr(tempfile, "tempdir", str(temporary))
  for name in ("synthetic_images/tiny", "flowers", "voc_segmentation"):
    builder = tfds.builder(name, data_dir=tmp_path / "data")
    assert not builder.is_prepared()
  tfds.builder("synthetic_images/tiny", data_dir=tmp_path / "data").download_and_prepare()
  # (TensorFlow's autograph may leave a file of the functions it converted: its own)
  assert [p.name for p in temporary.iterdir() if not p.name.startswith("__autograph")] == []


def test_metadata_is_saved_as_tfds_saves_it_and_loads_back(tmp_path):
  from imagesets.building import builder_base
  content = {"content_files": {f"cat/{i:05d}.jpg": f"{i:016x}" for i in range(50)},
             "class_names": ["cat", "dög", "\x1b"], "duplicates": {"quality": {"dark": 3}},
             "scale": 0.1 + 0.2, "none": None, "flags": [True, False]}
  ours, theirs = tmp_path / "ours", tmp_path / "theirs"
  ours.mkdir(), theirs.mkdir()
  builder_base.Metadata(content).save_metadata(ours)
  tfds.core.MetadataDict(content).save_metadata(theirs)
  assert (ours / "metadata.json").read_bytes() == (theirs / "metadata.json").read_bytes()
  loaded = builder_base.Metadata()
  loaded.load_metadata(ours)
  assert loaded == content


def test_the_page_locates_each_record_by_its_shard_and_offset_an_empty_shard_among_them(
    tmp_path):
  """`_page_catalog`'s records found from their index rows alone: shards of 2, 0, 1 and 3
  records (TFDS's writer leaves none empty; an index may list one): each record read at
  its place is its own; one read at another's place (of the same size) is an error, never
  another photo's picture."""
  import itertools
  import pytest
  import tensorflow as tf
  from imagesets.building import builder_base, record_index
  from imagesets.storage import tfrecord_files

  def record(name: str) -> bytes:
    feature = {"file_name": tf.train.Feature(bytes_list=tf.train.BytesList(value=[name.encode()])),
               "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[0])),
               "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[name.encode() * 3]))}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()

  shards = {"s-00000": ["a/1.jpg", "a/22.jpg"], "s-00001": [], "s-00002": ["b/333.jpg"],
            "s-00003": ["b/4.jpg", "b/5.jpg", "c/666.jpg"]}
  rows = []
  for name, keys in shards.items():
    records = [record(key) for key in keys]
    tfrecord_files.write(tmp_path / name, records)
    rows += [(key, len(data), None) for key, data in zip(keys, records)]
  starts = list(itertools.accumulate(map(len, shards.values()), initial=0))
  offsets = [offset for start, end in zip(starts, starts[1:])
             for offset in record_index.offsets([row[1] for row in rows[start:end]])]
  assert len(offsets) == len(rows) and record_index.offsets([]) == []
  held = types.SimpleNamespace(task=None, mask=None)
  labels = [(key.split("/")[0], 0) for key, _, _ in rows]
  digests = {"s-00000": "0" * 64, "s-00003": "3" * 64}  # (the shards whose bytes are known)
  places = []
  for position, (key, _, _) in enumerate(rows):
    located = builder_base._located(tmp_path, "train", rows, labels, [None] * len(rows),
                                    list(shards), starts, offsets, "tfrecord", held, digests,
                                    position)
    assert (located.file_name, located.image) == (key, key.encode() * 3)
    places.append(located.record)
  # (a record's place: only in a shard whose bytes are known, and no two alike)
  assert places[2] is None and None not in places[:2] + places[3:]
  assert len(set(places) - {None}) == 5
  wrong = builder_base._located(tmp_path, "train", rows, labels, [None] * len(rows),
                                list(shards), starts, [0] * len(rows), "tfrecord", held,
                                digests, 4)
  with pytest.raises(record_index.RecordIndexError, match="read for b/5.jpg is b/4.jpg"):
    wrong.image  # pylint: disable=pointless-statement
