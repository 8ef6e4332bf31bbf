"""streaming + shard_cache: training straight from a bucket, shard by shard, through a bounded
cache — the same examples as the local build, on s3 (SeaweedFS), gs (fake-gcs-server) and
file:// buckets, TFRecord and ArrayRecord; cache bound, faults, sharing, resume, damage."""

import collections
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import threading
import time
import uuid

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import bucket_servers as servers
from imagesets_testing.fault_proxy import FaultProxy
import imagesets
from imagesets.publishing import bucket as bucket_lib
from imagesets.publishing import publish
from imagesets.publishing import shard_cache as shard_cache_lib
from imagesets.reading import input_pipeline
from imagesets.reading import streaming

SPEC = "synthetic_images/variable:1.0.0"
FOLDER = "synthetic_images/variable/1.0.0"
NUM_SHARDS = 16


@pytest.fixture(scope="session", params=["tfrecord", "array_record"])
def built(request, tmp_path_factory):
  """synthetic_images/variable (160 train / 40 test images of 48-160 px) in 16 shards a split."""
  data_dir = tmp_path_factory.mktemp(f"variable_{request.param}")
  tfds.builder("synthetic_images/variable", data_dir=data_dir,
               file_format=request.param).download_and_prepare(
                   download_config=tfds.download.DownloadConfig(num_shards=NUM_SHARDS))
  return data_dir


# The cache and its processes do not depend on the file format: one format is enough.
ONE_FORMAT = pytest.mark.parametrize("built", ["tfrecord"], indirect=True)


def published_to(data_dir, scheme, tmp_path) -> str:
  if scheme == "file":
    url = f"file://{tmp_path}/bucket-{uuid.uuid4().hex[:8]}"
  else:
    url = f"{scheme}://{servers.BUCKET}/{uuid.uuid4().hex[:12]}/tfds"
  publish.publish(SPEC, data_dir, url, progress=False)
  return url


def digest(example) -> tuple:
  return (hashlib.sha256(example["image"]).hexdigest(), int(example["label"]))


def local_examples(data_dir, split):
  builder = tfds.builder(SPEC, data_dir=data_dir)
  if builder.info.file_format == tfds.core.FileFormat.ARRAY_RECORD:
    source = tfds.data_source(SPEC, split=split, data_dir=data_dir,
                              decoders={"image": tfds.decode.SkipDecoding()})
    return [digest(source[i]) for i in range(len(source))]
  return [digest(e) for e in tfds.as_numpy(tfds.load(
      SPEC, split=split, data_dir=data_dir, decoders={"image": tfds.decode.SkipDecoding()}))]


def streamed_examples(url, split, cache_dir, **kwargs):
  ds = imagesets.load(SPEC, split, url, cache_dir=cache_dir,
                      decoders={"image": tfds.decode.SkipDecoding()}, **kwargs)
  return [digest(e) for e in tfds.as_numpy(ds)]


@pytest.mark.parametrize("scheme", ["s3", "gs", "file"])
def test_streamed_examples_are_the_local_builds(scheme, built, bucket_servers, tmp_path):
  url = published_to(built, scheme, tmp_path)
  for split in ("train", "test"):
    local = local_examples(built, split)
    # In stored order without shuffling; a shuffled epoch is the same multiset.
    assert streamed_examples(url, split, tmp_path / "cache") == local
    shuffled = streamed_examples(url, split, tmp_path / "cache", shuffle=True, seed=3)
    assert shuffled != local and sorted(shuffled) == sorted(local)
  # Every worker's part together is the split, each example once.
  parts = [streamed_examples(url, "train", tmp_path / "cache", shuffle=True, seed=1,
                             input_context=tf.distribute.InputContext(3, i, 1))
           for i in range(3)]
  assert sorted(sum(parts, [])) == sorted(local_examples(built, "train"))


def test_training_pipelines_read_a_bucket_like_a_local_build(built, tmp_path):
  url = published_to(built, "file", tmp_path)
  kwargs = dict(batch_size=8, image_size=32)
  local = [b["label"].numpy().tolist() for b in input_pipeline.classification_eval(
      SPEC, data_dir=built, split="test", **kwargs)]
  streamed = [b["label"].numpy().tolist() for b in input_pipeline.classification_eval(
      SPEC, data_dir=url, split="test", cache_dir=tmp_path / "c", **kwargs)]
  assert streamed == local
  train = input_pipeline.classification_train(SPEC, data_dir=url, seed=0, num_epochs=2,
                                              cache_dir=tmp_path / "c", **kwargs)
  assert sum(b["label"].shape[0] for b in train) == 2 * 160
  with pytest.raises(ValueError, match="cache= keeps the split in memory"):
    input_pipeline.classification_train(SPEC, data_dir=url, seed=0, cache="encoded",
                                        cache_dir=tmp_path / "c", **kwargs)


def folder_bytes(folder: pathlib.Path) -> int:
  """What is on disk in the folder (downloads in progress at their current size)."""
  total = 0
  for entry in os.scandir(folder):
    try:
      total += entry.stat().st_size if entry.is_file() else 0
    except FileNotFoundError:  # renamed or evicted while we looked
      pass
  return total


def test_the_cache_never_holds_more_than_its_limit_plus_one_shard(built, tmp_path):
  url = published_to(built, "file", tmp_path)
  sizes = [p.stat().st_size for p in (built / FOLDER).glob("*-train.*-of-*")]
  limit = sum(sizes) // 4
  builder = streaming.open_builder(SPEC, url, cache_dir=tmp_path / "c", cache_limit=limit)
  cache = streaming.cache_of(builder)
  peak, stop = [0], threading.Event()

  def poll():
    while not stop.is_set():
      peak[0] = max(peak[0], folder_bytes(cache.folder) - small_files)
      time.sleep(0.002)

  small_files = folder_bytes(cache.folder)
  watcher = threading.Thread(target=poll)
  watcher.start()
  try:
    ds = streaming.records(builder, "train", shuffle=True, seed=0, num_epochs=3)
    count = sum(1 for _ in ds)
  finally:
    stop.set()
    watcher.join()
  assert count == 3 * 160
  assert 0 < peak[0] <= limit + max(sizes), (peak[0], limit, max(sizes))
  assert cache.stats["evicted"] > 0 and cache.stats["shards"] > NUM_SHARDS  # re-downloaded


def test_cache_limit_below_the_largest_shard_is_a_clear_error(built, tmp_path):
  url = published_to(built, "file", tmp_path)
  with pytest.raises(ValueError, match=r"cache_limit 100 B is smaller than the largest shard"):
    imagesets.load(SPEC, "train", url, cache_dir=tmp_path / "c", cache_limit=100)
  assert shard_cache_lib.parse_size("20GB") == 20 * 10**9
  assert shard_cache_lib.parse_size("512 MiB") == 512 * 2**20
  with pytest.raises(ValueError, match="is not a size"):
    shard_cache_lib.parse_size("lots")


def test_a_cached_version_is_read_without_the_bucket(built, tmp_path):
  url = published_to(built, "file", tmp_path)
  bucket_folder = pathlib.Path(url[len("file://"):])
  builder = streaming.open_builder(SPEC, url, cache_dir=tmp_path / "c")
  ds = streaming.records(builder, "train", shuffle=True, seed=0, num_epochs=2)
  iterator = iter(ds)
  for _ in range(160):  # the first epoch: every shard downloaded
    next(iterator)
  time.sleep(0.2)
  bucket_folder.rename(bucket_folder.with_name("gone"))  # any request now fails
  assert sum(1 for _ in iterator) == 160
  # A new process (cache) with the version pinned: no network at all.
  streaming._caches.clear()
  assert len(streamed_examples(url, "train", tmp_path / "c")) == 160


def test_a_damaged_shard_is_fetched_again_once_then_refused(built, tmp_path, monkeypatch):
  url = published_to(built, "file", tmp_path)
  download = bucket_lib.Bucket.download
  damaged = collections.Counter()

  def flaky(self, rel, local_path, progress=None):
    download(self, rel, local_path, progress)
    if "train.tfrecord-00003" in rel or "train.array_record-00003" in rel:
      if damaged[rel] < 1 or "always" in os.environ.get("DAMAGE", ""):
        damaged[rel] += 1
        with open(local_path, "r+b") as f:
          f.seek(100)
          f.write(b"\0" * 8)

  monkeypatch.setattr(bucket_lib.Bucket, "download", flaky)
  assert sorted(streamed_examples(url, "train", tmp_path / "c")) == sorted(
      local_examples(built, "train"))
  assert sum(damaged.values()) == 1
  streaming._caches.clear()
  monkeypatch.setenv("DAMAGE", "always")
  with pytest.raises(Exception, match="does not match its manifest .* after two downloads"):
    streamed_examples(url, "train", tmp_path / "other-cache")


RESUME = """
import json, sys
import tensorflow as tf
import imagesets
url, cache, checkpoint, mode = sys.argv[1:5]
ds = imagesets.classification_train("%(spec)s", data_dir=url, cache_dir=cache, batch_size=8,
                                    image_size=32, seed=5, num_epochs=2, cache_limit=%(limit)d)
iterator = iter(ds)
state = tf.train.Checkpoint(iterator=iterator)
if mode == "first":
  first = [next(iterator)["label"].numpy().tolist() for _ in range(15)]   # mid-epoch 1
  state.write(checkpoint)
  print(json.dumps({"rest": [b["label"].numpy().tolist() for b in iterator]}))
else:
  state.read(checkpoint).assert_consumed()
  print(json.dumps({"rest": [b["label"].numpy().tolist() for b in iterator]}))
"""


@ONE_FORMAT
def test_a_stopped_job_resumes_mid_epoch_with_the_same_examples(built, tmp_path):
  url = published_to(built, "file", tmp_path)
  limit = sum(p.stat().st_size for p in (built / FOLDER).glob("*-train.*-of-*")) // 3
  script = RESUME % {"spec": SPEC, "limit": limit}

  def run(mode):
    result = subprocess.run([sys.executable, "-c", script, url, str(tmp_path / "c"),
                             str(tmp_path / "ckpt"), mode], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])["rest"]

  uninterrupted = run("first")
  assert len(uninterrupted) == 2 * 160 // 8 - 15
  assert run("resume") == uninterrupted


WORKER = """
import json, sys
import imagesets
from imagesets.reading import streaming
url, cache, limit = sys.argv[1], sys.argv[2], sys.argv[3]
builder = streaming.open_builder("%(spec)s", url, cache_dir=cache,
                                 cache_limit=None if limit == "none" else int(limit))
count = sum(1 for _ in streaming.records(builder, "train", shuffle=True, seed=0, num_epochs=2))
print(json.dumps({"count": count, "shards": streaming.cache_of(builder).stats["shards"]}))
"""


@ONE_FORMAT
@pytest.mark.parametrize("limited", [False, True])
def test_two_workers_share_one_cache(built, tmp_path, limited):
  url = published_to(built, "file", tmp_path)
  total = sum(p.stat().st_size for p in (built / FOLDER).glob("*-train.*-of-*"))
  limit = str(total // 2) if limited else "none"
  script = WORKER % {"spec": SPEC}
  workers = [subprocess.Popen([sys.executable, "-c", script, url, str(tmp_path / "c"), limit],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
  outs = []
  for worker in workers:
    stdout, stderr = worker.communicate(timeout=300)
    assert worker.returncode == 0, stderr[-3000:]
    outs.append(json.loads(stdout.strip().splitlines()[-1]))
  assert [out["count"] for out in outs] == [320, 320]
  if not limited:  # every shard downloaded once, by one of the two
    assert sum(out["shards"] for out in outs) == NUM_SHARDS


@pytest.fixture
def s3_proxy(bucket_servers, monkeypatch):
  """A fault-injecting proxy between the S3 clients and the S3 server."""
  host, port = bucket_servers["s3"].split("//")[1].split(":")
  proxy = FaultProxy((host, int(port)))
  monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
  yield proxy
  proxy.close()


@ONE_FORMAT
def test_network_faults_are_retried_and_training_continues(built, s3_proxy, tmp_path):
  url = published_to(built, "s3", tmp_path)  # published past the proxy: no fault set yet
  proxy = s3_proxy
  proxy.cut_after, proxy.cut_connections = 3000, 4      # dropped mid-transfer
  first = streamed_examples(url, "train", tmp_path / "c1")
  assert proxy.cut >= 1
  streaming._caches.clear()
  streaming.open_builder(SPEC, url, cache_dir=tmp_path / "c2")  # manifest and small files
  proxy.go_down_for(5.0)                                # the server gone for a while
  second = streamed_examples(url, "train", tmp_path / "c2")
  # Requests met the outage (refused connections) and were retried (by the clients'
  # own retries or ours) until it ended: the same examples, in the same order.
  assert second == first and proxy.refused >= 1
  assert first == local_examples(built, "train")


@ONE_FORMAT
def test_an_unreachable_bucket_ends_in_one_clear_message(built, tmp_path, s3_proxy):
  url = published_to(built, "s3", tmp_path)
  proxy = s3_proxy
  cache = shard_cache_lib.ShardCache(url, SPEC, cache_dir=tmp_path / "c", retry_seconds=3)
  proxy.go_down_for(3600)
  shard = sorted(cache.shard_names())[0]
  cache.add_reader(lambda epoch: [[shard]], 1, 1)
  with pytest.raises(bucket_lib.BucketError) as error:
    with cache.reading(shard):
      pass
  message = str(error.value)
  assert "\n" not in message and url.split("/")[2] in message
  assert "gave up after" in message and "attempt(s)" in message
  cache.close()


@pytest.mark.parametrize("built", ["array_record"], indirect=True)  # Grain's usual format
def test_grain_pipelines_stream_a_bucket_and_resume(built, tmp_path):
  from imagesets.reading import grain_pipeline
  url = published_to(built, "file", tmp_path)
  kwargs = dict(data_dir=url, batch_size=8, image_size=32, cache_dir=tmp_path / "c")
  labels = [int(l) for b in grain_pipeline.classification_eval(SPEC, split="test", **kwargs)
            for l in b["label"]]
  assert labels == [label for _, label in local_examples(built, "test")]
  train = grain_pipeline.classification_train(SPEC, seed=4, num_epochs=2, worker_count=1,
                                              **kwargs)
  iterator = iter(train)
  for _ in range(7):
    next(iterator)
  state = iterator.get_state()
  rest = [b["image"].tobytes() for b in iterator]
  assert len(rest) == 2 * 160 // 8 - 7
  resumed = iter(grain_pipeline.classification_train(SPEC, seed=4, num_epochs=2,
                                                     worker_count=1, **kwargs))
  resumed.set_state(state)
  assert [b["image"].tobytes() for b in resumed] == rest


def test_a_fetched_version_is_streamed_from_its_copy(built, tmp_path):
  url = published_to(built, "file", tmp_path)
  data_dir = imagesets.fetch(url, SPEC, cache_dir=tmp_path / "c", progress=False)
  builder = streaming.open_builder(SPEC, url, cache_dir=tmp_path / "c")
  cache = streaming.cache_of(builder)
  assert cache.complete and cache.folder == pathlib.Path(data_dir) / FOLDER
  assert sorted(streamed_examples(url, "train", tmp_path / "c")) == sorted(
      local_examples(built, "train"))
  assert cache.stats["shards"] == 0
