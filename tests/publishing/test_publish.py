"""publish: publish -> list -> fetch -> tfds.load through the production code path, on a
real S3 server, a GCS server and a local folder; immutability, kills, damage."""

import errno
import hashlib
import json
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest
import tensorflow_datasets as tfds

import bucket_servers as servers
from conftest import build_synthetic, warm
from hang_guard import returns_within
from publish_helpers import FOLDER, TINY, examples, kill_publisher_after
from imagesets.storage import bucket as bucket_lib
from imagesets.reading import input_pipeline
from imagesets.reports import page_pictures
from imagesets.storage import fetch
from imagesets.publishing import listing
from imagesets.publishing import publish
from imagesets.storage import versions

def quiet_publish(spec, data_dir, url):
  return publish.publish(spec, data_dir, url, progress=False)


def test_publish_list_fetch_and_load_give_the_local_examples(bucket_url, tiny_data_dir, tmp_path):
  result = quiet_publish("synthetic_images/tiny", tiny_data_dir, bucket_url)  # latest version
  assert (result.status, result.ref) == ("published", versions.Ref.parse(TINY))

  published, unfinished = listing.list_published(bucket_url)
  assert unfinished == []
  (item,) = published
  assert item.ref == versions.Ref("synthetic_images", "tiny", "1.0.0")
  assert item.manifest.splits == {"train": 12, "test": 4}
  local_files = sorted(p for p in (tiny_data_dir / FOLDER).iterdir())
  assert item.manifest.num_bytes == sum(p.stat().st_size for p in local_files)
  assert item.manifest.published_at.endswith("+00:00")

  data_dir = fetch.fetch(bucket_url, TINY, cache_dir=tmp_path / "cache", progress=False)
  assert pathlib.Path(data_dir) == fetch.cached_data_dir(bucket_url, tmp_path / "cache")
  assert examples(data_dir) == examples(tiny_data_dir)
  # The cache is a complete TFDS data_dir: shards byte-identical, default-config metadata too.
  for path in local_files:
    assert (pathlib.Path(data_dir) / FOLDER / path.name).read_bytes() == path.read_bytes()
  assert (pathlib.Path(data_dir) / "synthetic_images/.config/metadata.json").read_bytes() == \
      (tiny_data_dir / "synthetic_images/.config/metadata.json").read_bytes()


def test_bucket_layout_is_a_tfds_data_dir(bucket_url, tiny_data_dir):
  quiet_publish(TINY, tiny_data_dir, bucket_url)
  store = bucket_lib.Bucket(bucket_url)
  listed = store.list_files()
  local = {p.relative_to(tiny_data_dir).as_posix(): p.stat().st_size
           for p in (tiny_data_dir / "synthetic_images").rglob("*")
           if p.is_file() and p.name != page_pictures.FILE}  # (the builds' own cache)
  manifest = listed.pop(f"{FOLDER}/{versions.MANIFEST}")
  claim = listed.pop(f"{FOLDER}/{versions.CLAIM}")  # (hidden: TFDS never looks at it)
  assert listed == local and manifest > 0 and claim > 0
  assert store.read_bytes("synthetic_images/.config/metadata.json") == \
      b'{"default_config_name": "default"}'


def test_tfds_alone_loads_a_published_folder_by_name(tmp_path):
  # What the team does without our package: tfds.load('NAME:VERSION', data_dir=BUCKET).
  # The default config (resolved through .config/metadata.json) and an explicit one.
  source = build_synthetic(build_synthetic(tmp_path / "built", "default"), "tiny")
  team = tmp_path / "team-bucket" / "tfds"
  quiet_publish("synthetic_images", source, str(team))   # default config, latest version
  quiet_publish(TINY, source, str(team))
  script = f"""
import tensorflow_datasets as tfds, sys
assert 'imagesets' not in sys.modules
for name in ('synthetic_images:1.0.0', '{TINY}'):
  builder = tfds.builder(name, data_dir={str(team)!r})
  ds = tfds.load(name, split='train', data_dir={str(team)!r}, download=False)
  print(builder.builder_config.name, sum(1 for _ in ds))
"""
  out = subprocess.run([warm("python"), "-c", script], capture_output=True, text=True,
                       cwd=tmp_path)
  assert out.returncode == 0, out.stderr[-3000:]
  assert out.stdout.split() == ["default", "800", "tiny", "12"]


STOCK_TFDS_ON_GS = """
import hashlib, json, sys
import tensorflow_datasets as tfds

def examples(name, data_dir):
  return {split: [[hashlib.sha256(e["image"].tobytes()).hexdigest(), int(e["label"])]
                  for e in tfds.as_numpy(tfds.load(name, split=split, data_dir=data_dir,
                                                   download=False))]
          for split in ("train", "test")}

def fails(name, data_dir):
  try:
    tfds.load(name, split="train", data_dir=data_dir, download=False)
  except Exception as exc:
    return type(exc).__name__
  return "loaded"

committed, unfinished_early, unfinished_late = sys.argv[1:4]
out = {"explicit": examples("%(tiny)s", committed),
       "latest": examples("synthetic_images/tiny", committed),
       "unfinished": [fails(name, url) for url in (unfinished_early, unfinished_late)
                      for name in ("%(tiny)s", "synthetic_images/tiny")],
       "package_was_imported": "imagesets" in sys.modules}
print(json.dumps(out))
""" % {"tiny": TINY}


def test_stock_tfds_reads_gs_with_tensorflows_own_client(bucket_servers, tensorflow_gcs_env,
                                                         tiny_data_dir, tmp_path):
  # `tfds.load('NAME:VERSION', data_dir='gs://...')` without the package, through
  # TensorFlow's GCS client; unfinished uploads (killed among the data files, and just
  # before the commit marker: the upload order is below) are not loadable by name, explicit
  # version or latest.
  urls = [f"gs://{servers.BUCKET}/{tmp_path.name}-{i}/tfds" for i in range(3)]
  quiet_publish(TINY, tiny_data_dir, urls[0])
  kill_publisher_after(4, TINY, tiny_data_dir, urls[1], tmp_path)
  kill_publisher_after(15, TINY, tiny_data_dir, urls[2], tmp_path)
  result = subprocess.run([warm("python"), "-c", STOCK_TFDS_ON_GS, *urls], capture_output=True,
                          text=True, cwd=tmp_path, env={**os.environ, **tensorflow_gcs_env},
                          timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  out = json.loads(result.stdout.strip().splitlines()[-1])
  local = {split: [[hashlib.sha256(e[0]).hexdigest(), e[1]] for e in values]
           for split, values in examples(tiny_data_dir).items()}
  assert out["explicit"] == out["latest"] == local
  assert out["unfinished"] == ["DatasetNotFoundError"] * 4, out["unfinished"]
  assert out["package_was_imported"] is False


def test_identical_republish_is_a_no_op_and_different_content_is_refused(
    bucket_url, tiny_data_dir, tmp_path):
  quiet_publish(TINY, tiny_data_dir, bucket_url)
  store = bucket_lib.Bucket(bucket_url)
  before = {rel: store.info(rel) for rel in store.list_files()}
  manifest = store.read_bytes(f"{FOLDER}/{versions.MANIFEST}")

  rebuilt = build_synthetic(tmp_path / "rebuilt")  # a second, byte-identical build
  assert quiet_publish(TINY, rebuilt, bucket_url).status == "unchanged"

  shard = next((rebuilt / FOLDER).glob("*-train.tfrecord-00001-of-*"))
  data = bytearray(shard.read_bytes())
  data[-1] ^= 1
  shard.write_bytes(bytes(data))
  with pytest.raises(versions.PublishError, match=r"already published .* different content "
                     r"\(1 file\(s\) differ: synthetic_images-train.tfrecord-00001-of-00004\); "
                     r"published versions are immutable"):
    quiet_publish(TINY, rebuilt, bucket_url)
  assert {rel: store.info(rel) for rel in store.list_files()} == before
  assert store.read_bytes(f"{FOLDER}/{versions.MANIFEST}") == manifest


# Upload order: .config/metadata.json, the version's data files by name (README.md, the
# card; duplicates.json and quality.json, the build's reports; report.html, its page; 8
# shards), manifest, dataset_info.json, features.json: 15 is killed at the last, the
# commit marker.
@pytest.mark.parametrize("uploads", [4, 15])
def test_killed_publisher_leaves_no_version_and_a_rerun_completes_it(
    uploads, bucket_url, tiny_data_dir, tmp_path):
  kill_publisher_after(uploads, TINY, tiny_data_dir, bucket_url, tmp_path)
  store = bucket_lib.Bucket(bucket_url)
  partial = store.list_files(FOLDER)
  # (the claim, then the uploads before the one killed)
  assert len(partial) == uploads and f"{FOLDER}/{versions.MARKER}" not in partial
  assert f"{FOLDER}/{versions.CLAIM}" in partial

  published, unfinished = listing.list_published(bucket_url)
  assert published == [] and unfinished == [versions.Ref.parse(TINY)]
  with pytest.raises(versions.PublishError, match="not published .* unfinished: re-run publish"):
    fetch.fetch(bucket_url, TINY, cache_dir=tmp_path / "cache", progress=False)
  if store.is_local:  # TFDS itself (without our builder code) finds no version either
    from tensorflow_datasets.core import read_only_builder
    for name in (TINY, "synthetic_images/tiny"):
      with pytest.raises(tfds.core.registered.DatasetNotFoundError):
        read_only_builder.builder_from_files(name, data_dir=bucket_url)

  result = quiet_publish(TINY, tiny_data_dir, bucket_url)
  assert result.status == "published"
  assert result.reused == min(uploads - 1, 12)  # verified data files are not uploaded again
  data_dir = fetch.fetch(bucket_url, TINY, cache_dir=tmp_path / "cache", progress=False)
  assert examples(data_dir) == examples(tiny_data_dir)


def test_leftovers_of_an_unfinished_upload_are_removed(bucket_url, tiny_data_dir):
  store = bucket_lib.Bucket(bucket_url)
  junk = f"{FOLDER}/synthetic_images-train.tfrecord-00004-of-00005"
  store.write_bytes(junk, b"from an interrupted upload of other content")
  store.write_bytes(f"{FOLDER}/synthetic_images-train.tfrecord-00000-of-00004", b"truncated")
  quiet_publish(TINY, tiny_data_dir, bucket_url)
  assert not store.exists(junk)
  (item,), _ = listing.list_published(bucket_url)
  assert set(store.list_files(FOLDER)) == {f"{FOLDER}/{n}" for n in item.manifest.files} | {
      f"{FOLDER}/{versions.MANIFEST}", f"{FOLDER}/{versions.CLAIM}"}
  shard = "synthetic_images-train.tfrecord-00000-of-00004"
  assert store.read_bytes(f"{FOLDER}/{shard}") == (tiny_data_dir / FOLDER / shard).read_bytes()


def test_a_folder_object_that_readers_refuse_is_uploaded_again_not_taken_as_done(
    tiny_data_dir, tmp_path):
  # In one's own folder bucket, a shard in its place as a link to the very bytes (someone
  # deduplicated with links), or an empty file's name held by a FIFO, is what fetch and
  # streaming refuse unread: publish uploads a regular file in its place (it neither takes
  # the link as verified nor waits on the FIFO).
  url = str(tmp_path / "bucket")
  data_dir = tmp_path / "data"
  shutil.copytree(tiny_data_dir, data_dir)
  (data_dir / FOLDER / "empty.txt").write_bytes(b"")
  shard = next(p.name for p in (data_dir / FOLDER).glob("*.tfrecord-*"))
  folder = pathlib.Path(url) / FOLDER
  folder.mkdir(parents=True)
  (folder / shard).symlink_to(data_dir / FOLDER / shard)
  os.mkfifo(folder / "empty.txt")
  result = returns_within(120, quiet_publish, TINY, data_dir, url,
                          what="publish, on a FIFO in the bucket")
  assert result.status == "published" and result.reused == 0
  assert not (folder / shard).is_symlink() and (folder / "empty.txt").is_file()
  fetched = fetch.fetch(url, TINY, cache_dir=tmp_path / "cache", progress=False)
  assert examples(fetched) == examples(tiny_data_dir)


def test_a_fifo_in_another_version_is_not_copied_from(tiny_data_dir, tmp_path, monkeypatch):
  # A server-side copy takes a file of the same content from another committed version;
  # in a folder whose file system refuses hard links (SMB, vfat, FUSE) the link becomes a
  # copy, which must not open a FIFO in that file's place (it waits for a writer): it is
  # refused, and the file uploaded.
  data_dir = tmp_path / "data"
  shutil.copytree(tiny_data_dir, data_dir)
  (data_dir / FOLDER / "empty.txt").write_bytes(b"")
  later = data_dir / "synthetic_images/tiny/1.0.1"
  shutil.copytree(data_dir / FOLDER, later)
  info = json.loads((later / "dataset_info.json").read_text())
  (later / "dataset_info.json").write_text(json.dumps({**info, "version": "1.0.1"}))
  url = str(tmp_path / "bucket")
  quiet_publish(TINY, data_dir, url)
  published = tmp_path / "bucket" / FOLDER / "empty.txt"
  published.unlink()
  os.mkfifo(published)

  def refused(*args, **kwargs):
    raise PermissionError(errno.EPERM, "Operation not permitted")
  monkeypatch.setattr(os, "link", refused)
  result = returns_within(120, quiet_publish, "synthetic_images/tiny:1.0.1", data_dir, url,
                          what="publish, on a FIFO of another version")
  assert result.status == "published"
  assert (tmp_path / "bucket/synthetic_images/tiny/1.0.1/empty.txt").is_file()


def test_nested_files_an_interrupted_upload_left_are_reused_or_removed(
    bucket_url, tiny_data_dir, tmp_path):
  # A version's nested files (its `record_index/...`) verified in the bucket are not
  # uploaded again by the run that completes the upload, as its top-level files are not;
  # stale ones are removed; another publisher's temporary (a hidden name) stays.
  data_dir = tmp_path / "data"
  shutil.copytree(tiny_data_dir, data_dir)
  index = data_dir / FOLDER / "record_index"
  index.mkdir()
  for name in ("a.json", "b.json"):
    (index / name).write_text(f'{{"records": "{name}"}}')
  store = bucket_lib.Bucket(bucket_url)
  for name in ("a.json", "b.json"):
    store.write_bytes(f"{FOLDER}/record_index/{name}", (index / name).read_bytes())
  stale = f"{FOLDER}/record_index/synthetic_images-train.tfrecord-00004-of-00005.json"
  store.write_bytes(stale, b"{}")  # (of an interrupted upload of other content)
  temporary = f"{FOLDER}/record_index/.a.json.tmp-123"
  store.write_bytes(temporary, b"being written")
  result = quiet_publish(TINY, data_dir, bucket_url)
  assert (result.status, result.reused) == ("published", 2)
  assert not store.exists(stale) and store.read_bytes(temporary) == b"being written"
  (item,), _ = listing.list_published(bucket_url)
  assert {"record_index/a.json", "record_index/b.json"} <= set(item.manifest.files)
  fetched = fetch.fetch(bucket_url, TINY, cache_dir=tmp_path / "cache", progress=False)
  assert (pathlib.Path(fetched) / FOLDER / "record_index" / "b.json").read_bytes() == (
      index / "b.json").read_bytes()


def test_a_config_named_like_a_version_is_refused_and_survives_that_versions_publish(
    bucket_url, tiny_data_dir, tmp_path):
  # Config "1.0.0" of a dataset would keep its versions inside the unconfigured version
  # 1.0.0's folder (<name>/1.0.0/1.0.0/): refused (tests/storage/test_versions.py); where a
  # bucket holds one anyway, publishing that version does not take them for its own.
  version = tiny_data_dir / FOLDER
  configured, plain = tmp_path / "configured", tmp_path / "plain"
  shutil.copytree(version, configured / "synthetic_images/1.0.0/1.0.0")
  shutil.copytree(version, plain / "synthetic_images/1.0.0")
  with pytest.raises(versions.SpecError, match="named like a version"):
    quiet_publish("synthetic_images/1.0.0:1.0.0", configured, bucket_url)
  (configured / "synthetic_images/1.0.0").rename(configured / "synthetic_images/cfg")
  quiet_publish("synthetic_images/cfg:1.0.0", configured, bucket_url)
  store = bucket_lib.Bucket(bucket_url)
  for rel in store.list_files("synthetic_images/cfg/1.0.0"):  # (as another tool would)
    store.copy(rel, rel.replace("synthetic_images/cfg/", "synthetic_images/1.0.0/", 1))
  before = store.list_files("synthetic_images/1.0.0/1.0.0")
  assert quiet_publish("synthetic_images:1.0.0", plain, bucket_url).status == "published"
  assert store.list_files("synthetic_images/1.0.0/1.0.0") == before and before
  published = {str(item.ref) for item in listing.list_published(bucket_url)[0]}
  assert {"synthetic_images/1.0.0:1.0.0", "synthetic_images:1.0.0"} <= published  # (shown)
  assert versions.Ref("synthetic_images", "1.0.0", "1.0.0") not in versions.published_refs(store)


def test_fetch_reuses_the_cache_without_the_bucket(bucket_url, tiny_data_dir, tmp_path,
                                                   request):
  proxy = None
  if not bucket_url.startswith("/"):  # the same endpoint, behind a proxy that will go down
    from imagesets_testing.fault_proxy import FaultProxy
    server = request.getfixturevalue("bucket_servers")[bucket_url[:2]]
    host, port = server.split("//")[1].split(":")
    proxy = FaultProxy((host, int(port)))
    variable = "AWS_ENDPOINT_URL" if bucket_url.startswith("s3") else "STORAGE_EMULATOR_HOST"
    request.getfixturevalue("monkeypatch").setenv(variable, proxy.url)
  try:
    quiet_publish(TINY, tiny_data_dir, bucket_url)
    first = fetch.fetch(bucket_url, TINY, cache_dir=tmp_path / "cache", progress=False)
    shard = next((pathlib.Path(first) / FOLDER).glob("*.tfrecord-*"))
    mtime = shard.stat().st_mtime_ns
    # The bucket is gone (deleted folder, dead endpoint): an explicit version still loads.
    if proxy is None:
      shutil.rmtree(pathlib.Path(bucket_url).parent)
    else:
      proxy.go_down_for(3600)
    again = fetch.fetch(bucket_url, TINY, cache_dir=tmp_path / "cache", progress=False)
    assert again == first and shard.stat().st_mtime_ns == mtime
    if proxy is not None:  # resolving "latest" needs the bucket: clear error
      with pytest.raises(bucket_lib.BucketError, match="cannot reach"):
        fetch.fetch(bucket_url, "synthetic_images/tiny", cache_dir=tmp_path / "cache")
  finally:
    if proxy is not None:
      proxy.close()


@pytest.mark.parametrize("bucket_url", ["s3"], indirect=True)
def test_fetch_verify_repairs_a_damaged_cache(bucket_url, tiny_data_dir, tmp_path):
  quiet_publish(TINY, tiny_data_dir, bucket_url)
  data_dir = pathlib.Path(fetch.fetch(bucket_url, TINY, cache_dir=tmp_path, progress=False))
  shard = next((data_dir / FOLDER).glob("*-train.tfrecord-*"))
  good = shard.read_bytes()
  shard.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # same size: only a hash notices
  fetch.fetch(bucket_url, TINY, cache_dir=tmp_path, progress=False)
  assert shard.read_bytes() != good
  fetch.fetch(bucket_url, TINY, cache_dir=tmp_path, verify=True, progress=False)
  assert shard.read_bytes() == good
  shard.unlink()  # a missing file is noticed without verify
  fetch.fetch(bucket_url, TINY, cache_dir=tmp_path, progress=False)
  assert shard.read_bytes() == good


@pytest.mark.parametrize("bucket_url", ["gs"], indirect=True)
def test_fetch_refuses_an_object_damaged_in_the_bucket(bucket_url, tiny_data_dir, tmp_path):
  quiet_publish(TINY, tiny_data_dir, bucket_url)
  store = bucket_lib.Bucket(bucket_url)
  rel = f"{FOLDER}/synthetic_images-test.tfrecord-00002-of-00004"
  data = store.read_bytes(rel)
  store.write_bytes(rel, data[:-1] + bytes([data[-1] ^ 1]))
  with pytest.raises(versions.PublishError, match="tfrecord-00002-of-00004 does not match its "
                     "manifest"):
    fetch.fetch(bucket_url, TINY, cache_dir=tmp_path, progress=False)
  assert not (fetch.cached_data_dir(bucket_url, tmp_path) / FOLDER).exists()


def test_names_resolve_to_the_default_config_and_latest_version(bucket_url, tiny_data_dir,
                                                               tmp_path):
  with pytest.raises(versions.PublishError, match="no published version of "
                     "synthetic_images/tiny"):
    fetch.fetch(bucket_url, "synthetic_images/tiny", cache_dir=tmp_path)
  quiet_publish(TINY, tiny_data_dir, bucket_url)
  data_dir = fetch.fetch(bucket_url, "synthetic_images/tiny", cache_dir=tmp_path,
                           progress=False)
  assert (pathlib.Path(data_dir) / FOLDER / versions.MARKER).exists()
  with pytest.raises(versions.PublishError, match="no published version of "
                     "synthetic_images/default"):
    fetch.fetch(bucket_url, "synthetic_images", cache_dir=tmp_path)
  for bad in ("synthetic_images:1.0", "Synthetic", "a/b/c"):
    with pytest.raises(versions.PublishError, match="is not NAME"):
      versions.Ref.parse(bad)


def test_publishing_needs_a_complete_local_version(tiny_data_dir, tmp_path):
  with pytest.raises(versions.PublishError, match="does not exist: build synthetic_images"):
    quiet_publish(TINY, tmp_path / "empty", str(tmp_path / "team"))
  broken = tmp_path / "broken"
  shutil.copytree(tiny_data_dir, broken)
  next((broken / FOLDER).glob("*-test.tfrecord-00003-of-*")).unlink()
  with pytest.raises(versions.PublishError, match="is incomplete: 1 shard.* missing"):
    quiet_publish(TINY, broken, str(tmp_path / "team"))
  assert not (tmp_path / "team").exists()


def test_default_config_of_a_dataset_is_never_changed(bucket_url, tiny_data_dir, tmp_path):
  quiet_publish(TINY, tiny_data_dir, bucket_url)
  other = tmp_path / "other"
  shutil.copytree(tiny_data_dir, other)
  (other / "synthetic_images/.config/metadata.json").write_text(
      json.dumps({"default_config_name": "tiny"}))
  shutil.copytree(other / FOLDER, other / "synthetic_images/tiny/1.0.1")
  with pytest.raises(versions.PublishError, match="names default config 'default' but"):
    quiet_publish("synthetic_images/tiny:1.0.1", other, bucket_url)


def test_uploads_are_verified_by_the_store_checksum_or_read_back(bucket_url, tiny_data_dir,
                                                                 monkeypatch):
  read_back = []
  sha256 = bucket_lib.Bucket.sha256
  monkeypatch.setattr(bucket_lib.Bucket, "sha256",
                      lambda self, rel: read_back.append(rel) or sha256(self, rel))
  quiet_publish(TINY, tiny_data_dir, bucket_url)
  # Both servers report checksums of what they received; a folder is read back: the card,
  # the two reports, the page, 8 shards, the manifest, dataset_info.json and features.json.
  expected = 0 if bucket_url.startswith(("s3:", "gs:")) else 15
  assert len(read_back) == expected


@pytest.mark.parametrize("bucket_url", ["s3", "gs", "file"], indirect=True)
def test_an_object_damaged_in_transit_stops_the_publish(bucket_url, tiny_data_dir, tmp_path,
                                                        monkeypatch):
  upload = bucket_lib.Bucket.upload
  damaged = tmp_path / "damaged"

  def damaging_upload(self, local_path, rel, progress=None):
    if rel.endswith("train.tfrecord-00002-of-00004"):  # same size, one bit flipped
      data = bytearray(pathlib.Path(local_path).read_bytes())
      data[len(data) // 2] ^= 4
      damaged.write_bytes(bytes(data))
      local_path = str(damaged)
    return upload(self, local_path, rel, progress)
  monkeypatch.setattr(bucket_lib.Bucket, "upload", damaging_upload)
  with pytest.raises(versions.PublishError, match="train.tfrecord-00002-of-00004 does not "
                     "match .* after upload"):
    quiet_publish(TINY, tiny_data_dir, bucket_url)
  assert listing.list_published(bucket_url)[0] == []
  monkeypatch.setattr(bucket_lib.Bucket, "upload", upload)
  # The re-run keeps the 10 verified files uploaded before (the card, the two reports, the
  # page, shards test 0-3, train 0-1) and replaces the damaged one.
  result = quiet_publish(TINY, tiny_data_dir, bucket_url)
  assert (result.reused, result.uploaded) == (10, 5)
  data_dir = fetch.fetch(bucket_url, TINY, cache_dir=tmp_path / "cache", progress=False)
  assert examples(data_dir) == examples(tiny_data_dir)


def test_training_pipeline_reads_from_a_bucket_url(bucket_url, tiny_data_dir, tmp_path, monkeypatch):
  quiet_publish(TINY, tiny_data_dir, bucket_url)
  monkeypatch.setenv(fetch.CACHE_ENV, str(tmp_path / "cache"))
  # Streamed (s3://, gs://) or read in place (a path): evaluation batches in stored order.
  kwargs = dict(batch_size=4, image_size=16)
  remote = list(input_pipeline.classification_eval(TINY, data_dir=bucket_url, **kwargs))
  local = list(input_pipeline.classification_eval(TINY, data_dir=str(tiny_data_dir), **kwargs))
  assert len(remote) == len(local) == 1
  for name in ("image", "label"):
    np.testing.assert_array_equal(remote[0][name].numpy(), local[0][name].numpy())


def test_an_array_record_version_round_trips_through_a_bucket(bucket_url, tmp_path):
  import imagesets  # noqa: F401  (registers synthetic_images)
  local = tmp_path / "local"
  tfds.builder("synthetic_images/tiny", data_dir=local,
               file_format="array_record").download_and_prepare()
  files = sorted((local / FOLDER).glob("*.array_record-*"))
  assert files and not list((local / FOLDER).glob("*.tfrecord*"))
  quiet_publish(TINY, local, bucket_url)
  (item,) = listing.list_published(bucket_url)[0]
  assert item.manifest.splits == {"train": 12, "test": 4}
  data_dir = pathlib.Path(fetch.fetch(bucket_url, TINY, cache_dir=tmp_path / "cache",
                                        progress=False))
  for path in files:
    assert (data_dir / FOLDER / path.name).read_bytes() == path.read_bytes()
  # The fetched copy feeds the pipelines and tfds.data_source.
  batch = next(iter(input_pipeline.classification_eval(
      "synthetic_images/tiny", data_dir=str(data_dir), batch_size=4, image_size=8)))
  assert batch["image"].shape == (4, 8, 8, 3)
  source = tfds.data_source("synthetic_images/tiny", split="test", data_dir=str(data_dir))
  assert len(source) == 4
