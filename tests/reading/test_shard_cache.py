"""shard_cache: a bucket's shards by SHA-256 in a bounded cache shared by processes."""

import collections
import gc
import hashlib
import json
import os
import pathlib
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
from bucket_reads import AUDIT
from conftest import warm
from hang_guard import returns_within
from imagesets_testing.fault_proxy import FaultProxy
import imagesets
from imagesets.storage import bucket as bucket_lib
from imagesets.storage import fetch as fetch_lib
from imagesets.storage import versions
from imagesets.publishing import publish
from imagesets.reading import input_pipeline
from imagesets.reading import order as order_lib
from imagesets.reading import shard_cache as shard_cache_lib
from imagesets.reading import shard_reads
from imagesets.reading import sources
from imagesets.reading import streaming
from streamed_versions import (FOLDER, NUM_SHARDS, ONE_FORMAT, SPEC, digest, local_examples,
                               our_line, published_to, streamed_examples, train_bytes,
                               wait_for_downloads)


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
  wait_for_downloads(cache)
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


WORKER = """
import atexit, json, re, sys
import imagesets
%(audit)s
url, cache, limit = sys.argv[1], sys.argv[2], sys.argv[3]
BucketReads.root = url[len("file://"):]
evicted = collections.Counter()  # shard files this process removed from the cache, by SHA-256
def removals(event, args):
  if event == "os.remove":   # (shards are named by SHA-256; part and layout files are not)
    folder, _, name = str(args[0]).rpartition("/")
    if folder == cache + "/shards" and re.fullmatch("[0-9a-f]{64}", name):
      evicted[name] += 1
sys.addaudithook(removals)
count = sum(1 for _ in imagesets.load("%(spec)s", "train", url, cache_dir=cache, shuffle=True,
                                      seed=int(sys.argv[4]), num_epochs=2,
                                      cache_limit=None if limit == "none" else int(limit)))
# Counted at exit, after the cache's threads: a download ahead started before the last
# record was read may still evict and download after it (the other process's count of a
# shard's downloads is then justified by an eviction made here).
atexit.register(lambda: print(json.dumps(
    {"count": count, "opened": dict(BucketReads.opened), "evicted": evicted})))
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
  workers = [subprocess.Popen([warm("python"), "-c", script, url, str(tmp_path / "c"),
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
  opened, evicted = collections.Counter(), collections.Counter()
  for out in outs:
    opened.update(out["opened"])
    evicted.update(out["evicted"])
  if limited:
    assert peak <= limit, (peak, limit)
    # A shard is downloaded again only after one of the two evicted it: one download a
    # shard however the two interleave. (Not "once per epoch each": each process sizes its
    # windows for the whole limit, so one may evict the other's read-ahead, as designed.)
    sha_of = {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
              for path in (built / FOLDER).glob("*-train.*-of-*")}
    again = {name: (count, evicted[sha_of[name]]) for name, count in opened.items()
             if count > 1 + evicted[sha_of[name]]}
    assert not again, again  # name: (downloads, evictions)
    assert 0 < sum(evicted.values())  # the limit was felt
  else:  # every shard downloaded once, by one of the two
    assert sorted(opened.values()) == [1] * NUM_SHARDS
  # The per-shard download locks the two contended for are removed, not piled up.
  assert list((tmp_path / "c").rglob(".locks-2/*")) == []


class Reader:
  """What a reader holds and reads next (`ShardCache.register`): shards by number."""

  def __init__(self, shards, *numbers):
    self.shards, self.numbers = shards, numbers

  def wanted(self):
    return {self.shards[i].sha256 for i in self.numbers}


@pytest.fixture
def two_processes(tmp_path, monkeypatch):
  """Seven shards of 1,000 bytes in a file bucket, and two caches of one folder under a
  limit of three of them: two instances stand for two processes (each its own locks)."""
  monkeypatch.setattr(shard_cache_lib, "ROOM_WAIT_SECONDS", 5.0)  # (a failure, quickly)
  (tmp_path / "bucket").mkdir()
  bucket = bucket_lib.Bucket(f"file://{tmp_path}/bucket")
  shards = {}
  for i in range(7):
    data = bytes([i]) * 1000
    (tmp_path / "bucket" / f"s{i}").write_bytes(data)
    shards[i] = shard_cache_lib.Shard(hashlib.sha256(data).hexdigest(), 1000, bucket, f"s{i}")
  caches = [shard_cache_lib.ShardCache(tmp_path / "cache", 3 * 1000) for _ in range(2)]
  yield shards, *caches
  for cache in caches:
    cache.close()


def test_a_download_ahead_is_evicted_after_the_shards_read_already_never_waited_for(
    two_processes):
  # A pins its window (s0) and downloads its next (s1) ahead; B then reads s4 and needs
  # room: every process evicts what was read already (s4) before another's read-ahead,
  # however recently it was read; and when only that read-ahead is left, B evicts it at
  # once (a stalled job never keeps another waiting for room).
  shards, a, b = two_processes
  readers = [a.register(Reader(shards, 0, 1)), b.register(Reader(shards, 4, 5, 6))]
  a.pin(shards[0])
  a.prefetch([shards[1]])
  wait_for_downloads(a)
  b.pin(shards[4])
  b.unpin(shards[4])   # read already
  readers[1].numbers = (5, 6)
  b.pin(shards[5])     # room: s4 goes, not A's next window
  assert a.path(shards[1]).exists() and not b.path(shards[4]).exists()
  b.pin(shards[6])     # room again: only A's read-ahead is not pinned
  assert not a.path(shards[1]).exists() and b.stats["evicted"] == 2


def mtime(cache, shard) -> float:
  return cache.path(shard).stat().st_mtime


class Clock:
  """`time` for shard_cache, `offset` seconds on: the hours a test says pass, passed."""

  def __init__(self):
    self.offset = 0.0

  def __getattr__(self, name):
    return getattr(time, name)

  def time(self) -> float:
    return time.time() + self.offset


def test_a_download_ahead_shows_in_the_folder_already_dated_ahead(two_processes, monkeypatch):
  # B reads s4 while A downloads s1 ahead (two hours long), and needs room the moment
  # s1's download ends: s4 goes, not s1. No process sees a download ahead as older than
  # what was read while it downloaded, whatever runs between its rename and the next step
  # of A's thread, and however long it took.
  shards, a, b = two_processes
  readers = [a.register(Reader(shards, 0, 1)), b.register(Reader(shards, 5))]
  real, clock = shard_cache_lib.transfer.checked_download, Clock()
  monkeypatch.setattr(shard_cache_lib, "time", clock)

  def then_b_reads(bucket, rel, target, entry, **kwargs):
    if rel == "s1":
      clock.offset += 2 * 3600
      b.pin(shards[4])   # read during the download...
      b.unpin(shards[4])
      later = clock.time() + 60   # (...that is: after s1's bytes were written)
      os.utime(b.path(shards[4]), (later, later))
    real(bucket, rel, target, entry, **kwargs)
    if rel == "s1":
      b.pin(shards[5])  # room for s5, at once
  monkeypatch.setattr(shard_cache_lib.transfer, "checked_download", then_b_reads)
  a.pin(shards[0])
  a.prefetch([shards[1]])
  wait_for_downloads(a)
  assert a.path(shards[1]).exists() and not b.path(shards[4]).exists()
  assert mtime(a, shards[1]) > clock.time() + shard_cache_lib.READ_NEXT_SECONDS - 60
  assert a.stats["downloads"] + b.stats["downloads"] == 4 and b.stats["evicted"] == 1
  del readers


def test_a_shard_read_next_that_is_here_already_is_evicted_after_the_shards_read(
    two_processes):
  # s1, read an hour ago, is A's next window again (a second epoch); s4 was read since.
  # B needs room: s4 goes, not s1, which would be downloaded again.
  shards, a, b = two_processes
  readers = [a.register(Reader(shards, 0, 1)), b.register(Reader(shards, 5))]
  for number, age in ((1, 3600), (4, 60)):
    b.pin(shards[number])
    b.unpin(shards[number])
    then = time.time() - age
    os.utime(b.path(shards[number]), (then, then))
  a.pin(shards[0])
  a.prefetch([shards[1]])   # (here already: nothing to download)
  b.pin(shards[5])
  assert a.path(shards[1]).exists() and not b.path(shards[4]).exists()
  assert a.stats["downloads"] == 1 and b.stats["evicted"] == 1
  del readers


def test_a_shard_downloaded_by_another_process_while_ahead_is_dated_ahead(
    two_processes, monkeypatch):
  # A's download ahead of s1 waits for s1's lock while B downloads and reads s1: A finds
  # it here, and dates it ahead all the same.
  shards, a, b = two_processes
  real, first = shard_cache_lib.file_locks.exclusive, []

  def b_first(path, **kwargs):
    if not first:   # (A's, in its download thread; B's own pass through)
      first.append(path)
      b.pin(shards[1])
      b.unpin(shards[1])
    return real(path, **kwargs)
  monkeypatch.setattr(shard_cache_lib.file_locks, "exclusive", b_first)
  a.prefetch([shards[1]])
  wait_for_downloads(a)
  assert first[0].name == shards[1].sha256 and b.stats["downloads"] == 1
  assert a.stats["downloads"] == 0 and mtime(a, shards[1]) > time.time() + 3000


def test_a_shard_a_process_reads_now_keeps_its_read_time(two_processes):
  # A's read-ahead names the window A reads now (s0) and the next (s1): s0 is not dated
  # ahead (once read it would stay an hour ahead of the shards read after it).
  shards, a, _ = two_processes
  a.pin(shards[0])
  a.prefetch([shards[0], shards[1]])
  wait_for_downloads(a)
  a.unpin(shards[0])
  assert mtime(a, shards[0]) <= time.time() < mtime(a, shards[1])


def test_a_file_system_that_refuses_times_still_reads(two_processes, monkeypatch):
  # (Some FUSE mounts refuse utime: only the eviction order suffers.)
  shards, a, _ = two_processes
  real = os.utime

  def refused(path, *args, **kwargs):
    if isinstance(path, int) or str(path).startswith(str(a.folder)):
      raise PermissionError(1, "Operation not permitted", str(path))
    return real(path, *args, **kwargs)
  monkeypatch.setattr(shard_cache_lib.os, "utime", refused)
  a.prefetch([shards[1], shards[2]])
  wait_for_downloads(a)
  a.prefetch([shards[1]])   # (here already)
  assert a.pin(shards[1]).read_bytes() == bytes([1]) * 1000 and a.pin(shards[0]).exists()
  assert a.stats["downloads"] == 3


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
  processes = [subprocess.Popen([warm("python"), "-c", COLD % {"spec": SPEC}, url,
                                 str(tmp_path / "c"), str(ready), "3", "20"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(3)]
  for process in processes:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]
    assert out.split()[-1] == "40"


KILLED = """
import os, signal, sys, threading
import imagesets
url, cache = sys.argv[1], sys.argv[2]
root, started = url[len("file://"):], []
def killed_mid_download(event, args):  # 4 downloads under way at once, then the process dies
  if (event == "open" and isinstance(args[0], str) and args[0].startswith(root)
      and "-of-" in args[0].rsplit("/", 1)[-1]):
    started.append(args[0])
    if len(started) == 4:
      os.kill(os.getpid(), signal.SIGKILL)
    threading.Event().wait()  # this download stays under way until the 4th starts
sys.addaudithook(killed_mid_download)
sum(1 for _ in imagesets.load("%(spec)s", "train", url, cache_dir=cache, shuffle=True, seed=0))
"""


@ONE_FORMAT
@pytest.mark.parametrize("limited", [True, False])
def test_a_reader_killed_mid_download_leaves_a_cache_that_works(built, tmp_path, limited):
  url = published_to(built, "file", tmp_path)
  killed = subprocess.run([warm("python"), "-c", KILLED % {"spec": SPEC}, url,
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
  assert len(cache._readers) == 0   # the dropped reader left ...
  cache.drain_releases()            # ... its pins let go at the cache's next call
  assert cache._pins == {}
  train = iter(input_pipeline.classification_train(SPEC, seed=0, num_epochs=2,
                                                   shuffle_buffer=8, **kwargs))
  evaluation = input_pipeline.classification_eval(SPEC, split="test", **kwargs)
  start, seen = time.monotonic(), 0
  for _ in range(2):  # keras fit(validation_data=...): an epoch, then the evaluation
    seen += sum(next(train)["label"].shape[0] for _ in range(160 // 8))
    assert sum(b["label"].shape[0] for b in evaluation) == 40
  assert seen == 320 and time.monotonic() - start < 60


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
  # The server gone for more connections than the clients' own retries make: no download
  # succeeds while it lasts, so at most 5 are under way (4 downloads, 1 reader), and 30
  # refusals exceed 5 downloads' client attempts (at most 6 each) before the cache's own
  # retry (transfer.Deadline) must bridge it. The outage starts and ends on connections
  # counted, whenever the pipeline starts.
  source = sources.open_source(SPEC, url, cache_dir=tmp_path / "c2")  # (the listing first)
  proxy.refuse_next(30)
  features = source.builder.info.features
  second = [digest(e) for e in tfds.as_numpy(streaming.records(source, "train").map(
      lambda r: features.deserialize_example(r, decoders={"image": tfds.decode.SkipDecoding()})))]
  # Requests met the outage (refused connections) and were retried until it ended: the
  # same examples, in the same order.
  assert second == first and proxy.refused >= 1
  assert first == local_examples(built, "train")
  cache = shard_cache_lib.shared(fetch_lib.cache_root(tmp_path / "c2"))
  assert cache.stats["retries"] >= 1, (proxy.refused, cache.stats)  # the cache's own retry ran


@ONE_FORMAT
def test_an_unreachable_bucket_ends_in_one_clear_message(built, tmp_path, s3_proxy,
                                                         monkeypatch):
  url = published_to(built, "s3", tmp_path)
  proxy = s3_proxy
  source = sources.open_source(SPEC, url, cache_dir=tmp_path / "c")
  monkeypatch.setattr(source.cache, "retry_seconds", 3)
  proxy.refuse_next(10**9)   # (gone for good: every connection refused)
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


def _run_of(names, window):
  """A run reading `names` in stored order, `window` shards at a time."""
  order = order_lib.Order([order_lib.ShardSlice(name, 0, 1) for name in names])
  return order_lib.Run(order, 1, window, num_epochs=1)


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
  pins = shard_reads.WindowPins(source.store(), _run_of(names, 2), 0)
  pins.enter(0, 0)
  wait_for_downloads(source.cache)
  pins.close()
  assert sorted(opened) == names[:4 if limited else 6]
  assert set(opened.values()) == {1}


def assert_closing_ends_the_wait(source, names) -> None:
  """A reader waiting for the download of names[0] ends, in one line, when closed (before
  or while it waits: either way, at once)."""
  pins = shard_reads.WindowPins(source.store(), _run_of(names[:1], 1), 0)
  errors = []

  def enter():
    try:
      pins.enter(0, 0)
    except Exception as error:  # noqa: BLE001
      errors.append(str(error))
  waiting = threading.Thread(target=enter, daemon=True)
  waiting.start()
  pins.close()
  waiting.join(5)
  assert not waiting.is_alive() and "closed" in errors[0] and "\n" not in errors[0]


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


def test_a_trainer_moving_to_a_version_built_on_its_last_downloads_only_the_new_shards(
    bucket_servers, tmp_path, monkeypatch):
  """pets:1.1.0 built on 1.0.0 (photos added, one removed) and both published to the S3
  server: a trainer that read 1.0.0 downloads, for 1.1.0, exactly the shards 1.0.0 did not
  have (counted at the download), and reads 1.1.0 as stock TFDS reads the local build."""
  from imagesets.class_folders import named_build
  from imagesets_testing import photo_crops

  root, data_dir = tmp_path / "tree", tmp_path / "data"

  def add(count, seed, prefix):
    for i, (picture, data) in enumerate(photo_crops.jpegs(count, seed=seed, size=(200, 150))):
      (root / picture.scene).mkdir(parents=True, exist_ok=True)
      (root / picture.scene / f"{prefix}_{i:03d}.jpg").write_bytes(data)

  def build(version):
    return named_build.build(root, "pets", version=version, data_dir=str(data_dir),
                             versioned=True, from_version=named_build.LATEST)

  add(150, seed=21, prefix="img")
  build("1.0.0")
  add(3, seed=22, prefix="new")
  sorted(root.rglob("img_*.jpg"))[0].unlink()
  build("1.1.0")
  url = f"s3://{servers.BUCKET}/{uuid.uuid4().hex[:12]}/tfds"
  for version in ("1.0.0", "1.1.0"):
    publish.publish(f"pets:{version}", data_dir, url, progress=False)
  downloads = []
  checked = shard_cache_lib.transfer.checked_download
  monkeypatch.setattr(shard_cache_lib.transfer, "checked_download",
                      lambda bucket, rel, target, entry, **kwargs: (
                          "tfrecord-" in rel and downloads.append(entry["sha256"]),
                          checked(bucket, rel, target, entry, **kwargs))[1])
  shas = lambda version: {hashlib.sha256(p.read_bytes()).hexdigest() for p in
                          (data_dir / "pets" / version).glob("*.tfrecord-*")}

  def read(version):
    spec = f"pets:{version}"
    local = tfds.builder_from_directory(str(data_dir / "pets" / version))
    for split in local.info.splits:
      streamed = imagesets.load(spec, split, url, cache_dir=tmp_path / "cache",
                                decoders={"image": tfds.decode.SkipDecoding()})
      stock = local.as_dataset(split, decoders={"image": tfds.decode.SkipDecoding()})
      assert (sorted(digest(e) for e in tfds.as_numpy(streamed))
              == sorted(digest(e) for e in tfds.as_numpy(stock)))

  read("1.0.0")
  assert sorted(downloads) == sorted(shas("1.0.0"))
  downloads.clear()
  read("1.1.0")
  new = shas("1.1.0") - shas("1.0.0")
  assert 0 < len(new) <= 4  # a new shard per split at most, and the one that lost a photo
  assert sorted(downloads) == sorted(new)


@pytest.mark.parametrize("plant", ["fifo", "link"])
def test_what_is_no_regular_file_at_a_shards_name_is_refused_unread(tmp_path, plant):
  """A FIFO at a shard's name in the cache was opened and waited on for ever; a link was
  followed, and the bytes it led to (of the shard's size: never checked against its
  SHA-256) read as the shard. Refused in one line; the eviction passes it by."""
  data = b"shard bytes" * 10
  (tmp_path / "bucket").mkdir()
  (tmp_path / "bucket" / "s").write_bytes(data)
  victim = tmp_path / "victim"
  victim.write_bytes(b"x" * len(data))
  cache = shard_cache_lib.ShardCache(tmp_path / "cache", limit=10 * len(data))
  shard = shard_cache_lib.Shard(hashlib.sha256(data).hexdigest(), len(data),
                                bucket_lib.Bucket(str(tmp_path / "bucket")), "s")
  planted = cache.path(shard)
  if plant == "fifo":
    os.mkfifo(planted)
  else:
    planted.symlink_to(victim)
  try:
    with pytest.raises(versions.PublishError, match=f"^{planted} is not a regular "
                       "file .*: refused, neither followed nor read; remove it"):
      returns_within(30, cache.pin, shard, what="pin opening a planted shard")
    assert returns_within(60, cache._evict, shard.sha256) == 0  # pylint: disable=protected-access
  finally:
    cache.close()
  assert os.path.lexists(planted) and victim.read_bytes() == b"x" * len(data)
