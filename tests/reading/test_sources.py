"""sources: a version opened as a `Source`, by name, from a local build or a bucket, and read."""

import contextlib
import hashlib
import json
import pathlib
import re
import shutil
import uuid

import pytest
import tensorflow as tf

import bucket_servers as servers
import imagesets
from imagesets.storage import bucket as bucket_lib
from imagesets.storage import fetch as fetch_lib
from imagesets.storage import versions
from imagesets.publishing import publish
from imagesets.reading import shard_cache as shard_cache_lib
from imagesets.reading import sources
from imagesets.reading import streaming
from streamed_versions import (FOLDER, ONE_FORMAT, SPEC, local_examples, our_line, published_to,
                               streamed_examples, wait_for_downloads)


def test_a_name_is_read_in_the_data_dir_unless_a_folder_here_is_named(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert sources._readings("pets:1.0.0", "/data") == ([("pets:1.0.0", "/data")], 0)
  assert sources._readings("pets/small:1.0.0", "/data") == ([("pets/small:1.0.0", "/data")], 0)
  (tmp_path / "builds" / "pets").mkdir(parents=True)
  # DATA_DIR/NAME:VERSION, DATA_DIR/NAME/CONFIG:VERSION, then NAME/CONFIG:VERSION in the
  # data dir, whose error is shown when none opens
  assert sources._readings("builds/pets:1.0.0", "/data") == (
      [("pets:1.0.0", "./builds"), ("builds/pets:1.0.0", "."), ("builds/pets:1.0.0", "/data")], 2)
  assert sources._readings("s3://team/tfds/pets/small:1.0.0/", "/data") == (
      [("small:1.0.0", "s3://team/tfds/pets"), ("pets/small:1.0.0", "s3://team/tfds")], 0)
  assert sources._readings("/builds/pets:1.0.0", "/data") == (
      [("pets:1.0.0", "/builds")], 0)


def test_a_version_opens_by_name_or_by_its_whole_path_and_a_wrong_one_says_which(
    tiny_data_dir, tmp_path, monkeypatch):
  spec = "synthetic_images/tiny:1.0.0"
  by_name = sources.open_named(spec, str(tiny_data_dir))
  assert by_name.builder.info.full_name == "synthetic_images/tiny/1.0.0"
  here = tmp_path / "here"
  shutil.copytree(tiny_data_dir, here / "builds")
  monkeypatch.chdir(here)
  for text in (f"builds/{spec}", f"{here}/builds/{spec}", f"./builds/{spec}"):
    opened = sources.open_named(text, "/nowhere")
    assert opened.builder.info.full_name == "synthetic_images/tiny/1.0.0", text
  with pytest.raises(versions.DatasetNotPreparedError) as error:
    sources.open_named("builds/synthetic_images/tiny:9.9.9", "/nowhere")
  assert "9.9.9" in str(error.value)


def test_a_cached_version_is_read_without_the_bucket(built, tmp_path):
  url = published_to(built, "file", tmp_path)
  bucket_folder = pathlib.Path(url[len("file://"):])
  ds = imagesets.load(SPEC, "train", url, cache_dir=tmp_path / "c", shuffle=True, seed=0,
                      num_epochs=2)
  iterator = iter(ds)
  for _ in range(160):  # the first epoch: every shard downloaded
    next(iterator)
  wait_for_downloads(shard_cache_lib.shared(fetch_lib.cache_root(tmp_path / "c")))
  bucket_folder.rename(bucket_folder.with_name("gone"))  # any request now fails
  assert sum(1 for _ in iterator) == 160
  # Opened again with the version pinned: the cached manifest, no network.
  assert len(streamed_examples(url, "train", tmp_path / "c")) == 160


@ONE_FORMAT
def test_names_leaving_the_version_folder_are_refused_before_any_write(built, tmp_path):
  bad_names = ["../escaped-1", str(tmp_path / "outside" / "escaped-2"), "a/../../escaped-3"]
  for index, name in enumerate(bad_names):
    url = published_to(built, "file", tmp_path)
    bucket = bucket_lib.Bucket(url)
    payload = b"export PATH=/evil:$PATH\n"
    bucket.write_bytes(f"{FOLDER}/{name}", payload)   # where a naive join would read it
    manifest = json.loads(bucket.read_bytes(f"{FOLDER}/imagesets-manifest.json"))
    manifest["files"][name] = {"size": len(payload), "md5": hashlib.md5(payload).hexdigest(),
                               "sha256": hashlib.sha256(payload).hexdigest()}
    bucket.write_bytes(f"{FOLDER}/imagesets-manifest.json", json.dumps(manifest).encode())
    for attempt in (lambda: imagesets.load(SPEC, "train", url, cache_dir=tmp_path / f"c{index}"),
                    lambda: imagesets.fetch(url, SPEC, cache_dir=tmp_path / f"f{index}",
                                            progress=False)):
      with pytest.raises(Exception) as error:
        attempt()
      message = our_line(error.value)
      assert "\n" not in message and repr(name) in message and "refused" in message
    outside = [p for p in tmp_path.rglob("escaped-*") if "bucket-" not in str(p)]
    assert outside == [] and not (tmp_path / "outside").exists()


@ONE_FORMAT
@pytest.mark.parametrize("config", ["DEEP", "..", ".hidden", 5])
def test_a_default_config_leaving_the_cache_is_refused_before_any_write(built, tmp_path,
                                                                        config):
  """The bucket's .config/metadata.json names the config of a spec without one: it is
  checked like a manifest's file names before it reaches a path (here the bucket side of
  the forged name is a real version, so a naive join reads it and writes next to it)."""
  root = tmp_path / "evil"
  if config == "DEEP":
    config = "../" * 40 + str(tmp_path / "OUT")[1:]
  shutil.copytree(built / FOLDER, tmp_path / "OUT" / "1.0.0")
  (root / "synthetic_images" / ".config").mkdir(parents=True)
  (root / "synthetic_images" / ".config" / "metadata.json").write_text(
      json.dumps({"default_config_name": config}))
  before = sorted(tmp_path.rglob("*"))
  url = f"file://{root}"
  for attempt in (lambda: sources.open_source("synthetic_images:1.0.0", url,
                                              cache_dir=tmp_path / "c"),
                  lambda: imagesets.fetch(url, "synthetic_images:1.0.0",
                                          cache_dir=tmp_path / "f", progress=False)):
    with pytest.raises(Exception) as error:
      attempt()
    message = our_line(error.value)
    assert "\n" not in message and "refused" in message and "metadata.json" in message
  after = [p for p in sorted(tmp_path.rglob("*"))
           if not {tmp_path / "c", tmp_path / "f"} & {*p.parents, p}]
  assert after == before


def _relabelled_copy(data_dir, target):
  """The same version with other content: every label moved by one (a staging copy)."""
  shutil.copytree(data_dir, target)
  for path in (target / FOLDER).glob("*.tfrecord-*"):
    records = []
    for record in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
      example = tf.train.Example.FromString(record)
      label = example.features.feature["label"].int64_list
      label.value[0] = (label.value[0] + 1) % 10
      records.append(example.SerializeToString())
    with tf.io.TFRecordWriter(str(path)) as writer:
      for record in records:
        writer.write(record)
  return target


@ONE_FORMAT
def test_one_bucket_name_on_two_s3_servers_is_two_buckets(built, bucket_servers, tmp_path):
  other = _relabelled_copy(built, tmp_path / "staging-build")
  url = f"s3://{servers.BUCKET}/{uuid.uuid4().hex[:12]}/tfds"
  (tmp_path / "weed2").mkdir()
  with servers.seaweedfs_s3(tmp_path / "weed2") as second:
    publish.publish(SPEC, built, url, progress=False)              # production
    with servers.environment({"AWS_ENDPOINT_URL": second}):
      publish.publish(SPEC, other, url, progress=False)            # staging
    for _ in range(2):  # in turn, through one cache_dir
      assert streamed_examples(url, "train", tmp_path / "c") == local_examples(built, "train")
      with servers.environment({"AWS_ENDPOINT_URL": second}):
        assert streamed_examples(url, "train", tmp_path / "c") == local_examples(other,
                                                                                 "train")


def test_a_fetched_version_is_streamed_from_its_copy(built, tmp_path, bucket_reads):
  url = published_to(built, "file", tmp_path)
  data_dir = imagesets.fetch(url, SPEC, cache_dir=tmp_path / "c", progress=False)
  source = sources.open_source(SPEC, url, cache_dir=tmp_path / "c")
  assert source.cache is None and source.folder == pathlib.Path(data_dir) / FOLDER
  opened = bucket_reads(url)
  assert sorted(streamed_examples(url, "train", tmp_path / "c")) == sorted(
      local_examples(built, "train"))
  assert sum(opened.values()) == 0


def test_a_source_reads_a_split_in_stored_order_local_or_streamed(built, tmp_path):
  url = published_to(built, "file", tmp_path)
  expected = [tf.train.Example.FromString(r) for r in streaming.records(
      sources.open_source(SPEC, built), "test").as_numpy_iterator()]
  source = sources.open_source(SPEC, url, cache_dir=tmp_path / "c", cache_limit="1GB")
  assert source.streamed and not sources.open_source(SPEC, built).streamed
  got = [tf.train.Example.FromString(r)
         for r in streaming.records(source, "test").as_numpy_iterator()]
  assert got == expected and len(got) == 40
  labels = [e.features.feature["label"].int64_list.value[0] for e in got]
  assert labels == [label for _, label in local_examples(built, "test")]
  # The same records without TensorFlow, local or streamed; a shard is held while read,
  # let go when the reading ends or is dropped half way.
  for read in (source, sources.open_source(SPEC, built)):
    assert [tf.train.Example.FromString(r) for r in read.stored_records("test")] == expected
  assert source.cache._pins == {}
  records = source.stored_records("train")
  next(records)
  assert source.cache._pins   # (the first window's shards)
  records.close()
  assert source.cache._pins == {}


@ONE_FORMAT
def test_a_damaged_local_tfrecord_shard_is_an_error_naming_it_never_wrong_records(
    built, tmp_path):
  """Read without TensorFlow, a local shard was never checked against a SHA-256: each
  record's CRC is (TensorFlow's reader said "corrupted record" too)."""
  copy = pathlib.Path(shutil.copytree(built, tmp_path / "copy"))
  (shard,) = (copy / FOLDER).glob("*-test.tfrecord-00000-of-*")
  data = bytearray(shard.read_bytes())
  data[len(data) // 2] ^= 0x01
  shard.write_bytes(bytes(data))
  with pytest.raises(ValueError, match=re.escape(f"{shard}: record ") + r"\d+ is damaged"):
    list(sources.open_source(SPEC, copy).stored_records("test"))


def test_the_parts_of_a_split_are_contiguous_and_cover_it_once():
  for count in range(40):
    for parts in range(1, 9):
      ranges = [sources.part_range(count, (i, parts)) for i in range(parts)]
      assert [i for r in ranges for i in r] == list(range(count)), (count, parts)
      assert max(map(len, ranges)) - min(map(len, ranges)) <= 1


def _with_extra(url: str, extra: dict[str, bytes]) -> None:
  """The version at `url` published again with the files `extra` ({name: bytes}) besides
  its own (in the bucket and its manifest), in place of those a previous call added."""
  bucket = bucket_lib.Bucket(url)
  rel = f"{FOLDER}/{versions.MANIFEST}"
  manifest = json.loads(bucket.read_bytes(rel))
  for name in [name for name in manifest["files"] if name.startswith("extra")]:
    del manifest["files"][name]
  shutil.rmtree(pathlib.Path(bucket.root, FOLDER, "extra"), ignore_errors=True)  # (a folder)
  with contextlib.suppress(FileNotFoundError):
    pathlib.Path(bucket.root, FOLDER, "extra").unlink()
  for name, data in extra.items():
    bucket.write_bytes(f"{FOLDER}/{name}", data)
    manifest["files"][name] = {"size": len(data), "md5": hashlib.md5(data).hexdigest(),
                               "sha256": hashlib.sha256(data).hexdigest()}
  bucket.write_bytes(rel, json.dumps(manifest).encode())


@ONE_FORMAT
@pytest.mark.parametrize("before, after", [("extra", "extra/y"), ("extra/y", "extra")])
def test_a_version_published_again_with_a_file_where_a_folder_was_streams(built, tmp_path,
                                                                           before, after):
  """A file of the version streamed before where a folder of the version published again
  goes (or the other way round) was a raw FileExistsError (IsADirectoryError) at every
  open: the earlier content's files make way for the new one's."""
  url = published_to(built, "file", tmp_path)
  _with_extra(url, {before: b"before"})
  folder = sources.open_source(SPEC, url, cache_dir=tmp_path / "c").folder
  assert (folder / before).read_bytes() == b"before"
  _with_extra(url, {after: b"after"})
  assert sources.open_source(SPEC, url, cache_dir=tmp_path / "c").folder == folder
  assert (folder / after).read_bytes() == b"after"


def test_shards_named_by_another_template_stream_through_the_cache(tiny_data_dir, tmp_path):
  """Shards are what dataset_info.json names (TFDS reads any `filepathTemplate`), not names
  ending in -NNNNN-of-NNNNN: others were downloaded whole with the metadata, past
  cache_limit and outside the shard cache, and reading them was a raw ValueError."""
  data_dir = tmp_path / "data"
  shutil.copytree(tiny_data_dir, data_dir)
  folder = data_dir / "synthetic_images/tiny/1.0.0"
  info = json.loads((folder / versions.DATASET_INFO).read_text())
  for split in info["splits"]:
    split["filepathTemplate"] = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}.shard"
  (folder / versions.DATASET_INFO).write_text(json.dumps(info))
  for shard in folder.glob("*-of-*"):
    shard.rename(shard.with_name(f"{shard.name}.shard"))
  local = sources.open_source("synthetic_images/tiny:1.0.0", str(data_dir))
  url = f"file://{tmp_path}/bucket"
  publish.publish("synthetic_images/tiny:1.0.0", data_dir, url, progress=False)
  streamed = sources.open_source("synthetic_images/tiny:1.0.0", url, cache_dir=tmp_path / "c",
                                 cache_limit="1MB")
  assert sorted(streamed.shards) == sorted(p.name for p in folder.glob("*.shard"))
  assert not list(streamed.folder.glob("*.shard"))
  for split in ("train", "test"):
    assert list(streamed.stored_records(split)) == list(local.stored_records(split))
