"""Uploads proportional to the change: publishing a new version copies server-side what an
earlier committed version holds byte for byte (under any name) and uploads only the rest,
on the S3 test server, the GCS one and a folder. A forged or unreadable manifest of an
earlier version, or an object changed after its commit, neither stops the publish nor ends
up in the new version; a publish killed after its copies resumes without doing them again."""

import dataclasses
import json
import os
import pathlib
import shutil

import pytest

from publish_helpers import FOLDER, TINY, kill_publisher_after
from imagesets.storage import bucket as bucket_lib
from imagesets.storage import fetch
from imagesets.storage import manifest as manifest_lib
from imagesets.publishing import publish
from imagesets.storage import versions

NEXT = "synthetic_images/tiny:1.1.0"
NEXT_FOLDER = "synthetic_images/tiny/1.1.0"
PATCH_FOLDER = "synthetic_images/tiny/1.0.1"  # 1.0.0's files again
# The data files of 1.1.0 (`_grow`) that 1.0.0 does not have; its 11 others are 1.0.0's bytes.
NEW_IN_NEXT = {"synthetic_images-train.tfrecord-00004-of-00005",
               "synthetic_images-test.tfrecord-00000-of-00004"}
COMMIT = {versions.MANIFEST, *versions.COMMIT_FILES}  # always uploaded, after the data


def _shard(folder: pathlib.Path, split: str, index: int, count: int) -> pathlib.Path:
  return folder / f"synthetic_images-{split}.tfrecord-{index:05d}-of-{count:05d}"


def _grow(folder: pathlib.Path, info: dict) -> None:
  """1.1.0 as an incremental build makes it: train gets a fifth shard, so its four shards
  are renamed (-of-00005) with their bytes unchanged; test's first shard gets other bytes."""
  lengths = {split["name"]: split["shardLengths"] for split in info["splits"]}
  for index in range(4):
    _shard(folder, "train", index, 4).rename(_shard(folder, "train", index, 5))
  # A TFRecord file is its records one after the other: two shards joined are one shard.
  _shard(folder, "train", 4, 5).write_bytes(
      _shard(folder, "train", 0, 5).read_bytes() + _shard(folder, "train", 1, 5).read_bytes())
  lengths["train"].append(str(int(lengths["train"][0]) + int(lengths["train"][1])))
  first = _shard(folder, "test", 0, 4)
  first.write_bytes(first.read_bytes() * 2)
  lengths["test"][0] = str(2 * int(lengths["test"][0]))


def _prepare(data_dir: pathlib.Path, folder: str, change=None) -> None:
  """Prepares the version `folder` in data_dir from 1.0.0's files, then `change(path, info)`
  (info: its dataset_info.json, parsed, written back after)."""
  path = data_dir / folder
  shutil.copytree(data_dir / FOLDER, path)
  info = json.loads((path / versions.DATASET_INFO).read_text())
  info["version"] = path.name
  if change:
    change(path, info)
  (path / versions.DATASET_INFO).write_text(json.dumps(info))


@pytest.fixture
def data_dir(tiny_data_dir, tmp_path) -> pathlib.Path:
  """synthetic_images/tiny 1.0.0, 1.0.1 (the same data files) and 1.1.0 (`_grow`)."""
  data_dir = tmp_path / "tfds"
  shutil.copytree(tiny_data_dir, data_dir)
  _prepare(data_dir, PATCH_FOLDER)
  _prepare(data_dir, NEXT_FOLDER, _grow)
  return data_dir


@dataclasses.dataclass
class Run:
  result: publish.PublishResult
  uploads: list[str]        # names in the version's folder, in upload order
  copies: dict[str, str]    # name in the version's folder: the source's path in the bucket
  log: list[str]


def _publish(spec: str, data_dir: pathlib.Path, url: str) -> Run:
  """Publishes `spec`, recording its uploads and server-side copies."""
  folder = versions.Ref.parse(spec).folder + "/"
  uploads, copies = [], {}
  upload, copy = bucket_lib.Bucket.upload, bucket_lib.Bucket.copy

  def recorded_upload(self, local_path, rel, progress=None):
    uploads.append(rel.removeprefix(folder))
    return upload(self, local_path, rel, progress)

  def recorded_copy(self, src_rel, dst_rel):
    copies[dst_rel.removeprefix(folder)] = src_rel
    return copy(self, src_rel, dst_rel)

  log = []
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(bucket_lib.Bucket, "upload", recorded_upload)
    patch.setattr(bucket_lib.Bucket, "copy", recorded_copy)
    result = publish.publish(spec, data_dir, url, progress=False, log=log.append)
  return Run(result, uploads, copies, log)


def _data_files(data_dir: pathlib.Path, folder: str) -> set[str]:
  return {p.name for p in (data_dir / folder).iterdir()} - set(versions.COMMIT_FILES)


def _same_bytes(name: str) -> str:
  """The name in 1.0.0 of a file of 1.1.0 that `_grow` kept."""
  return name.replace("-of-00005", "-of-00004")


def _published_as_prepared(url: str, data_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
  """1.1.0 in the bucket is the local folder byte for byte: its manifest names the local
  content, and a fetch (which checks every object against it) gives the local bytes."""
  ref, local = versions.Ref.parse(NEXT), data_dir / NEXT_FOLDER
  published = manifest_lib.published(bucket_lib.Bucket(url), ref)
  assert published.content() == manifest_lib.describe_local(ref, local).content()
  fetched = pathlib.Path(fetch.fetch(url, NEXT, cache_dir=tmp_path / "cache",
                                     progress=False)) / NEXT_FOLDER
  for path in local.iterdir():
    assert (fetched / path.name).read_bytes() == path.read_bytes(), path.name


@pytest.mark.parametrize("bucket_url", ["s3", "gs", "file"], indirect=True)
def test_a_new_version_uploads_only_what_earlier_versions_lack(bucket_url, data_dir, tmp_path):
  assert _publish(TINY, data_dir, bucket_url).result.copied == 0  # (nothing to copy from)
  run = _publish(NEXT, data_dir, bucket_url)

  assert sorted(run.uploads) == sorted(NEW_IN_NEXT | COMMIT)
  kept = _data_files(data_dir, NEXT_FOLDER) - NEW_IN_NEXT
  assert run.copies == {name: f"{FOLDER}/{_same_bytes(name)}" for name in kept}
  assert (run.result.uploaded, run.result.copied, run.result.reused) == (5, 11, 0)
  sizes = bucket_lib.Bucket(bucket_url).list_files(NEXT_FOLDER)
  assert run.result.num_bytes == sum(sizes[f"{NEXT_FOLDER}/{name}"] for name in run.uploads)
  assert "5 object(s) uploaded and verified, 11 copied server-side" in run.log[-1]
  if not bucket_url.startswith(("s3:", "gs:")):  # a folder: hard links, no byte copied
    for name, source in run.copies.items():
      assert os.path.samefile(pathlib.Path(bucket_url) / source,
                              pathlib.Path(bucket_url) / NEXT_FOLDER / name)
  _published_as_prepared(bucket_url, data_dir, tmp_path)


def _forged(change):
  """A forgery of a manifest's bytes: `change(files)` made to its files."""
  def forge(data: bytes) -> bytes:
    manifest = json.loads(data)
    change(manifest["files"])
    return json.dumps(manifest).encode()
  return forge


def _unsafe_name(files: dict) -> None:
  files["../x"] = files["README.md"]


def _swapped_digests(files: dict) -> None:
  """Train shards 0 and 1 each said to hold the other's bytes (one size: only the
  verification of the copies can tell)."""
  first, second = (f"synthetic_images-train.tfrecord-0000{i}-of-00004" for i in (0, 1))
  files[first], files[second] = files[second], files[first]


@pytest.mark.parametrize("bucket_url", ["s3", "file"], indirect=True)
@pytest.mark.parametrize("forgery, uploaded_instead", [
    (_forged(_unsafe_name), set()),
    (lambda data: data[:100], set()),  # (unreadable: not JSON)
    (_forged(_swapped_digests), {"synthetic_images-train.tfrecord-00000-of-00005",
                        "synthetic_images-train.tfrecord-00001-of-00005"}),
], ids=["unsafe-name", "unreadable", "swapped-digests"])
def test_a_forged_manifest_of_an_earlier_version_is_not_trusted(
    forgery, uploaded_instead, bucket_url, data_dir, tmp_path):
  _publish(TINY, data_dir, bucket_url)
  assert _publish("synthetic_images/tiny:1.0.1", data_dir, bucket_url).result.copied == 12
  store, rel = bucket_lib.Bucket(bucket_url), f"{PATCH_FOLDER}/{versions.MANIFEST}"
  store.write_bytes(rel, forgery(store.read_bytes(rel)))

  run = _publish(NEXT, data_dir, bucket_url)  # 1.0.1, newest, is read first
  assert run.result.status == "published"
  assert sorted(run.uploads) == sorted(NEW_IN_NEXT | COMMIT | uploaded_instead)
  assert run.result.copied == 11 - len(uploaded_instead)
  if uploaded_instead:  # each tried, found wrong by its checksum, uploaded
    assert uploaded_instead <= run.copies.keys()
    assert sum("does not match" in line for line in run.log) == len(uploaded_instead)
  else:  # the whole manifest refused, before any of its names reached a path
    assert {source.rsplit("/", 1)[0] for source in run.copies.values()} == {FOLDER}
    assert any(line.startswith("not copying from synthetic_images/tiny:1.0.1: ")
               for line in run.log), run.log
  assert all(rel.startswith("synthetic_images/") and "/x" not in rel
             for rel in store.list_files())
  _published_as_prepared(bucket_url, data_dir, tmp_path)


@pytest.mark.parametrize("bucket_url", ["s3", "file"], indirect=True)
def test_a_copy_source_changed_after_its_commit_is_uploaded_instead(bucket_url, data_dir,
                                                                    tmp_path):
  _publish(TINY, data_dir, bucket_url)
  store = bucket_lib.Bucket(bucket_url)
  changed = f"{FOLDER}/synthetic_images-train.tfrecord-00002-of-00004"
  data = bytearray(store.read_bytes(changed))
  data[len(data) // 2] ^= 1  # same size: the listing cannot tell, the copy's checksum can
  store.write_bytes(changed, bytes(data))

  run = _publish(NEXT, data_dir, bucket_url)
  again = "synthetic_images-train.tfrecord-00002-of-00005"
  assert run.copies[again] == changed
  assert sorted(run.uploads) == sorted(NEW_IN_NEXT | COMMIT | {again})
  assert (run.result.uploaded, run.result.copied) == (6, 10)
  assert any(line.startswith(f"{store.url_of(NEXT_FOLDER)}/{again}, copied from ")
             and line.endswith(f"does not match {data_dir / NEXT_FOLDER / again}; uploading it")
             for line in run.log), run.log
  _published_as_prepared(bucket_url, data_dir, tmp_path)


@pytest.mark.parametrize("bucket_url", ["s3", "file"], indirect=True)
def test_a_publish_killed_after_its_copies_resumes_without_copying_again(bucket_url, data_dir,
                                                                         tmp_path):
  _publish(TINY, data_dir, bucket_url)
  kill_publisher_after(0, NEXT, data_dir, bucket_url, tmp_path)  # (at its first upload)
  store = bucket_lib.Bucket(bucket_url)
  partial = {rel.rsplit("/", 1)[1] for rel in store.list_files(NEXT_FOLDER)}
  assert partial == _data_files(data_dir, NEXT_FOLDER) - NEW_IN_NEXT | {versions.CLAIM}
  assert versions.Ref.parse(NEXT) not in versions.published_refs(store)

  run = _publish(NEXT, data_dir, bucket_url)
  assert (run.result.reused, run.result.copied, run.copies) == (11, 0, {})
  assert sorted(run.uploads) == sorted(NEW_IN_NEXT | COMMIT)
  _published_as_prepared(bucket_url, data_dir, tmp_path)
