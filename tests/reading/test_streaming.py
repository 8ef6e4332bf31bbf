"""sources + streaming + shard_cache: training straight from a bucket, shard by shard,
through a bounded content-addressed cache — the same examples as the local build, on s3
(SeaweedFS), gs (fake-gcs-server) and file:// buckets, TFRecord and ArrayRecord; downloads
counted under a limit, faults, sharing between processes and pipelines, killed readers,
resume, damage, untrusted names, two endpoints, a full disk.

Downloads are counted where they happen, at the bucket: an audit hook counts the opens of
a file:// bucket's shard files (`BucketReads`), whatever code does them."""

import collections
import concurrent.futures
import gc
import hashlib
import json
import os
import pathlib
import re
import shutil
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
from imagesets.publishing import fetch as fetch_lib
from imagesets.publishing import publish
from imagesets.reading import input_pipeline
from imagesets.reading import shard_cache as shard_cache_lib
from imagesets.reading import sources
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


# Counts the opens (for reading) of a file:// bucket's shard files: every download of a
# shard, in this process, by any code. Installed once (audit hooks cannot be removed).
AUDIT = """
import collections, sys
class BucketReads:
  root, opened = None, collections.Counter()
  @classmethod
  def hook(cls, event, args):
    if event == "open" and cls.root and isinstance(args[0], str) and isinstance(args[1], str):
      name = args[0].rsplit("/", 1)[-1]
      if args[0].startswith(cls.root) and "-of-" in name and "r" in args[1] and "+" not in args[1]:
        cls.opened[name] += 1
sys.addaudithook(BucketReads.hook)
"""
exec(AUDIT)


@pytest.fixture
def bucket_reads():
  """Counts shard downloads from the file:// bucket `url` given to `watch(url)`."""
  def watch(url):
    BucketReads.root = url[len("file://"):]
    BucketReads.opened = collections.Counter()
    return BucketReads.opened
  yield watch
  BucketReads.root = None


def our_line(error: BaseException) -> str:
  """The message our code raised: as it is, or, through tf.data's numpy functions (whose
  errors carry the Python traceback), the line TensorFlow quotes it on."""
  if not isinstance(error, tf.errors.OpError):
    return str(error)
  (line,) = [line for line in str(error).splitlines()
             if re.match(r"\s*imagesets\.[\w.]+(Error|Exception): ", line)]
  return line.split(": ", 1)[1].strip()


def train_bytes(built) -> list[int]:
  return [p.stat().st_size for p in (built / FOLDER).glob("*-train.*-of-*")]


def folder_bytes(folder: pathlib.Path) -> int:
  """What is on disk under the folder (downloads in progress at their current size)."""
  total = 0
  for root, _, files in os.walk(folder):
    for name in files:
      try:
        total += os.stat(os.path.join(root, name)).st_size
      except FileNotFoundError:  # renamed or evicted while we looked
        pass
  return total


def open_evicted(folder: pathlib.Path) -> set[tuple[str, str]]:
  """(fd, path) of the files under `folder` this process holds open after they were
  removed (an evicted shard kept open stays on the disk)."""
  found = set()
  for fd in os.listdir("/proc/self/fd"):
    try:
      target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # closed meanwhile
      continue
    if target.startswith(str(folder)) and target.endswith(" (deleted)"):
      found.add((fd, target))
  return found


# The longest an evicted file may stay open: a pin racing an eviction holds one for
# moments (it opens the file, waits for the evictor's lock, sees it gone); a shard kept
# open by a reader stays for its window or longer.
HELD_OPEN_SECONDS = 1.0


def disk_peak(folder: pathlib.Path, base: int = 0):
  """Polls `folder` in a thread until `stop()`, which returns (the peak of its bytes, the
  longest any file removed from it stayed open in this process, in seconds)."""
  peak, longest, stopped = [0], [0.0], threading.Event()

  def poll():
    since = {}
    while not stopped.is_set():
      peak[0] = max(peak[0], folder_bytes(folder) - base)
      now, held = time.monotonic(), open_evicted(folder)
      since = {key: since.get(key, now) for key in held}
      longest[0] = max([longest[0], *(now - t for t in since.values())])
      time.sleep(0.002)

  watcher = threading.Thread(target=poll)
  watcher.start()

  def stop():
    stopped.set()
    watcher.join()
    return peak[0], longest[0]
  return stop


def test_under_a_limit_each_shard_is_downloaded_at_most_once_per_epoch(built, tmp_path,
                                                                        bucket_reads):
  url = published_to(built, "file", tmp_path)
  sizes = train_bytes(built)
  limit = sum(sizes) // 4
  imagesets.load(SPEC, "train", url, cache_dir=tmp_path / "c")  # metadata only
  metadata = folder_bytes(tmp_path / "c")
  opened = bucket_reads(url)
  stop = disk_peak(tmp_path / "c", metadata)
  try:
    count = sum(1 for _ in imagesets.load(SPEC, "train", url, cache_dir=tmp_path / "c",
                                          cache_limit=limit, shuffle=True, seed=0,
                                          num_epochs=3))
  finally:
    peak, held_open = stop()
  assert count == 3 * 160
  assert 0 < peak <= limit, (peak, limit)
  assert held_open < HELD_OPEN_SECONDS, held_open  # no evicted shard kept open (on disk)
  assert sum(opened.values()) <= 3 * NUM_SHARDS and max(opened.values()) <= 3, opened
  # Without a limit, every shard once in all.
  opened = bucket_reads(url)
  assert sum(1 for _ in imagesets.load(SPEC, "train", url, cache_dir=tmp_path / "c2",
                                       shuffle=True, seed=0, num_epochs=3)) == 3 * 160
  assert sum(opened.values()) == NUM_SHARDS and set(opened.values()) == {1}


def test_cache_limit_below_the_largest_shard_is_a_clear_error(built, tmp_path):
  url = published_to(built, "file", tmp_path)
  with pytest.raises(ValueError, match=r"cache_limit 100 B is smaller than the largest shard"):
    imagesets.load(SPEC, "train", url, cache_dir=tmp_path / "c", cache_limit=100)
  assert shard_cache_lib.parse_size("20GB") == 20 * 10**9
  assert shard_cache_lib.parse_size("512 MiB") == 512 * 2**20
  with pytest.raises(ValueError, match="is not a size"):
    shard_cache_lib.parse_size("lots")
  # One limit, however it is written: one cache (one set of readers) per folder.
  assert (shard_cache_lib.shared(tmp_path / "c", "20GB")
          is shard_cache_lib.shared(tmp_path / "c", 20_000_000_000))


def test_a_cached_version_is_read_without_the_bucket(built, tmp_path):
  url = published_to(built, "file", tmp_path)
  bucket_folder = pathlib.Path(url[len("file://"):])
  ds = imagesets.load(SPEC, "train", url, cache_dir=tmp_path / "c", shuffle=True, seed=0,
                      num_epochs=2)
  iterator = iter(ds)
  for _ in range(160):  # the first epoch: every shard downloaded
    next(iterator)
  time.sleep(0.2)
  bucket_folder.rename(bucket_folder.with_name("gone"))  # any request now fails
  assert sum(1 for _ in iterator) == 160
  # Opened again with the version pinned: the cached manifest, no network.
  assert len(streamed_examples(url, "train", tmp_path / "c")) == 160


@pytest.mark.parametrize("number", ["00003", "00005"])  # in window 0; met by the read-ahead
def test_a_damaged_shard_is_fetched_again_once_then_refused(built, tmp_path, monkeypatch,
                                                            bucket_reads, number):
  url = published_to(built, "file", tmp_path)
  copy_to = bucket_lib.Bucket.copy_to
  damaged = collections.Counter()

  def flaky(self, rel, out, progress=None, size=None):
    if "train" in rel and f"-{number}-of-" in rel and (
        damaged[rel] < 1 or "always" in os.environ.get("DAMAGE", "")):
      damaged[rel] += 1
      out.write(b"\0" * 8)  # and the rest of the shard: 8 bytes too many
    copy_to(self, rel, out, progress, size)

  monkeypatch.setattr(bucket_lib.Bucket, "copy_to", flaky)
  opened = bucket_reads(url)
  assert sorted(streamed_examples(url, "train", tmp_path / "c")) == sorted(
      local_examples(built, "train"))
  assert sum(damaged.values()) == 1 and sum(opened.values()) == NUM_SHARDS + 1
  monkeypatch.setenv("DAMAGE", "always")
  opened = bucket_reads(url)
  with pytest.raises(Exception, match="does not match its manifest .* after two downloads"):
    streamed_examples(url, "train", tmp_path / "other-cache")
  # Exactly two downloads of the damaged shard, whether the read-ahead met it or the reader.
  assert [n for n, c in opened.items() if f"-{number}-of-" in n and c == 2] and all(
      c == 1 for n, c in opened.items() if f"-{number}-of-" not in n), opened


@ONE_FORMAT
def test_a_download_failure_is_over_once_the_shard_is_here(built, tmp_path, bucket_reads):
  # A read-ahead's failure is kept for the reader (not downloaded twice more); once the
  # shard is here (another process downloaded it), a later eviction downloads it again.
  url = published_to(built, "file", tmp_path)
  source = sources.open_source(SPEC, url, cache_dir=tmp_path / "c")
  cache = source.cache
  name = sorted(n for n in source.shards if "-train." in n)[0]
  shard = source.shards[name]
  cache._failed[shard.sha256] = RuntimeError("an old failure")  # pylint: disable=protected-access
  shutil.copy(built / FOLDER / name, cache.path(shard))  # another process's download
  cache.pin(shard)
  cache.unpin(shard)
  cache.path(shard).unlink()  # evicted under a limit
  opened = bucket_reads(url)
  cache.prefetch([shard])
  deadline = time.monotonic() + 60
  while cache._in_flight and time.monotonic() < deadline:  # pylint: disable=protected-access
    time.sleep(0.01)
  cache.pin(shard)
  cache.unpin(shard)
  assert list(opened.values()) == [1]


@ONE_FORMAT
def test_a_reader_downloads_its_own_shard_rather_than_wait_behind_read_ahead(
    built, tmp_path, monkeypatch):
  # One download thread busy, three shards queued ahead of it: a reader that needs the
  # last of them now downloads it itself instead of waiting for the other three.
  url = published_to(built, "file", tmp_path)
  source = sources.open_source(SPEC, url, cache_dir=tmp_path / "c")
  cache = shard_cache_lib.ShardCache(tmp_path / "c1", downloads=1)
  names = sorted(n for n in source.shards if "-train." in n)[:4]
  shards = [source.shards[n] for n in names]
  started, release, by = threading.Event(), threading.Event(), {}
  checked = shard_cache_lib.transfer.checked_download

  def slow(bucket, rel, target, entry, **kwargs):
    by[rel.rsplit("/", 1)[-1]] = threading.current_thread().name
    if rel.endswith(names[0]):
      started.set()
      release.wait(30)  # the download thread stays busy with the first
    return checked(bucket, rel, target, entry, **kwargs)

  monkeypatch.setattr(shard_cache_lib.transfer, "checked_download", slow)
  cache.prefetch(shards)
  assert started.wait(30)
  cache.pin(shards[3])
  assert by == {names[0]: by[names[0]], names[3]: threading.current_thread().name}
  release.set()
  cache.unpin(shards[3])
  for shard in shards[:3]:
    cache.pin(shard)
  cache.close()


def test_a_shard_missing_from_the_bucket_is_one_clear_line(built, tmp_path):
  url = published_to(built, "file", tmp_path)
  (shard,) = pathlib.Path(url[len("file://"):]).glob(f"{FOLDER}/*-train.*-00005-of-*")
  shard.unlink()
  with pytest.raises(Exception) as error:
    streamed_examples(url, "train", tmp_path / "c")
  message = our_line(error.value)
  assert "\n" not in message and shard.name in message
  assert "missing from the bucket" in message and "tell the publisher" in message


RESUME = """
import json, sys
import tensorflow as tf
import tensorflow_datasets as tfds
import imagesets
%(audit)s
url, cache, mode, take = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
BucketReads.root = url[len("file://"):]
ds = imagesets.load("%(spec)s", "train", url, cache_dir=cache, shuffle=True, seed=5,
                    num_epochs=2, cache_limit=%(limit)d,
                    decoders={"image": tfds.decode.SkipDecoding()})
iterator = iter(ds)
state = tf.train.Checkpoint(iterator=iterator)
if mode != "start":
  state.read(mode).assert_consumed()
first = [next(iterator) for _ in range(take)]
path = state.write(cache + "-ckpt-" + mode.rsplit("-", 1)[-1] + "-" + str(take))
rest = [(e["image"].numpy().hex()[-40:], int(e["label"])) for e in iterator]
print(json.dumps({"rest": rest, "checkpoint": path, "opened": dict(BucketReads.opened)}))
"""


@ONE_FORMAT
def test_a_job_resumed_twice_reads_the_same_examples_and_downloads_only_what_it_reads(
    built, tmp_path):
  url = published_to(built, "file", tmp_path)
  limit = sum(train_bytes(built)) // 3
  script = RESUME % {"spec": SPEC, "limit": limit, "audit": AUDIT}
  # Which shard holds each example (the local build's shards, read one by one).
  shard_of = {}
  for path in (built / FOLDER).glob("*-train.*-of-*"):
    for record in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
      example = tf.train.Example.FromString(record).features.feature
      shard_of[(example["image"].bytes_list.value[0].hex()[-40:],
                example["label"].int64_list.value[0])] = path.name

  def run(cache, mode, take):
    result = subprocess.run([sys.executable, "-c", script, url, str(tmp_path / cache), mode,
                             str(take)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])

  uninterrupted = run("a", "start", 60)                   # mid-epoch 0
  assert len(uninterrupted["rest"]) == 2 * 160 - 60
  # Resumed on the same machine (a tf.data checkpoint names the cache's files; shards
  # evicted since are fetched again).
  # Checkpoints inside windows (shards hold 10 examples; a window whole shards): one
  # taken exactly at a window's end is restored by tf.data rebuilding that finished
  # window, whose shards are then pinned (and, if evicted, fetched) once more.
  once = run("a", uninterrupted["checkpoint"], 155)       # resumed: into epoch 1
  assert len(once["rest"]) == 2 * 160 - 215
  twice = run("a", once["checkpoint"], 20)                # resumed again
  expected = [tuple(e) for e in uninterrupted["rest"]]
  assert [tuple(e) for e in once["rest"]] == expected[155:]
  assert [tuple(e) for e in twice["rest"]] == expected[175:]
  # The twice-resumed job restored at example 55 of epoch 1: it downloaded only shards
  # holding examples it read (its first window's shards, then the ones after).
  read = {shard_of[tuple(e)] for e in expected[155:]}
  assert set(twice["opened"]) <= read, (set(twice["opened"]) - read)
  assert max(twice["opened"].values()) == 1


WORKER = """
import json, sys
import imagesets
%(audit)s
url, cache, limit = sys.argv[1], sys.argv[2], sys.argv[3]
BucketReads.root = url[len("file://"):]
count = sum(1 for _ in imagesets.load("%(spec)s", "train", url, cache_dir=cache, shuffle=True,
                                      seed=int(sys.argv[4]), num_epochs=2,
                                      cache_limit=None if limit == "none" else int(limit)))
print(json.dumps({"count": count, "opened": dict(BucketReads.opened)}))
"""


@ONE_FORMAT
@pytest.mark.parametrize("limited", [False, True])
def test_two_processes_share_one_cache_within_its_limit(built, tmp_path, limited):
  url = published_to(built, "file", tmp_path)
  sizes = train_bytes(built)
  limit = sum(sizes) // 2 if limited else None
  imagesets.load(SPEC, "train", url, cache_dir=tmp_path / "c")  # metadata only
  metadata = folder_bytes(tmp_path / "c")
  script = WORKER % {"spec": SPEC, "audit": AUDIT}
  workers = [subprocess.Popen([sys.executable, "-c", script, url, str(tmp_path / "c"),
                               str(limit or "none"), str(seed)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for seed in (0, 1)]
  peak = 0
  while any(worker.poll() is None for worker in workers):  # the bound, polled
    peak = max(peak, folder_bytes(tmp_path / "c") - metadata)
    time.sleep(0.002)
  outs = []
  for worker in workers:
    stdout, stderr = worker.communicate(timeout=300)
    assert worker.returncode == 0, stderr[-3000:]
    outs.append(json.loads(stdout.strip().splitlines()[-1]))
  assert [out["count"] for out in outs] == [320, 320]
  opened = collections.Counter()
  for out in outs:
    opened.update(out["opened"])
  if limited:
    assert peak <= limit, (peak, limit)
    assert sum(opened.values()) <= 2 * 2 * NUM_SHARDS  # at most once per epoch each
  else:  # every shard downloaded once, by one of the two
    assert sorted(opened.values()) == [1] * NUM_SHARDS
  # The per-shard download locks the two contended for are removed, not piled up.
  assert list((tmp_path / "c").rglob(".locks-2/*")) == []


COLD = """
import os, pathlib, sys, time
import imagesets
url, cache, ready, count, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
for r in range(rounds):  # every process opens cold cache r at the same moment
  pathlib.Path(ready, f"{r}-{os.getpid()}").touch()
  waited = time.monotonic()
  while sum(1 for n in os.listdir(ready) if n.startswith(f"{r}-")) < count:
    if time.monotonic() - waited > 240:  # (imports of TensorFlow vary a lot)
      sys.exit(f"round {r}: another process failed")
    time.sleep(0.001)
  imagesets.load("%(spec)s", "test", url, cache_dir=f"{cache}/{r}")
print(sum(1 for _ in imagesets.load("%(spec)s", "test", url, cache_dir=f"{cache}/0")))
"""


@ONE_FORMAT
def test_processes_opening_a_cold_cache_at_once_all_work(built, tmp_path):
  """3 processes open 20 cold caches, each at the same moment (a file barrier per round):
  the race of the manifest's temporary file (36 of 400 tries) shows within these rounds."""
  url = published_to(built, "file", tmp_path)
  ready = tmp_path / "ready"
  ready.mkdir()
  processes = [subprocess.Popen([sys.executable, "-c", COLD % {"spec": SPEC}, url,
                                 str(tmp_path / "c"), str(ready), "3", "20"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(3)]
  for process in processes:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]
    assert out.split()[-1] == "40"


KILLED = """
import os, signal, sys, time
import imagesets
url, cache = sys.argv[1], sys.argv[2]
root, started = url[len("file://"):], []
def killed_mid_download(event, args):  # 4 downloads under way at once, then the process dies
  if (event == "open" and isinstance(args[0], str) and args[0].startswith(root)
      and "-of-" in args[0].rsplit("/", 1)[-1]):
    started.append(args[0])
    if len(started) == 4:
      os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.5)
sys.addaudithook(killed_mid_download)
sum(1 for _ in imagesets.load("%(spec)s", "train", url, cache_dir=cache, shuffle=True, seed=0))
"""


@ONE_FORMAT
@pytest.mark.parametrize("limited", [True, False])
def test_a_reader_killed_mid_download_leaves_a_cache_that_works(built, tmp_path, limited):
  url = published_to(built, "file", tmp_path)
  killed = subprocess.run([sys.executable, "-c", KILLED % {"spec": SPEC}, url,
                           str(tmp_path / "c")], capture_output=True, text=True, timeout=300)
  assert killed.returncode == -9, killed.stderr[-3000:]
  leftovers = [p for p in (tmp_path / "c").rglob("*") if ".part-" in p.name]
  assert len(leftovers) == 4  # what a SIGKILL, OOM kill or preemption leaves behind
  # Room for the 4 leftovers only, if they counted; without a limit they must go too.
  limit = max(train_bytes(built)) * 4 if limited else None
  start = time.monotonic()
  examples = streamed_examples(url, "train", tmp_path / "c", cache_limit=limit, shuffle=True,
                               seed=0)
  assert sorted(examples) == sorted(local_examples(built, "train"))
  assert time.monotonic() - start < 60
  assert not [p for p in (tmp_path / "c").rglob("*") if ".part-" in p.name]


@ONE_FORMAT
def test_lock_files_of_an_older_imagesets_on_the_folder_are_left_alone(built, tmp_path):
  # Weeks-long jobs while the package is upgraded: imagesets before the layout marker
  # locked `.locks/<sha>` and kept the files; one removed under its waiter would let two
  # of its processes hold a shard's lock at once.
  url = published_to(built, "file", tmp_path)
  shas = [hashlib.sha256(p.read_bytes()).hexdigest()
          for p in (built / FOLDER).glob("*-train.*-of-*")]
  old_locks = tmp_path / "c" / "shards" / ".locks"
  old_locks.mkdir(parents=True)
  for sha in shas:
    (old_locks / sha).touch()
  assert len(streamed_examples(url, "train", tmp_path / "c")) == 160
  assert sorted(p.name for p in old_locks.iterdir()) == sorted(shas)
  assert (tmp_path / "c" / "shards" / ".layout").read_text() == "2\n"


@ONE_FORMAT
@pytest.mark.parametrize("marker, said", [
    ("layout 3", "is a shard cache of layout '3'"), ("folder", "is not a file: refused"),
    ("fifo", "is not a file: refused"), ("symlink", "is not a file (Too many levels"),
    ("empty", "the cache's layout marker, is empty")])
def test_a_cache_folder_of_another_layout_is_refused_in_one_line(built, tmp_path, marker, said):
  url = published_to(built, "file", tmp_path)
  path = tmp_path / "c" / "shards" / ".layout"
  path.parent.mkdir(parents=True)
  {"layout 3": lambda: path.write_text("3\n"), "folder": path.mkdir,
   "fifo": lambda: os.mkfifo(path), "empty": path.touch,
   "symlink": lambda: path.symlink_to(tmp_path / "elsewhere")}[marker]()
  with pytest.raises(shard_cache_lib.CacheLayoutError) as error:
    streamed_examples(url, "train", tmp_path / "c")
  assert str(path) in str(error.value) and said in str(error.value)
  assert "\n" not in str(error.value)
  assert sorted(p.name for p in path.parent.iterdir()) == [".layout"]


def test_temporary_layout_markers_of_killed_processes_are_removed(tmp_path):
  # Only old ones whose pid is gone: a young one may be another pid namespace's, marking
  # now. Odd entries of the same name (a folder, a pid too large) are left, not fatal.
  folder = tmp_path / "shards"
  folder.mkdir()
  gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                        capture_output=True, text=True, check=True).stdout.strip()
  old = time.time() - 2 * shard_cache_lib.STALE_LAYOUT_SECONDS
  killed, young = folder / f".layout.tmp-{gone}-0a1b2c3d", folder / f".layout.tmp-{gone}-1"
  alive = folder / f".layout.tmp-{os.getpid()}-2"
  for path in (killed, young, alive):
    path.write_text("2\n")
  os.utime(killed, (old, old))
  os.utime(alive, (old, old))
  (folder / f".layout.tmp-{gone}-3").mkdir()
  (folder / ".layout.tmp-99999999999999999999-4").write_text("2\n")
  shard_cache_lib.ShardCache(tmp_path)
  assert sorted(p.name for p in folder.iterdir()) == sorted([
      ".layout", ".locks-2", young.name, alive.name, f".layout.tmp-{gone}-3",
      ".layout.tmp-99999999999999999999-4"])


def test_two_layouts_opening_a_cold_cache_at_once_agree_on_one(tmp_path, monkeypatch):
  # Another layout's process marks the folder between this one's look and its mark: the
  # first mark stays, and this process, reading it, refuses the folder.
  folder = tmp_path / "shards"
  folder.mkdir()
  link = os.link

  def after_another(source, target):
    (folder / ".layout").write_text("3\n")
    link(source, target)
  monkeypatch.setattr(shard_cache_lib.os, "link", after_another)
  with pytest.raises(shard_cache_lib.CacheLayoutError, match="layout '3'"):
    shard_cache_lib.ShardCache(tmp_path)
  assert (folder / ".layout").read_text() == "3\n"
  assert sorted(p.name for p in folder.iterdir()) == [".layout"]


def test_train_eval_and_a_dropped_pipeline_share_a_small_limit_in_one_process(built, tmp_path):
  url = published_to(built, "file", tmp_path)
  limit = max(train_bytes(built)) * 6
  kwargs = dict(data_dir=url, batch_size=8, image_size=32, cache_dir=tmp_path / "c",
                cache_limit=limit)
  dropped = input_pipeline.classification_train(SPEC, seed=1, shuffle_buffer=8, **kwargs)
  next(iter(dropped))  # a sweep's or a notebook's pipeline, read a little, then dropped
  del dropped
  gc.collect()         # (Python's periodic collection does it too)
  cache = shard_cache_lib.shared(fetch_lib.cache_root(tmp_path / "c"), limit)
  assert len(cache._readers) == 0 and cache._pins == {}  # the dropped reader left
  train = iter(input_pipeline.classification_train(SPEC, seed=0, num_epochs=2,
                                                   shuffle_buffer=8, **kwargs))
  evaluation = input_pipeline.classification_eval(SPEC, split="test", **kwargs)
  start, seen = time.monotonic(), 0
  for _ in range(2):  # keras fit(validation_data=...): an epoch, then the evaluation
    seen += sum(next(train)["label"].shape[0] for _ in range(160 // 8))
    assert sum(b["label"].shape[0] for b in evaluation) == 40
  assert seen == 320 and time.monotonic() - start < 60


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


@ONE_FORMAT
def test_symlinks_in_the_cache_folders_are_never_followed_out_of_it(built, tmp_path):
  """A symlink where the cache keeps a version's metadata or its shards, or above them (a
  shared scratch disk, a user's link to a bigger disk) is refused in one line naming it:
  never followed, never removed, nothing written where it points."""
  url = published_to(built, "file", tmp_path)
  victim = tmp_path / "victim"
  victim.mkdir()
  (victim / "thesis.tex").write_text("years of work")
  links = {tmp_path / "c1": fetch_lib.cached_data_dir(url, tmp_path / "c1")
           / "synthetic_images" / "variable" / ".stream-1.0.0",
           tmp_path / "c2": tmp_path / "c2" / "shards",
           tmp_path / "c3": fetch_lib.cached_data_dir(url, tmp_path / "c3") / "synthetic_images"}
  for cache, link in links.items():
    link.parent.mkdir(parents=True)
    os.symlink(victim, link)
    with pytest.raises(Exception) as error:
      sources.open_source(SPEC, url, cache_dir=cache)
    message = str(error.value)
    assert "\n" not in message and f"{link} is a symlink" in message, message
    assert "cache_dir" in message and link.is_symlink()
  assert sorted(os.listdir(victim)) == ["thesis.tex"]
  assert (victim / "thesis.tex").read_text() == "years of work"


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


@ONE_FORMAT
# Full at the metadata (4k, 8k: dataset_info.json comes after the card and the duplicate
# report), the manifest, the shards.
@pytest.mark.parametrize("size", ["4k", "8k", "64k", "1m"])
def test_a_full_disk_ends_in_one_line_saying_so(built, tmp_path, size):
  url = published_to(built, "file", tmp_path)
  small = tmp_path / "small"
  small.mkdir()
  # A real full disk: a small tmpfs (needs root; the version's shards are ~5 MB).
  mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(small)],
                           capture_output=True)
  if mounted.returncode:
    pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
  try:
    start = time.monotonic()
    with pytest.raises(Exception) as error:
      streamed_examples(url, "train", small / "c")
    message = our_line(error.value)
    assert "\n" not in message and "the disk is full" in message and str(small) in message
    assert time.monotonic() - start < 30  # not retried as a network fault
  finally:
    subprocess.run(["umount", "-l", str(small)], check=True)  # lazy: open files may remain


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
  imagesets.load(SPEC, "train", url, cache_dir=tmp_path / "c2")  # manifest and small files
  # The server gone for longer than the clients' own retries last (3 attempts), so only
  # the cache's own retry (transfer.Deadline) can bridge it.
  proxy.go_down_for(12.0)
  second = streamed_examples(url, "train", tmp_path / "c2")
  # Requests met the outage (refused connections) and were retried until it ended: the
  # same examples, in the same order.
  assert second == first and proxy.refused >= 1
  assert first == local_examples(built, "train")
  cache = shard_cache_lib.shared(fetch_lib.cache_root(tmp_path / "c2"))
  assert cache.stats["retries"] >= 1  # the cache's own retry ran


@ONE_FORMAT
def test_an_unreachable_bucket_ends_in_one_clear_message(built, tmp_path, s3_proxy,
                                                         monkeypatch):
  url = published_to(built, "s3", tmp_path)
  proxy = s3_proxy
  source = sources.open_source(SPEC, url, cache_dir=tmp_path / "c")
  monkeypatch.setattr(source.cache, "retry_seconds", 3)
  proxy.go_down_for(3600)
  shard = source.shards[sorted(source.shards)[0]]
  start = time.monotonic()
  with pytest.raises(bucket_lib.BucketError) as error:
    source.cache.pin(shard)
  message = str(error.value)
  assert "\n" not in message and url.split("/")[2] in message
  assert "gave up after" in message and "attempt(s)" in message
  assert time.monotonic() - start < 3 + 30  # one retry budget (plus the clients' timeouts)


@ONE_FORMAT
def test_a_reader_waiting_for_a_download_stops_when_closed_or_after_a_bound(
    built, tmp_path, monkeypatch):
  """No wait inside a tf.data numpy function is unbounded (TensorFlow's iterator
  destructor waits for them holding the GIL): a reader waiting for another thread's
  download of its shard ends at once when closed, and after DOWNLOAD_WAIT_SECONDS anyway."""
  url = published_to(built, "file", tmp_path)
  source = sources.open_source(SPEC, url, cache_dir=tmp_path / "c")
  names = sorted(source.shards)
  for name in names[:2]:
    source.cache._in_flight.add(source.shards[name].sha256)  # a download that never ends
  assert_closing_ends_the_wait(source, names)
  monkeypatch.setattr(shard_cache_lib, "DOWNLOAD_WAIT_SECONDS", 1)
  errors = []
  bounded = threading.Thread(target=lambda: errors.append(
      pytest.raises(Exception, source.cache.pin, source.shards[names[1]]).value), daemon=True)
  bounded.start()
  bounded.join(10)
  assert not bounded.is_alive() and "gave up waiting for the download" in str(errors[0])


@ONE_FORMAT
@pytest.mark.parametrize("limited", [False, True])
def test_downloads_run_two_windows_ahead_without_a_limit_and_one_under_it(
    built, tmp_path, bucket_reads, limited):
  # Without a limit the pool never idles waiting for the reader to move on (a cold epoch
  # runs at the downloads' rate); under one, the next window is all the room allows for.
  url = published_to(built, "file", tmp_path)
  limit = sum(train_bytes(built)) // 2 if limited else None
  source = sources.open_source(SPEC, url, cache_dir=tmp_path / "c", cache_limit=limit)
  names = sorted(name for name in source.shards if "-train." in name)
  opened = bucket_reads(url)
  reader = source.reader(lambda g: names[2 * g:2 * g + 2], 8)
  reader.enter(0)
  deadline = time.monotonic() + 60
  while source.cache._in_flight and time.monotonic() < deadline:  # pylint: disable=protected-access
    time.sleep(0.01)
  reader.close()
  assert sorted(opened) == names[:4 if limited else 6]
  assert set(opened.values()) == {1}


def assert_closing_ends_the_wait(source, names) -> None:
  """A reader waiting to enter window 0 (names[0]) ends at once, in one line, when closed."""
  reader = source.reader(lambda g: [names[g]], 2)
  errors = []

  def enter():
    try:
      reader.enter(0)
    except Exception as error:  # noqa: BLE001
      errors.append(str(error))
  waiting = threading.Thread(target=enter, daemon=True)
  waiting.start()
  time.sleep(0.5)
  reader.close()
  waiting.join(5)
  assert not waiting.is_alive() and "closed" in errors[0] and "\n" not in errors[0]


@pytest.mark.parametrize("built", ["array_record"], indirect=True)  # Grain's usual format
def test_grain_reads_by_position_from_threads_within_the_limit(built, tmp_path, bucket_reads):
  # Grain reads one record per call from 16 threads (its default), which straddle window
  # ends, and a thread starved of the GIL falls behind the others: under a limit, each
  # shard is still downloaded once an epoch (a window is let go once its reads have come).
  url = published_to(built, "file", tmp_path)
  limit = sum(train_bytes(built)) // 4
  source = streaming.PositionSource(url, SPEC, "train", shuffle=True, seed=3, num_epochs=2,
                                    cache_dir=tmp_path / "c", cache_limit=limit)
  metadata = folder_bytes(tmp_path / "c")
  opened = bucket_reads(url)
  stop = disk_peak(tmp_path / "c", metadata)
  try:
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
      records = list(pool.map(source.__getitem__, range(len(source)), chunksize=1))
  finally:
    peak, held_open = stop()
  assert len(records) == 2 * 160
  assert sorted(records[:160]) == sorted(records[160:])  # each epoch every record once
  assert len(set(records[:160])) == 160
  assert 0 < peak <= limit, (peak, limit)
  assert held_open < HELD_OPEN_SECONDS, held_open
  assert sum(opened.values()) <= 2 * NUM_SHARDS, opened


@pytest.mark.parametrize("built", ["array_record"], indirect=True)
def test_a_live_grain_iterator_rewound_under_a_limit_reads_each_window_once_more(
    built, tmp_path, bucket_reads):
  # Grain's default loader (16 threads): set_state on the live iterator cancels the reads
  # queued, not those under way; they must not move the rewound pass (it would then read
  # the windows in between record by record and download them again).
  import grain.python as grain
  url = published_to(built, "file", tmp_path)
  source = streaming.PositionSource(url, SPEC, "train", shuffle=True, seed=3, num_epochs=2,
                                    cache_dir=tmp_path / "c",
                                    cache_limit=sum(train_bytes(built)) // 4)
  loader = grain.DataLoader(data_source=source, worker_count=0, sampler=grain.SequentialSampler(
      len(source), grain.NoSharding()))
  assert source.plan.window_shards == 1 and source.plan.window_span(6)[0] == 60
  calls = []
  shards = source.reader._reader  # pylint: disable=protected-access
  for name in ("enter", "visit"):
    def logged(g, *args, _call=getattr(shards, name), _name=name):
      calls.append((_name, g))
      return _call(g, *args)
    setattr(shards, name, logged)
  iterator = iter(loader)
  read = [next(iterator) for _ in range(60)]
  state = iterator.get_state()
  ahead = [next(iterator) for _ in range(40)]
  opened = bucket_reads(url)
  iterator.set_state(state)
  rest = list(iterator)
  assert rest == ahead + rest[40:] and len(read) + len(rest) == len(source)
  # The rewound pass enters each window from 6 on once, in order, and visits none; the
  # reads under way at the rewind (of its 16 threads) may enter a window or two before it
  # began, and are read aside (a visit each) when it began while they waited.
  start = calls.index(("enter", 6), calls.index(("enter", 7)))
  rewound = calls[start:]
  assert [c for c in rewound if c[0] == "enter"] == [("enter", g) for g in range(6, 32)]
  assert len([c for c in rewound if c[0] == "visit"]) <= 16, calls
  windows_left = 2 * NUM_SHARDS - 6  # (windows of 1 shard: 6 read before position 60)
  assert sum(opened.values()) <= windows_left + 6, opened  # (26-29 seen)


def test_position_reads_enter_windows_in_order_and_start_a_pass_over(built, tmp_path):
  # Parallel reads reach windows out of order: the reader enters each window once, in
  # order; a read a little behind the windows held visits its shard (Grain's threads),
  # one far behind starts a new pass there.
  calls = []

  class Logged:
    def enter(self, g):
      calls.append(g)
      return [built / FOLDER / name for name in plan.window(g)]

    def visit(self, g, index, use):
      calls.append(("visit", g))
      return use(built / FOLDER / plan.window(g)[index])

  source = sources.open_source(SPEC, built)
  plan = streaming.plan_for(source, "train", shuffle=True, seed=0, window_shards=2)
  reader = streaming.PositionReader(source, plan, Logged(), held=2)
  far = 12 + streaming._STRAGGLE_WINDOWS + 1  # pylint: disable=protected-access
  asked = collections.Counter()  # (each read asks for another record of its window)
  for g in (6, 7, 6, 9, 8, 9, 12, 10, far, 0, 1):  # 12, far: jumps (a restored position)
    reader.read(plan.window_positions(g)[asked[g]:asked[g] + 1])
    asked[g] += 1
  assert calls == [6, 7, 8, 9, 12, ("visit", 10), far, 0, 1]


class LoggedReader:
  """A shard reader over a local build that logs what a PositionReader asks of it."""

  def __init__(self, built, plan):
    self.built, self.plan, self.calls = built, plan, []

  def path(self, g, index):
    return self.built / FOLDER / self.plan.window(g)[index]

  def enter(self, g):
    self.calls.append(g)
    return [self.path(g, i) for i in range(len(self.plan.window(g)))]

  def hold(self, g):
    self.calls.append(("hold", g))
    return [self.path(g, i) for i in range(len(self.plan.window(g)))]

  def visit(self, g, index, use):
    self.calls.append(("visit", g))
    return use(self.path(g, index))

  def finish(self):
    pass


def position_reader(built, held=2, **plan_args):
  source = sources.open_source(SPEC, built)
  plan = streaming.plan_for(source, "train", shuffle=True, seed=0, window_shards=1,
                            **plan_args)
  logged = LoggedReader(built, plan)
  return streaming.PositionReader(source, plan, logged, held=held), plan, logged.calls


def local_records(built, plan):
  """The record of each row of `plan.positions(0)`, read from the local shard files."""
  file_format = sources.open_source(SPEC, built).file_format
  return [streaming._read_once(  # pylint: disable=protected-access
      built / FOLDER / plan.shards[shard].name, file_format, [index])[0]
          for shard, index, _ in plan.positions(0).tolist()]


def by_position(reader, plan):
  """The record at a position of epoch 0, read as Grain reads it."""
  rows = plan.positions(0)
  return lambda position: reader.read(rows[position:position + 1], at=position)[0]


def test_a_pass_whose_first_reads_come_out_of_order_holds_the_window_before(built):
  # Parallel reads at a pass's start: the first to arrive may be of window 1; window 0
  # is then held with it, not read record by record through visits. (Read here from one
  # thread, which no other read can overtake: none waits for window 0's other reads.)
  reader, plan, calls = position_reader(built)
  read = by_position(reader, plan)
  for position in (12, 3, 4, 13, 5, 6, 25):  # windows 1, 0, 0, 1, 0, 0, 2
    read(position)
  assert calls == [1, ("hold", 0), 2]


def test_a_window_is_let_go_only_once_the_reads_this_process_makes_in_it_have_come(
    built, monkeypatch):
  # One of Grain's worker processes reads every 2nd position: its read of window 0
  # still to come (a thread starved of the GIL) holds window 0 while a read of window
  # 2 waits to enter it; arriving, it reads the open file, not a visit downloading the
  # shard again.
  monkeypatch.setattr(streaming, "ARRIVAL_SECONDS", 60)
  reader, plan, calls = position_reader(built)
  read = by_position(reader, plan)
  for position in [0, 2, 4, 6] + list(range(10, 20, 2)):  # 8 of window 0 still to come
    read(position)
  entering = threading.Thread(target=read, args=(20,))
  entering.start()
  entering.join(0.5)
  assert entering.is_alive()  # waiting for the read of 8
  read(8)
  entering.join(10)
  assert not entering.is_alive() and calls == [0, 1, 2]


def test_a_read_of_a_rewound_iterator_still_under_way_does_not_move_the_new_pass(
    built, monkeypatch):
  # Grain's set_state on a live iterator cancels its queued reads, not those under way: one
  # of window 11 arrives after the rewound pass began at window 6. It waits for the pass
  # to get there; it does not jump the pass to window 11 (whose windows in between would
  # then be read record by record, each shard downloaded again).
  monkeypatch.setattr(streaming, "ARRIVAL_SECONDS", 60)
  reader, plan, calls = position_reader(built)
  read = by_position(reader, plan)
  for position in range(105):  # windows 0..10
    read(position)
  calls.clear()
  read(60)  # the rewound iterator's first read: a new pass
  stale = concurrent.futures.ThreadPoolExecutor(1).submit(read, 112)
  time.sleep(0.3)
  for position in range(61, 90):  # windows 6..8 read whole, 9 and 10 still to come
    read(position)
  time.sleep(0.3)
  assert not stale.done() and calls == [6, 7, 8]
  for position in range(90, 112):
    read(position)
  assert stale.result(timeout=10) == read(112)
  assert calls == list(range(6, 12))


def test_reads_from_one_thread_in_any_order_never_wait(built, monkeypatch):
  # Nothing can arrive while the only reading thread waits: a notebook's source[i] in any
  # order reads at once (a wait would be ARRIVAL_SECONDS each).
  class NoWaiting(threading.Condition):
    def wait(self, timeout=None):
      raise AssertionError(f"a read waited ({timeout} s)")

  reader, plan, calls = position_reader(built)
  reader._idle = NoWaiting(reader._lock)  # pylint: disable=protected-access
  read, expected = by_position(reader, plan), local_records(built, plan)
  for position in (5, 150, 70, 12, 159, 0, 40):
    assert read(position) == expected[position]
  assert ("hold", 0) not in calls


def test_a_reading_thread_ahead_of_the_others_from_the_start_waits_for_them(
    built, monkeypatch):
  # Under load one of Grain's threads can read windows 0-2 before a second one runs at all:
  # a read from a thread other than the main one may have company, from the first read on.
  monkeypatch.setattr(streaming, "ARRIVAL_SECONDS", 60)
  reader, plan, calls = position_reader(built)
  read = by_position(reader, plan)
  ahead = concurrent.futures.ThreadPoolExecutor(1).submit(
      lambda: [read(p) for p in [*range(9), *range(10, 21)]])  # all but 9, then window 2
  time.sleep(0.5)
  assert not ahead.done() and calls == [0, 1]  # window 0 kept for position 9
  held_back = concurrent.futures.ThreadPoolExecutor(1).submit(read, 9)
  assert held_back.result(timeout=10) and len(ahead.result(timeout=10)) == 20
  assert calls == [0, 1, 2]


def test_reads_under_way_are_waited_for_apart_from_reads_still_to_come(built, monkeypatch):
  # A read waiting 1.5 s for a slow read of window 0 under way, then for window 0's last
  # read still to come, and one of window 4 waiting meanwhile for the pass to get nearer:
  # the bound for arrivals starts when the slow read ends. (It ran from the start of the
  # whole wait: the reads gave up on arrivals at once, window 0 was let go, and the reader
  # never waited for arrivals again.)
  monkeypatch.setattr(streaming, "ARRIVAL_SECONDS", 1.0)
  reader, plan, calls = position_reader(built)
  read = by_position(reader, plan)
  for position in [*range(9), *range(10, 20)]:  # 9 of window 0 still to come
    read(position)
  with reader._lock:  # pylint: disable=protected-access
    reader._reading[0] += 1  # a slow read of window 0 under way  pylint: disable=protected-access
  pool = concurrent.futures.ThreadPoolExecutor(2)
  entering, ahead = pool.submit(read, 20), pool.submit(read, 41)
  time.sleep(1.5)
  assert not reader._unordered and calls == [0, 1]  # pylint: disable=protected-access
  reader._done(0)  # pylint: disable=protected-access
  time.sleep(0.3)
  read(9)
  assert entering.result(timeout=10)
  for position in range(21, 41):
    read(position)
  assert ahead.result(timeout=10)
  assert calls == [0, 1, 2, 3, 4] and not reader._unordered  # pylint: disable=protected-access


def test_reads_waiting_ahead_of_a_pass_that_does_not_move_do_not_hold_each_other_up(
    built, monkeypatch):
  # Two reads far ahead (a live iterator set forward, say) each wait for the pass to get
  # nearer; neither is a read holding the pass up, so each gives up after ARRIVAL_SECONDS
  # (each counted the other as one and waited STRAGGLER_SECONDS).
  monkeypatch.setattr(streaming, "ARRIVAL_SECONDS", 0.2)
  monkeypatch.setattr(streaming, "STRAGGLER_SECONDS", 30)
  reader, plan, calls = position_reader(built)
  read = by_position(reader, plan)
  pool = concurrent.futures.ThreadPoolExecutor(2)
  for position in range(20):
    pool.submit(read, position).result()
  start = time.monotonic()
  ahead = [pool.submit(read, position) for position in (61, 62)]
  assert all(future.result(timeout=60) for future in ahead)
  assert time.monotonic() - start < 10 and calls == [0, 1, 6]


def test_a_window_retired_while_a_read_of_it_waited_is_closed_when_that_read_ends(
    built, monkeypatch):
  # A read of window 2 waits (window 0's reads to come); meanwhile other threads enter
  # window 2 and go on past it, retiring it: the waiting read is its last under way, so
  # its end closes the files (an evicted shard kept open stays on the disk).
  reader, plan, calls = position_reader(built)
  read = by_position(reader, plan)
  for position in range(20):
    read(position)
  paths = [built / FOLDER / name for name in plan.window(2)]

  def others_enter_and_retire(g):  # what other threads do while the read waits
    reader._open[g] = reader._opened(g, paths)  # pylint: disable=protected-access
    reader._last = g + 2  # pylint: disable=protected-access
    reader._retire(g)  # pylint: disable=protected-access
  monkeypatch.setattr(reader, "_wait_behind", others_enter_and_retire)
  assert concurrent.futures.ThreadPoolExecutor(1).submit(read, 20).result(timeout=10)
  assert reader._retired == {} and reader._reading == {}  # pylint: disable=protected-access
  assert ("visit", 2) in calls


def test_the_positions_a_process_reads_are_counted_from_the_stride_between_them():
  reads = streaming._Reads()  # pylint: disable=protected-access
  for position in (13, 7, 10, 19):  # every 3rd from 7, in any order
    reads.add(position)
  assert [reads.count(0, 20), reads.count(0, 7), reads.count(7, 8), reads.count(20, 30)] == [
      5, 0, 1, 3]


def test_position_reads_asked_again_start_a_pass_and_a_failed_entry_fails_its_burst(
    built, tmp_path, monkeypatch):
  # A Grain loader iterated again (eval every epoch) reads window after window again, not
  # record by record through visits; once entering a window failed, the reads queued
  # behind it raise that error at once (each would wait out the same bounds again), and
  # reads after that, or of a new pass, try again.
  calls, failing = [], {3, 20}

  class Logged:
    def enter(self, g):
      calls.append(g)
      if g in failing:
        failing.discard(g)
        raise RuntimeError(f"no room for window {g}")
      return [built / FOLDER / name for name in plan.window(g)]

    def visit(self, g, index, use):
      calls.append(("visit", g))
      return use(built / FOLDER / plan.window(g)[index])

    def finish(self):
      pass

  source = sources.open_source(SPEC, built)
  plan = streaming.plan_for(source, "train", shuffle=True, seed=0, window_shards=2)
  reader = streaming.PositionReader(source, plan, Logged(), held=2)

  def read_windows(windows):
    for g in windows:
      for row in plan.window_positions(g):
        reader.read(row[None])

  read_windows([0, 1, 2])
  read_windows([0, 1, 2])  # the same records again
  assert calls == [0, 1, 2, 0, 1, 2]
  calls.clear()
  for g, i in ((3, 0), (3, 1), (4, 0)):  # the failed window's other records, a later one
    with pytest.raises(RuntimeError, match="no room for window 3"):
      reader.read(plan.window_positions(g)[i:i + 1])
  assert calls == [3]  # tried once
  monkeypatch.setattr(streaming, "FAILED_PASS_SECONDS", 0)
  read_windows([3, 4])  # later reads try again
  assert calls == [3, 3, 4]
  # A pass that failed far in (window 20, 18 windows after the 2nd), read again at once
  # from the start: a new pass, not the old error.
  monkeypatch.setattr(streaming, "FAILED_PASS_SECONDS", 60)
  read_windows(range(5, 20))
  with pytest.raises(RuntimeError, match="no room for window 20"):
    read_windows([20])
  calls.clear()
  read_windows([0])
  assert calls == [0]


def test_a_failed_pass_does_not_poison_the_next_one(built, tmp_path):
  # A shard missing during a republish fails the pass; once it is back, iterating the
  # same dataset again (keras re-iterates validation data) reads everything.
  url = published_to(built, "file", tmp_path)
  shard = sorted((pathlib.Path(url[len("file://"):]) / FOLDER).glob("*-train.*-of-*"))[5]
  moved = shard.with_name("away")
  shard.rename(moved)
  ds = imagesets.load(SPEC, "train", url, cache_dir=tmp_path / "c", shuffle=True, seed=0)
  with pytest.raises(tf.errors.OpError, match="missing from the bucket"):
    sum(1 for _ in ds)
  moved.rename(shard)
  assert sum(1 for _ in ds) == 160


HOLD_LOCK = """
import fcntl, sys, time
handle = open(sys.argv[1], "a")
fcntl.flock(handle, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""


def test_a_wait_for_another_processs_download_ends_when_closed_or_after_a_bound(
    built, tmp_path, monkeypatch):
  """The lock of another process's download is waited for in bounded steps: a reader
  closed meanwhile, or past DOWNLOAD_WAIT_SECONDS, stops waiting (a tf.data numpy
  function that never returns hangs its iterator's destructor)."""
  url = published_to(built, "file", tmp_path)
  source = sources.open_source(SPEC, url, cache_dir=tmp_path / "c")
  names = sorted(source.shards)
  holders = [subprocess.Popen(
      [sys.executable, "-c", HOLD_LOCK,
       str(source.cache.folder / ".locks-2" / source.shards[name].sha256)],
      stdout=subprocess.PIPE, text=True) for name in names[:2]]
  try:
    for holder in holders:
      assert holder.stdout.readline().strip() == "held"
    assert_closing_ends_the_wait(source, names)
    monkeypatch.setattr(shard_cache_lib, "DOWNLOAD_WAIT_SECONDS", 1)
    start = time.monotonic()
    with pytest.raises(shard_cache_lib.ReaderClosedError, match="gave up waiting for another"):
      source.cache.pin(source.shards[names[1]])
    assert time.monotonic() - start < 10
  finally:
    for holder in holders:
      holder.kill()
      holder.wait()


@pytest.mark.parametrize("built", ["array_record"], indirect=True)  # Grain's usual format
def test_grain_pipelines_stream_a_bucket_and_resume(built, tmp_path, bucket_reads):
  from imagesets.reading import grain_pipeline
  url = published_to(built, "file", tmp_path)
  kwargs = dict(data_dir=url, batch_size=8, image_size=32, cache_dir=tmp_path / "c")
  labels = [int(l) for b in grain_pipeline.classification_eval(SPEC, split="test", **kwargs)
            for l in b["label"]]
  assert labels == [label for _, label in local_examples(built, "test")]
  opened = bucket_reads(url)
  train = grain_pipeline.classification_train(SPEC, seed=4, num_epochs=2, worker_count=1,
                                              **kwargs)
  iterator = iter(train)
  for _ in range(7):
    next(iterator)
  # The main process reads nothing (its worker does): it downloaded nothing either.
  assert sum(opened.values()) == 0
  state = iterator.get_state()
  rest = [b["image"].tobytes() for b in iterator]
  assert len(rest) == 2 * 160 // 8 - 7
  resumed = iter(grain_pipeline.classification_train(SPEC, seed=4, num_epochs=2,
                                                     worker_count=1, **kwargs))
  resumed.set_state(state)
  assert [b["image"].tobytes() for b in resumed] == rest


# The same count in processes started from here on (Grain's workers): each appends the
# names it opens to the file named by $BUCKET_LOG.
PROCESS_AUDIT = """
import os, sys
_root, _log = os.environ.get("BUCKET_ROOT"), os.environ.get("BUCKET_LOG")
def _hook(event, args):
  if event == "open" and isinstance(args[0], str) and isinstance(args[1], str):
    name = args[0].rsplit("/", 1)[-1]
    if args[0].startswith(_root) and "-of-" in name and "r" in args[1] and "+" not in args[1]:
      with open(_log, "a") as log:
        log.write(f"{os.getpid()}:{name}\\n")
if _root and _log:
  sys.addaudithook(_hook)
"""


@pytest.fixture
def process_bucket_reads(tmp_path, monkeypatch):
  """Counts shard downloads from the file:// bucket `url` given to `watch(url)` in the
  processes this one starts, by (pid, shard) (read the Counter after they end)."""
  hooks, log = tmp_path / "audit", tmp_path / "downloads.log"
  hooks.mkdir()
  (hooks / "sitecustomize.py").write_text(PROCESS_AUDIT)
  monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
      [str(hooks), *filter(None, [os.environ.get("PYTHONPATH")])]))
  monkeypatch.setenv("BUCKET_LOG", str(log))

  def watch(url):
    monkeypatch.setenv("BUCKET_ROOT", url[len("file://"):])
    return lambda: collections.Counter(tuple(line.split(":", 1)) for line in (
        log.read_text().split() if log.exists() else []))
  return watch


@pytest.mark.parametrize("built", ["array_record"], indirect=True)
def test_grain_worker_processes_share_a_limit_each_downloading_a_shard_once_an_epoch(
    built, tmp_path, process_bucket_reads):
  # Grain's workers each read every 2nd position of the same windows, and each pins its
  # own: with windows sized for one reader they outgrew half the version and waited for
  # each other's room (Grain takes their batches in turn) until the 120 s bound. Each is a
  # reader of its own: a shard at most once an epoch by each.
  from imagesets.reading import grain_pipeline
  url = published_to(built, "file", tmp_path)
  downloads = process_bucket_reads(url)
  kwargs = dict(data_dir=url, batch_size=8, image_size=32, cache_dir=tmp_path / "c",
                cache_limit=sum(train_bytes(built)) // 2)
  start = time.monotonic()
  labels = [int(label) for batch in grain_pipeline.classification_train(
      SPEC, seed=0, num_epochs=2, worker_count=2, **kwargs) for label in batch["label"]]
  assert len(labels) == 2 * 160 and time.monotonic() - start < 60
  opened = downloads()  # (counted in the workers)
  assert len({shard for _, shard in opened}) == NUM_SHARDS, opened
  assert len({pid for pid, _ in opened}) == 2 and max(opened.values()) <= 2, opened
  with pytest.raises(ValueError, match=r"smaller than what 4 readers \(Grain's worker processes\)"
                     ) as error:
    grain_pipeline.classification_train(SPEC, seed=0, worker_count=4, **kwargs)
  assert "\n" not in str(error.value)


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
  expected = [tf.train.Example.FromString(r) for r in sources.open_source(
      SPEC, built).records("test").as_numpy_iterator()]
  source = sources.open_source(SPEC, url, cache_dir=tmp_path / "c", cache_limit="1GB")
  assert source.streamed and not sources.open_source(SPEC, built).streamed
  got = [tf.train.Example.FromString(r) for r in source.records("test").as_numpy_iterator()]
  assert got == expected and len(got) == 40
  labels = [e.features.feature["label"].int64_list.value[0] for e in got]
  assert labels == [label for _, label in local_examples(built, "test")]
