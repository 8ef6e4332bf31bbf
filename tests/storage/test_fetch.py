"""fetch against a real S3 server (SeaweedFS): an interrupted fetch resumes from its staging
folder, two processes fetching one version download it once, a committed version without a
manifest is refused, and a failing store (at the first request, or mid-fetch) is retried a
bounded number of times."""

import contextlib
import http.server
import json
import pathlib
import shutil
import subprocess
import sys
import threading
import tracemalloc
import urllib.error
import urllib.request

import pytest

import bucket_servers as servers
from publish_helpers import FOLDER, TINY, examples
from imagesets.storage import bucket as bucket_lib
from imagesets.storage import fetch
from imagesets.reading import sources
from imagesets.storage import manifest as manifest_lib
from imagesets.publishing import publish
from imagesets.storage import versions

S3 = pytest.mark.parametrize("bucket_url", ["s3"], indirect=True)

# A fetch in another process (the `imagesets fetch` code path: fetch.fetch), whose
# downloads are counted in a log file; with KILL_AFTER, it kills itself (SIGKILL) when it
# starts download number KILL_AFTER + 1, as a power cut or an OOM kill would; with a
# barrier file, it waits until every process of the test is ready before fetching.
FETCHER = """
import os, pathlib, signal, sys, time
from imagesets.storage import bucket, fetch
url, spec, cache, log, kill_after, ready, count = sys.argv[1:8]
copy_to = bucket.Bucket.copy_to  # every download of a file goes through it
def counted(self, rel, *args, **kwargs):
  with open(log, "a") as f:
    f.write(rel + "\\n")
  if int(kill_after) and sum(1 for _ in open(log)) > int(kill_after):
    os.kill(os.getpid(), signal.SIGKILL)
  time.sleep(0.1)  # long enough for the other fetcher to reach the lock meanwhile
  return copy_to(self, rel, *args, **kwargs)
bucket.Bucket.copy_to = counted
pathlib.Path(ready, str(os.getpid())).touch()
while len(os.listdir(ready)) < int(count):
  time.sleep(0.05)
print(fetch.fetch(url, spec, cache_dir=cache, progress=False))
"""


def fetchers(url, cache, log, *, count=1, kill_after=0) -> list[subprocess.Popen]:
  ready = pathlib.Path(log).with_suffix(".ready")
  ready.mkdir(exist_ok=True)
  return [subprocess.Popen([sys.executable, "-c", FETCHER, url, TINY, str(cache), str(log),
                            str(kill_after), str(ready), str(count)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
          for _ in range(count)]


def manifest_files(url) -> dict:
  (item,), _ = listing_of(url)
  return item.manifest.files


def listing_of(url):
  from imagesets.publishing import listing
  return listing.list_published(url)


@S3
def test_an_interrupted_fetch_resumes_from_its_staging_folder(bucket_url, tiny_data_dir,
                                                              tmp_path):
  publish.publish(TINY, tiny_data_dir, bucket_url, progress=False)
  files = manifest_files(bucket_url)
  (killed,) = fetchers(bucket_url, tmp_path / "cache", tmp_path / "first.log", kill_after=3)
  killed.communicate(timeout=300)
  assert killed.returncode == -9
  data_dir = fetch.cached_data_dir(bucket_url, tmp_path / "cache")
  staging = data_dir / "synthetic_images" / "tiny" / ".incomplete-1.0.0"
  assert not (data_dir / FOLDER).exists()  # nothing half-fetched is visible
  kept = {p.name for p in staging.iterdir() if p.is_file() and not p.name.startswith(".")}
  assert len(kept) == 3 and kept <= set(files)
  (resumed,) = fetchers(bucket_url, tmp_path / "cache", tmp_path / "second.log")
  out, err = resumed.communicate(timeout=300)
  assert resumed.returncode == 0, err[-3000:]
  downloaded = {line.rsplit("/", 1)[-1]
                for line in (tmp_path / "second.log").read_text().split()}
  assert downloaded == set(files) - kept  # the three staged files were not fetched again
  assert out.strip() == str(data_dir) and not staging.exists()
  assert examples(data_dir) == examples(tiny_data_dir)


@S3
def test_two_processes_fetching_one_version_download_it_once(bucket_url, tiny_data_dir,
                                                             tmp_path):
  publish.publish(TINY, tiny_data_dir, bucket_url, progress=False)
  files = manifest_files(bucket_url)
  log = tmp_path / "downloads.log"
  both = fetchers(bucket_url, tmp_path / "cache", log, count=2)
  results = [process.communicate(timeout=300) for process in both]
  assert [process.returncode for process in both] == [0, 0], [err[-2000:] for _, err in results]
  data_dir = str(fetch.cached_data_dir(bucket_url, tmp_path / "cache"))
  assert [out.strip() for out, _ in results] == [data_dir, data_dir]
  downloaded = [line.rsplit("/", 1)[-1] for line in log.read_text().split()]
  assert sorted(downloaded) == sorted(files)  # each file once, by one of the two
  assert examples(data_dir) == examples(tiny_data_dir)


@S3
def test_a_committed_version_without_a_manifest_is_refused(bucket_url, tiny_data_dir,
                                                           tmp_path):
  publish.publish(TINY, tiny_data_dir, bucket_url, progress=False)
  bucket_lib.Bucket(bucket_url).delete([f"{FOLDER}/{versions.MANIFEST}"])
  with pytest.raises(versions.PublishError, match="no manifest to verify against") as error:
    fetch.fetch(bucket_url, TINY, cache_dir=tmp_path, progress=False)
  assert "\n" not in str(error.value)
  assert not (fetch.cached_data_dir(bucket_url, tmp_path) / FOLDER).exists()
  with pytest.raises(versions.PublishError, match="no manifest"):
    manifest_lib.published(bucket_lib.Bucket(bucket_url), versions.Ref.parse(TINY))


@pytest.mark.parametrize("bucket_url", ["file"], indirect=True)
def test_fetch_never_writes_through_a_symlink_in_the_cache(bucket_url, tiny_data_dir, tmp_path):
  """A `<name>/.config` link (where the config metadata goes), a `<name>` link out of the
  cache and a link in the version folder's place are refused in one line naming the link, before anything is written (the
  version lock included); what they point at is unchanged."""
  publish.publish(TINY, tiny_data_dir, bucket_url, progress=False)
  victim, outside = tmp_path / "victim", tmp_path / "outside"
  victim.mkdir()
  outside.mkdir()
  (victim / "metadata.json").write_text("the victim's own file")
  name = versions.Ref.parse(TINY).name
  links = {tmp_path / "c1": (fetch.cached_data_dir(bucket_url, tmp_path / "c1") / name
                             / ".config", victim),
           tmp_path / "c2": (fetch.cached_data_dir(bucket_url, tmp_path / "c2") / name, outside),
           tmp_path / "c3": (fetch.cached_data_dir(bucket_url, tmp_path / "c3") / FOLDER, victim)}
  for cache, (link, target) in links.items():
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    with pytest.raises(versions.PublishError) as error:
      fetch.fetch(bucket_url, TINY, cache_dir=cache, progress=False)
    message = str(error.value)
    assert "\n" not in message and f"{link} is a symlink" in message, message
    assert link.is_symlink()
  assert sorted(p.name for p in victim.iterdir()) == ["metadata.json"]
  assert (victim / "metadata.json").read_text() == "the victim's own file"
  assert list(outside.iterdir()) == []


class _Failing(http.server.BaseHTTPRequestHandler):
  """A store that answers every request with 503 Slow Down: retriable, never successful."""

  requests: list = []

  def _fail(self):
    type(self).requests.append(self.command)
    self.send_response(503)
    self.send_header("Content-Length", "0")
    self.end_headers()

  do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _fail

  def log_message(self, *args):
    pass


# Requests a failing store may see: gcsfs makes ATTEMPTS tries (we re-wrap its retry
# decorator: its own default is 6); through s3fs and botocore (max_attempts=ATTEMPTS) we
# saw ATTEMPTS + 1 requests (4 with ATTEMPTS = 3).
@pytest.mark.parametrize("scheme, variable, most", [
    ("s3", "AWS_ENDPOINT_URL", bucket_lib.ATTEMPTS + 1),
    ("gs", "STORAGE_EMULATOR_HOST", bucket_lib.ATTEMPTS)])
def test_a_failing_store_is_retried_a_bounded_number_of_times(scheme, variable, most, tmp_path):
  _Failing.requests = []
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  endpoint = f"http://127.0.0.1:{server.server_address[1]}"
  try:
    with servers.environment({**servers.STATIC_ENV, variable: endpoint}):
      with pytest.raises(bucket_lib.BucketError) as error:
        fetch.fetch(f"{scheme}://{servers.BUCKET}/tfds", TINY, cache_dir=tmp_path,
                    progress=False)
  finally:
    server.shutdown()
  assert "\n" not in str(error.value) and f"{scheme}://{servers.BUCKET}/tfds" in str(error.value)
  assert 1 < len(_Failing.requests) <= most, _Failing.requests  # retried, and bounded
  assert not any(tmp_path.iterdir())  # nothing cached


class _FailingDownloads(http.server.BaseHTTPRequestHandler):
  """A proxy in front of the S3 server: listings and small objects pass, every GET of a
  shard answers 503 (a store that keeps failing mid-fetch). The Host header is kept, so
  the client's signatures still verify."""

  upstream = ""
  shard_gets: list = []

  def _forward(self):
    if self.command == "GET" and ".tfrecord-" in self.path:
      type(self).shard_gets.append(self.path)
      self.send_response(503)
      self.send_header("Content-Length", "0")
      self.end_headers()
      return
    request = urllib.request.Request(self.upstream + self.path, method=self.command,
                                     headers=dict(self.headers.items()))
    try:
      with urllib.request.urlopen(request, timeout=30) as response:
        status, headers, body = response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
      status, headers, body = error.code, error.headers, error.read()
    self.send_response(status)
    for name, value in headers.items():
      if name.lower() not in ("transfer-encoding", "connection", "content-length"):
        self.send_header(name, value)
    self.send_header("Content-Length", str(len(body)))
    self.end_headers()
    if self.command != "HEAD":
      self.wfile.write(body)

  do_GET = do_HEAD = _forward

  def log_message(self, *args):
    pass


@S3
def test_a_download_failing_mid_fetch_is_retried_a_bounded_number_of_times(
    bucket_url, bucket_servers, tiny_data_dir, tmp_path):
  publish.publish(TINY, tiny_data_dir, bucket_url, progress=False)
  _FailingDownloads.upstream, _FailingDownloads.shard_gets = bucket_servers["s3"], []
  proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FailingDownloads)
  threading.Thread(target=proxy.serve_forever, daemon=True).start()
  try:
    with servers.environment({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.server_address[1]}"}):
      with pytest.raises(bucket_lib.BucketError, match="cannot download") as error:
        fetch.fetch(bucket_url, TINY, cache_dir=tmp_path, progress=False)
  finally:
    proxy.shutdown()
  assert "\n" not in str(error.value)
  # The first shard was tried, retried, and given up on: no other shard was asked for.
  assert len(set(_FailingDownloads.shard_gets)) == 1
  assert 1 < len(_FailingDownloads.shard_gets) <= bucket_lib.ATTEMPTS + 1, (
      _FailingDownloads.shard_gets)
  assert not (fetch.cached_data_dir(bucket_url, tmp_path) / FOLDER).exists()


def test_fetching_a_version_built_on_a_fetched_one_downloads_only_what_it_lacks(
    bucket_servers, tmp_path, monkeypatch):
  """pets:1.1.0 built on 1.0.0 (3 photos added): fetching it after 1.0.0 from the S3 server
  downloads only the files 1.0.0 does not hold (counted where downloads happen), links the
  rest, and the copy is the published version, file for file."""
  import uuid
  from imagesets.class_folders import named_build
  from imagesets.storage import transfer
  from imagesets_testing import photo_crops

  root, data_dir = tmp_path / "tree", tmp_path / "data"

  def add(count, seed, prefix):
    for i, (picture, data) in enumerate(photo_crops.jpegs(count, seed=seed, size=(200, 150))):
      (root / picture.scene).mkdir(parents=True, exist_ok=True)
      (root / picture.scene / f"{prefix}_{i:03d}.jpg").write_bytes(data)

  add(150, seed=31, prefix="img")
  for version, more in (("1.0.0", 0), ("1.1.0", 3)):
    add(more, seed=32, prefix="new")
    named_build.build(root, "pets", version=version, data_dir=str(data_dir), versioned=True,
                      from_version=named_build.LATEST)
  url = f"s3://{servers.BUCKET}/{uuid.uuid4().hex[:12]}/tfds"
  for version in ("1.0.0", "1.1.0"):
    publish.publish(f"pets:{version}", data_dir, url, progress=False)
  downloaded = []
  real = transfer.checked_download
  monkeypatch.setattr(transfer, "checked_download", lambda bucket, rel, *a, **k: (
      downloaded.append(rel.rsplit("/", 1)[-1]), real(bucket, rel, *a, **k))[1])
  cache = tmp_path / "cache"
  fetch.fetch(url, "pets:1.0.0", cache_dir=cache, progress=False)
  downloaded.clear()
  fetched = pathlib.Path(fetch.fetch(url, "pets:1.1.0", cache_dir=cache, progress=False))
  local = manifest_lib.describe_local(versions.Ref.parse("pets:1.1.0"),
                                      data_dir / "pets" / "1.1.0").content()
  old = set(manifest_lib.describe_local(versions.Ref.parse("pets:1.0.0"),
                                        data_dir / "pets" / "1.0.0").content().values())
  lacking = {pathlib.PurePath(name).name for name, content in local.items()
             if content not in old}
  assert downloaded and set(downloaded) == lacking
  assert sum("tfrecord-" in name for name in downloaded) <= 4  # the new and rewritten shards
  copy = fetched / "pets" / "1.1.0"
  for name, (size, sha256) in local.items():
    assert bucket_lib.file_digests(copy / name)[0] == sha256


def test_a_manifest_listing_no_commit_files_is_refused_and_nothing_is_fetched(tmp_path):
  """A manifest without features.json (or dataset_info.json) names no version TFDS can
  load: fetched, it would be a folder that is no version, downloaded again at every call."""
  from publish_helpers import small_version
  small_version(tmp_path / "data")
  url = str(tmp_path / "bucket")
  publish.publish("ds/cfg:1.0.0", tmp_path / "data", url, progress=False)
  path = tmp_path / "bucket/ds/cfg/1.0.0" / versions.MANIFEST
  forged = json.loads(path.read_text())
  del forged["files"]["features.json"]
  path.write_text(json.dumps(forged))
  with pytest.raises(versions.PublishError, match=r"/ds/cfg/1.0.0: its manifest lists no "
                     r"features.json: not a version TFDS can load, nothing fetched"):
    fetch.fetch(url, "ds/cfg:1.0.0", cache_dir=tmp_path / "cache", progress=False)
  assert not list((tmp_path / "cache").rglob("*.tfrecord-*"))


@pytest.mark.parametrize("forgery", ["shard left out", "splits unreadable", "no dataset_info",
                                     "a shard more named", "a long name repeated",
                                     "millions of shards"])
def test_a_manifest_that_leaves_out_a_shard_is_refused_and_no_version_is_cached(
    tmp_path, forgery):
  """A manifest listing fewer shards than its dataset_info.json names (or with splits that
  do not parse) would leave a cached version taken for complete that fails in training at
  every load: refused before the version is in the cache."""
  from publish_helpers import small_version
  small_version(tmp_path / "data")
  url = str(tmp_path / "bucket")
  publish.publish("ds/cfg:1.0.0", tmp_path / "data", url, progress=False)
  folder = tmp_path / "bucket/ds/cfg/1.0.0"
  forged = json.loads((folder / versions.MANIFEST).read_text())
  if forgery == "shard left out":
    del forged["files"]["ds-train.tfrecord-00000-of-00001"]
    match = (r"/ds/cfg/1.0.0: the manifest lists no 'ds-train.tfrecord-00000-of-00001', "
             r"which its dataset_info.json names: refused")
  elif forgery == "a shard more named":  # (the listed shard is not fetched either)
    info = folder / versions.DATASET_INFO
    info.write_text(json.dumps({"name": "ds", "splits": [{"name": "train",
                                                          "shardLengths": ["1", "1"]}]}))
    forged["files"][versions.DATASET_INFO] = manifest_lib.entry(info)
    match = (r"/ds/cfg/1.0.0: the manifest lists no 'ds-train.tfrecord-00000-of-00002' "
             r"\(nor 1 more shard\(s\)\), which its dataset_info.json names: refused")
  elif forgery in ("a long name repeated", "millions of shards"):
    # (what a few hundred kB of JSON name: a 40 MB name from a short template, or 30 MB
    # of 300,000 names, had they been made; checked one at a time, and a long one refused
    # before it is made)
    long = forgery == "a long name repeated"
    info = folder / versions.DATASET_INFO
    info.write_text(json.dumps({"name": "d" * 200_000 if long else "ds", "splits": [{
        "name": "train", "filepathTemplate": "{DATASET}" * 200 if long else "",
        "shardLengths": ["1"] * (1 if long else 300_000)}]}))
    forged["files"][versions.DATASET_INFO] = manifest_lib.entry(info)
    match = (r"names no readable splits \(ValueError\)" if long else
             r"lists no 'ds-train.tfrecord-00000-of-300000' \(nor 299999 more")
    tracemalloc.start()
  elif forgery == "no dataset_info":  # (fetch says so before it downloads: see above)
    del forged["files"][versions.DATASET_INFO]
    match = r"/ds/cfg/1.0.0: (its|the) manifest lists no dataset_info.json"
  else:
    info = folder / versions.DATASET_INFO
    info.write_text(json.dumps({"name": "ds", "splits": [{"shardLengths": ["2"]}]}))
    forged["files"][versions.DATASET_INFO] = manifest_lib.entry(info)
    match = r"/ds/cfg/1.0.0: the manifest comes with a dataset_info.json that names no readable splits \(KeyError\)"
  (folder / versions.MANIFEST).write_text(json.dumps(forged))
  cache = tmp_path / "cache"
  try:
    with pytest.raises(versions.PublishError, match=match):
      fetch.fetch(url, "ds/cfg:1.0.0", cache_dir=cache, progress=False)
    peak = tracemalloc.get_traced_memory()[1] if tracemalloc.is_tracing() else 0
  finally:
    tracemalloc.stop()
  assert peak < 16 * 2**20
  assert not versions.local_refs(fetch.cached_data_dir(url, cache))
  assert not list(cache.rglob("*.tfrecord-*"))  # (refused before any shard is fetched)
  with pytest.raises(versions.PublishError, match=match):  # (streamed: at every open)
    sources.open_source("ds/cfg:1.0.0", f"file://{url}", cache_dir=cache)


def test_a_copy_cached_without_a_shard_its_dataset_info_names_is_not_taken_as_complete(
    tmp_path):
  """A copy cached before fetch checked the shards (its manifest, like the bucket's, left
  one out) is not returned as it is: fetched again, and refused in one line."""
  from publish_helpers import small_version
  small_version(tmp_path / "data")
  url, cache = str(tmp_path / "bucket"), tmp_path / "cache"
  publish.publish("ds/cfg:1.0.0", tmp_path / "data", url, progress=False)
  cached = pathlib.Path(fetch.fetch(url, "ds/cfg:1.0.0", cache_dir=cache, progress=False))
  shard = "ds-train.tfrecord-00000-of-00001"
  for folder in (tmp_path / "bucket/ds/cfg/1.0.0", cached / "ds/cfg/1.0.0"):
    forged = json.loads((folder / versions.MANIFEST).read_text())
    del forged["files"][shard]
    (folder / versions.MANIFEST).write_text(json.dumps(forged))
  (cached / "ds/cfg/1.0.0" / shard).unlink()
  with pytest.raises(versions.PublishError, match=f"the manifest lists no '{shard}'"):
    fetch.fetch(url, "ds/cfg:1.0.0", cache_dir=cache, progress=False)


@pytest.mark.parametrize("damage", ["not JSON", "unreadable"])
def test_a_damaged_cached_manifest_is_fetched_again_not_an_error(tmp_path, damage):
  """The cache's own manifest damaged (a disk error, an editor): the version is fetched
  again, whole; it was a PublishError telling the user to "tell the publisher", at every
  fetch."""
  from publish_helpers import small_version
  small_version(tmp_path / "data")
  url, cache = str(tmp_path / "bucket"), tmp_path / "cache"
  publish.publish("ds/cfg:1.0.0", tmp_path / "data", url, progress=False)
  cached = pathlib.Path(fetch.fetch(url, "ds/cfg:1.0.0", cache_dir=cache, progress=False))
  manifest = cached / "ds/cfg/1.0.0" / versions.MANIFEST
  if damage == "not JSON":
    manifest.write_text("{damaged")
  else:
    manifest.unlink()
    manifest.mkdir()  # (reading it: IsADirectoryError)
  fetch.fetch(url, "ds/cfg:1.0.0", cache_dir=cache, progress=False)
  assert fetch.local_copy_ok(cached / "ds/cfg/1.0.0", deep=True)


def _version_with(data_dir: pathlib.Path, files: dict[str, bytes]) -> None:
  from publish_helpers import small_version
  folder = small_version(data_dir)
  for name, data in files.items():
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)


@contextlib.contextmanager
def killed_at_the_marker(monkeypatch):
  """Downloads that stop at the version's commit marker, as a fetch killed there (what was
  staged before it stays); as they were after."""
  download = fetch.transfer.checked_download

  def killed(bucket, rel, *args, **kwargs):
    if rel.endswith(versions.MARKER):
      raise KeyboardInterrupt
    return download(bucket, rel, *args, **kwargs)
  monkeypatch.setattr(fetch.transfer, "checked_download", killed)
  try:
    yield
  finally:
    monkeypatch.setattr(fetch.transfer, "checked_download", download)


@pytest.mark.parametrize("before, after", [("extra", "extra/y"), ("extra/y", "extra")])
def test_a_fetch_killed_before_the_version_was_published_again_leaves_nothing_in_the_way(
    tmp_path, monkeypatch, before, after):
  """A fetch killed with a file staged where the version published again has a folder (or
  the other way round) left a staging folder every later fetch failed on (a raw
  FileExistsError, IsADirectoryError); files of the earlier content are not taken along."""
  url, cache = str(tmp_path / "bucket"), tmp_path / "cache"
  _version_with(tmp_path / "before", {before: b"before", "gone": b"gone"})
  publish.publish("ds/cfg:1.0.0", tmp_path / "before", url, progress=False)
  with killed_at_the_marker(monkeypatch), pytest.raises(KeyboardInterrupt):
    fetch.fetch(url, "ds/cfg:1.0.0", cache_dir=cache, progress=False)
  shutil.rmtree(tmp_path / "bucket" / "ds/cfg/1.0.0")  # (deleted, and published again)
  _version_with(tmp_path / "after", {after: b"after"})
  publish.publish("ds/cfg:1.0.0", tmp_path / "after", url, progress=False)
  fetched = pathlib.Path(fetch.fetch(url, "ds/cfg:1.0.0", cache_dir=cache,
                                     progress=False)) / "ds/cfg/1.0.0"
  assert (fetched / after).read_bytes() == b"after"
  names = {p.relative_to(fetched).as_posix() for p in fetched.rglob("*") if p.is_file()}
  assert names == set(manifest_files(url)) | {versions.MANIFEST}


def test_a_staging_folder_left_beside_a_complete_copy_is_removed(tmp_path, monkeypatch):
  """A repair (`verify=True`) killed mid-download left the version's staging folder; the
  next fetch found the copy complete (sizes) and kept the folder for ever."""
  from publish_helpers import small_version
  small_version(tmp_path / "data", extra={"extra": b"one" * 1000})
  url, cache = str(tmp_path / "bucket"), tmp_path / "cache"
  publish.publish("ds/cfg:1.0.0", tmp_path / "data", url, progress=False)
  config = pathlib.Path(fetch.fetch(url, "ds/cfg:1.0.0", cache_dir=cache,
                                    progress=False)) / "ds/cfg"
  (config / "1.0.0" / "extra").write_bytes(b"two" * 1000)  # (damaged, its size kept)
  with killed_at_the_marker(monkeypatch), pytest.raises(KeyboardInterrupt):
    fetch.fetch(url, "ds/cfg:1.0.0", cache_dir=cache, progress=False, verify=True)
  assert (config / ".incomplete-1.0.0" / "extra").is_file()
  fetch.fetch(url, "ds/cfg:1.0.0", cache_dir=cache, progress=False)
  assert sorted(p.name for p in config.iterdir()) == [".1.0.0.lock", "1.0.0"]
