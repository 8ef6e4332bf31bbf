"""Streaming a published version: shards downloaded ahead of the reader into a bounded cache.

A `ShardCache` serves the shards of one committed version (`versions`, `manifest`) to a
reader that says, in advance, the order it will read them in (a `plan`: a list of windows,
each a list of shard names read together). It

* downloads the version's small files (dataset_info.json, features.json, ...) at once, so a
  TFDS builder can be made from the local folder, and the shards only when needed;
* downloads the shards of the next windows in plan order on `downloads` threads, so the
  reader does not wait once warm;
* checks every shard against the manifest's size and SHA-256 before it is renamed into
  place (a damaged download is fetched once more, then a `PublishError`);
* keeps the cache folder at most `limit` bytes plus one shard: before a download it evicts
  shards no process is reading (least recently used first) and waits for room otherwise;
* shares one folder between the processes of a machine (one per GPU): a download lock per
  shard (one download, others wait for it), write-then-rename (no half-written file is ever
  seen), a shared lock on every shard a process still reads (never evicted under it);
* retries a network fault with backoff for `retry_seconds`, then fails with one message
  naming the URL and what was tried.

The cache lives beside `fetch`'s whole copies, in `<cache>/<scheme>/<bucket>/<prefix>/
<name>/<config>/.stream-<version>/`; when `fetch` already holds the whole version, its files
are served as they are and nothing is downloaded.
"""

import collections
import concurrent.futures
import contextlib
import fcntl
import functools
import itertools
import os
import pathlib
import re
import threading
import time

from absl import logging

from imagesets.publishing import bucket as bucket_lib
from imagesets.publishing import fetch as fetch_lib
from imagesets.publishing import file_locks
from imagesets.publishing import manifest as manifest_lib
from imagesets.publishing import versions

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SHARD = re.compile(r"-\d{5}-of-\d{5}$")
_PART = ".part-"           # <shard>.part-<pid>-<thread>: a download in progress
_LOCKS = ".locks"          # one lock file per shard (download and read locks)
_CACHE_LOCK = ".cache.lock"  # held while a process decides what to evict and reserves room
DEFAULT_DOWNLOADS = 4      # shards in flight per process
DEFAULT_RETRY_SECONDS = 60.0
_ROOM_WAIT_SECONDS = 120.0  # how long a download waits for other processes to free room


def parse_size(limit) -> int | None:
  """Bytes from an int or a string like "20GB", "512 MiB"; None stays None (no limit)."""
  if limit is None or isinstance(limit, int):
    if isinstance(limit, int) and limit <= 0:
      raise ValueError(f"cache_limit must be positive, not {limit}")
    return limit
  match = re.fullmatch(r"(\d+(?:\.\d*)?)([KMGT]I?B|B)?", str(limit).strip().upper().replace(" ", ""))
  if not match:
    raise ValueError(f"cache_limit {limit!r} is not a size: give bytes (int) or e.g. "
                     "'20GB', '512MiB'")
  return parse_size(int(float(match[1]) * _UNITS[match[2] or ""]))


def _format_size(num_bytes: int) -> str:
  for unit in ("B", "KiB", "MiB", "GiB"):
    if num_bytes < 1024 or unit == "GiB":
      return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
    num_bytes /= 1024
  return str(num_bytes)


class ShardCache:
  """The shards of one published version, fetched ahead of a reader into a bounded cache."""

  def __init__(self, url: str, spec: str, *, cache_dir=None, limit=None,
               downloads: int = DEFAULT_DOWNLOADS,
               retry_seconds: float = DEFAULT_RETRY_SECONDS):
    self.limit = parse_size(limit)
    self.downloads = max(1, downloads)
    self.retry_seconds = retry_seconds
    self._bucket = bucket_lib.Bucket(url)
    ref = versions.Ref.parse(spec)
    data_dir = fetch_lib.cached_data_dir(url, cache_dir)
    self.ref, self.manifest = self._open_manifest(ref, data_dir)
    whole = data_dir / self.ref.folder
    if fetch_lib.local_copy_ok(whole, deep=False):
      self.folder, self.complete = whole, True  # fetch's whole copy: read in place
    else:
      self.folder, self.complete = whole.parent / f".stream-{self.ref.version}", False
    self._lock = threading.Lock()
    self._changed = threading.Condition(self._lock)
    self._readers: dict[str, list] = {}    # shard -> [file holding a shared lock, reads]
    self._in_flight: set[str] = set()
    self._deferred: set[str] = set()       # prefetches that failed or found no room
    self._pool = concurrent.futures.ThreadPoolExecutor(self.downloads,
                                                       thread_name_prefix="imagesets-shard")
    self._plans: list[ReadPlan] = []       # one per reader of this version in the process
    self._closed = False
    self.stats = collections.Counter()     # shards, bytes, retries, damaged, evicted
    if not self.complete:
      self._fetch_small_files()

  # ------------------------------------------------------------ set-up

  def _open_manifest(self, ref: versions.Ref, data_dir: pathlib.Path):
    """The version's manifest: from the local cache when the version is pinned and was
    streamed or fetched before (no network), else from the committed version in the bucket."""
    if ref.config is not None and ref.version is not None:
      for folder in (data_dir / ref.folder,
                     data_dir / ref.name / ref.config / f".stream-{ref.version}"):
        if (folder / versions.MANIFEST).is_file() and (folder / versions.MARKER).is_file():
          return ref, manifest_lib.Manifest.from_bytes(
              (folder / versions.MANIFEST).read_bytes(), str(folder))
    self._retrying("look up", lambda: self._bucket.check())
    ref = self._retrying("look up", lambda: versions.resolve_remote(ref, self._bucket))
    return ref, self._retrying("read the manifest of",
                               lambda: manifest_lib.published(self._bucket, ref))

  @functools.cached_property
  def _shards(self) -> frozenset[str]:
    return frozenset(name for name in self.manifest.files if _SHARD.search(name))

  def shard_names(self) -> frozenset[str]:
    """Files of the version that are not metadata: TFDS's shards (`...-00003-of-00016`)."""
    return self._shards

  @functools.cached_property
  def _largest_shard(self) -> int:
    return max(self.manifest.files[n]["size"] for n in self._shards)

  def _fetch_small_files(self) -> None:
    """Everything but the shards, so `tfds.builder_from_directory(folder)` works."""
    self.folder.mkdir(parents=True, exist_ok=True)
    (self.folder / _LOCKS).mkdir(exist_ok=True)
    shards = self.shard_names()
    small = [n for n in self.manifest.files if n not in shards]
    # The commit files last: their presence says the small files are all there.
    for name in sorted(small, key=lambda n: n in versions.COMMIT_FILES):
      if not self._present(name):
        self._download(name)
    if not (self.folder / versions.MANIFEST).is_file():  # for later runs without network
      fetch_lib.write_atomically(self.folder / versions.MANIFEST, self.manifest.to_bytes())

  # ------------------------------------------------------------ the reader's side

  def add_reader(self, epoch_windows, windows_per_epoch: int,
                 num_epochs: int | None) -> "ReadPlan":
    """Registers a reader's order (see `ReadPlan`); checks that `limit` holds the largest
    shard and starts the downloads ahead. Pass the plan to `reading`."""
    if not self.complete and self.limit is not None and self.limit < self._largest_shard:
      raise ValueError(
          f"cache_limit {_format_size(self.limit)} is smaller than the largest shard of "
          f"{self.ref} ({_format_size(self._largest_shard)}); give at least "
          f"{_format_size(self._largest_shard * 2)}, or cache_limit=None")
    plan = ReadPlan(epoch_windows, windows_per_epoch, num_epochs)
    with self._lock:
      self._plans.append(plan)
    self._schedule()
    return plan

  def window_size_for(self, wanted: int) -> int:
    """How many shards a window may hold so that one window and the next fit in `limit`."""
    if self.complete or self.limit is None:
      return wanted
    return max(1, min(wanted, self.limit // (2 * self._largest_shard)))

  def _needed_now(self) -> set[str]:
    """The shards of every reader's current and previous window (evicted last)."""
    return set().union(*(plan.needed_now() for plan in self._plans))

  @contextlib.contextmanager
  def reading(self, name: str, plan: "ReadPlan | None" = None, window: int | None = None):
    """The local path of shard `name` while the block reads it: downloaded and verified
    first (blocks until then), and never evicted, by any process, during the block.
    `window`: where the reader of `plan` is (downloads ahead follow it)."""
    if plan is not None and window is not None:
      self._advance(plan, window)
    if self.complete:
      yield self.folder / name
      return
    while not self._pin(name):
      self._fetch_shard(name, urgent=True)  # in the reader's thread: never queued
    try:
      yield self.folder / name
    finally:
      self._unpin(name)

  def _advance(self, plan: "ReadPlan", window: int) -> None:
    with self._lock:
      if window <= plan.position:
        return
      plan.position = window
      self._deferred.clear()
      self._changed.notify_all()
    self._schedule()

  def _schedule(self, _=None) -> None:
    """Keeps `downloads` shards in flight: the next ones in plan order that fit in `limit`
    together with every shard between the reader and them."""
    if self.complete or self._closed:
      return
    with self._lock:
      budget = self.limit
      wanted = []
      slots = self.downloads - len(self._in_flight)
      for name in self._upcoming():
        if budget is not None:
          budget -= self.manifest.files[name]["size"]
          if budget < 0:
            break
        if name not in self._in_flight and name not in self._deferred and not self._present(
            name):
          wanted.append(name)
          if len(wanted) >= slots:
            break
      wanted = wanted[:max(slots, 0)]
      self._in_flight.update(wanted)
    for name in wanted:
      try:
        self._pool.submit(self._prefetch, name).add_done_callback(self._schedule)
      except RuntimeError:  # the interpreter is shutting down: nothing more to read
        return

  def _upcoming(self) -> list[str]:
    """Every reader's next shards, in its order (one epoch ahead at most), readers in turn."""
    lists = [plan.upcoming() for plan in self._plans]
    names, seen = [], set()
    for group in itertools.zip_longest(*lists):
      for name in group:
        if name is not None and name not in seen:
          seen.add(name)
          names.append(name)
    return names

  def _prefetch(self, name: str) -> None:
    try:
      if not self._fetch_shard(name, urgent=False):
        with self._lock:
          self._deferred.add(name)  # no room now: again when a reader moves on
    except Exception as error:  # noqa: BLE001 - the reader's own request reports it
      with self._lock:
        self._deferred.add(name)
      logging.warning("prefetching %s failed (the reader will try again): %s", name, error)
    finally:
      with self._lock:
        self._in_flight.discard(name)

  # ------------------------------------------------------------ downloads

  def _present(self, name: str) -> bool:
    path = self.folder / name
    try:
      return path.stat().st_size == self.manifest.files[name]["size"]
    except FileNotFoundError:
      return False

  def _fetch_shard(self, name: str, urgent: bool) -> bool:
    """Downloads a shard unless present; one process downloads it, the others wait.

    A prefetch that finds no room gives up (False; scheduled again when a reader moves on);
    the reader's own request waits for room.
    """
    with self._file_lock(name, "download"):
      if self._present(name):
        return True
      part = self._part_path(name)
      if not self._reserve(name, part, wait=urgent):
        return False
      self._download(name, part)
      self.stats["shards"] += 1
      return True

  def _part_path(self, name: str) -> pathlib.Path:
    return self.folder / f".{name}{_PART}{os.getpid()}-{threading.get_ident()}"

  def _download(self, name: str, part: pathlib.Path | None = None) -> None:
    """Downloads one file of the version through `part` and verifies it before it is
    renamed into place; a damaged download is fetched once more."""
    entry = self.manifest.files[name]
    target = self.folder / name
    part = part or self._part_path(name)
    rel = f"{self.ref.folder}/{name}"
    for attempt in (1, 2):
      try:
        self._retrying("download", lambda: self._bucket.download(rel, str(part)), rel)
        if part.stat().st_size == entry["size"] and _sha256(part) == entry["sha256"]:
          os.replace(part, target)
          self.stats["bytes"] += entry["size"]
          return
        self.stats["damaged"] += 1
        logging.warning("%s does not match its manifest (size or SHA-256)%s",
                        self._bucket.url_of(rel), "; fetching it again" if attempt == 1 else "")
      finally:
        with contextlib.suppress(FileNotFoundError):
          part.unlink()
    raise versions.PublishError(
        f"{self._bucket.url_of(rel)} does not match its manifest (size or SHA-256) after two "
        "downloads: the published copy is damaged; tell the publisher (nothing damaged was "
        "read)")

  def _retrying(self, action: str, call, rel: str = ""):
    """`call()`, retried with backoff on network faults for `retry_seconds`."""
    deadline = time.monotonic() + self.retry_seconds
    delay, attempts = 0.5, 0
    while True:
      attempts += 1
      try:
        return call()
      except bucket_lib.BucketError as error:
        if not _is_transient(error) or time.monotonic() + delay > deadline:
          raise bucket_lib.BucketError(
              f"{error} (gave up after {attempts} attempt(s) over "
              f"{self.retry_seconds:.0f} s of retries to {action} "
              f"{self._bucket.url_of(rel)})" if _is_transient(error) else str(error)) from None
        self.stats["retries"] += 1
        logging.warning("retrying in %.1f s: %s", delay, error)
        time.sleep(delay)
        delay = min(delay * 2, 8.0)

  # ------------------------------------------------------------ room and eviction

  def _reserve(self, name: str, part: pathlib.Path, wait: bool) -> bool:
    """Makes room for `name` under the limit, evicting unread shards, and reserves it by
    creating its part file (counted at the shard's full size by every process).

    The shard the reader waits for may use one shard of slack above the limit. Without
    `wait`, False when there is no room now; with it, waits for other processes to free
    room, then a clear error.
    """
    if self.limit is None:
      return True
    size = self.manifest.files[name]["size"]
    deadline = time.monotonic() + _ROOM_WAIT_SECONDS
    while True:
      with self._file_lock(None, "cache"):
        room = self.limit - self.used_bytes() + (self._largest_shard if wait else 0)
        if room < size:
          room += self._evict(size - room)
        if room >= size:
          part.touch()
          return True
      if not wait:
        return False
      if time.monotonic() > deadline:
        raise versions.PublishError(
            f"cache_limit {_format_size(self.limit)} leaves no room for {name} "
            f"({_format_size(size)}) in {self.folder}: the shards in it are being read by "
            "this or other processes. Give a larger cache_limit (at least two windows of "
            "shards per process sharing it) or fewer processes per cache_dir.")
      with self._lock:
        self._changed.wait(0.2)

  def used_bytes(self) -> int:
    """Bytes in the cache folder: shards, and downloads in progress at their full size."""
    total = 0
    with os.scandir(self.folder) as entries:
      for entry in entries:
        name = entry.name
        if _PART in name:
          total += self.manifest.files.get(name[1:name.index(_PART)], {}).get("size", 0)
        elif entry.is_file() and name in self.manifest.files:
          total += entry.stat().st_size
    return total

  def _evict(self, wanted: int) -> int:
    """Removes shards no process reads and this one does not read now (its current and
    previous window), least recently used first; bytes freed. Prefetched shards of later
    windows may go: the budget of `_schedule` keeps them in plan order."""
    with self._lock:
      keep = self._needed_now() | set(self._readers)
    shards = self.shard_names()
    candidates = []
    for name in shards - keep:
      path = self.folder / name
      with contextlib.suppress(FileNotFoundError):
        candidates.append((path.stat().st_atime, name))
    freed = 0
    for _, name in sorted(candidates):  # least recently used first
      if freed >= wanted:
        break
      with open(self._lock_path(name), "a") as handle:
        try:
          fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
          continue  # another process reads it
        path = self.folder / name
        with contextlib.suppress(FileNotFoundError):
          size = path.stat().st_size
          path.unlink()
          freed += size
          self.stats["evicted"] += 1
    return freed

  # ------------------------------------------------------------ locks

  def _lock_path(self, name: str) -> pathlib.Path:
    return self.folder / _LOCKS / f"{name}.lock"

  def _file_lock(self, name: str | None, kind: str):
    """The cache-wide lock (`name` None: deciding what to evict) or a shard's `kind` lock."""
    return file_locks.exclusive(self.folder / _CACHE_LOCK if name is None
                                else self.folder / _LOCKS / f"{name}.{kind}.lock")

  def _pin(self, name: str) -> bool:
    """Counts a read of a present shard, holding a shared lock on it so that no process
    evicts it; False if it is not there (evicted, or never downloaded)."""
    with self._lock:
      if name in self._readers:
        self._readers[name][1] += 1
        return True
    handle = open(self._lock_path(name), "a")
    fcntl.flock(handle, fcntl.LOCK_SH)
    if not self._present(name):  # evicted before we locked it
      handle.close()
      return False
    with self._lock:
      if name in self._readers:  # another thread pinned it meanwhile
        handle.close()
        self._readers[name][1] += 1
      else:
        self._readers[name] = [handle, 1]
    with contextlib.suppress(OSError):
      os.utime(self.folder / name)  # recently used: evicted last
    return True

  def _unpin(self, name: str) -> None:
    with self._lock:
      entry = self._readers[name]
      entry[1] -= 1
      if entry[1] == 0:
        del self._readers[name]
        entry[0].close()  # closing drops the shared lock
        self._changed.notify_all()

  def close(self) -> None:
    self._closed = True
    self._pool.shutdown(wait=False, cancel_futures=True)
    with self._lock:
      for handle, _ in self._readers.values():
        handle.close()
      self._readers.clear()


def _is_transient(error: bucket_lib.BucketError) -> bool:
  text = str(error)
  return not text.startswith("access denied") and "does not exist" not in text


def _sha256(path: pathlib.Path) -> str:
  return bucket_lib.file_digests(path)[0]


class ReadPlan:
  """One reader's order: `epoch_windows(e)` lists epoch e's windows (shards read together),
  `windows_per_epoch` of them, for `num_epochs` (None: forever). Window `g` of the run is
  window `g % windows_per_epoch` of epoch `g // windows_per_epoch`; `position` is the window
  the reader is in."""

  def __init__(self, epoch_windows, windows_per_epoch: int, num_epochs: int | None):
    self._epoch_windows = epoch_windows
    self.windows_per_epoch = windows_per_epoch
    self.num_windows = None if num_epochs is None else num_epochs * windows_per_epoch
    self.position = 0
    self._memo: dict[int, list[list[str]]] = {}

  def window(self, index: int) -> list[str]:
    epoch, within = divmod(index, self.windows_per_epoch)
    if epoch not in self._memo:
      self._memo = {**{e: w for e, w in self._memo.items() if e >= epoch - 1},
                    epoch: self._epoch_windows(epoch)}  # two epochs at most in memory
    return self._memo[epoch][within]

  def windows(self, start: int, stop: int) -> list[list[str]]:
    stop = stop if self.num_windows is None else min(stop, self.num_windows)
    return [self.window(index) for index in range(max(start, 0), stop)]

  def needed_now(self) -> set[str]:
    """The shards of the current and previous window."""
    return set().union(*self.windows(self.position - 1, self.position + 1))

  def upcoming(self) -> list[str]:
    """The shards from the current window on, one epoch ahead, each once, in order."""
    windows = self.windows(self.position, self.position + self.windows_per_epoch)
    return list(dict.fromkeys(name for window in windows for name in window))
