"""A bounded, content-addressed cache of shard files, shared by the readers of a machine.

Shards are stored by SHA-256 (`<cache>/shards/<sha256>`; the manifest of every published
version names each file's SHA-256): a shard is the same bytes whatever endpoint, bucket or
version named it, so two servers holding one bucket name never mix, and versions that
share shards share them on disk. Every shard is downloaded by `storage.transfer`'s
checked download (size and SHA-256 checked before the rename).

Readers (`shard_reads.CachedShards`, one per reader of the read order) pin the shards they
read and download the next ones ahead (`prefetch`), and say which those are
(`register`: `wanted()`). The cache

* keeps `<cache>/shards/` at most `limit` bytes (`cache_limit`; downloads in progress
  count at their full size; the versions' small metadata files are outside the limit):
  before a download it evicts, least recently used first, shards no reader of any process
  has pinned, the next windows of this process's readers last;
* pins a reader's current window with a shared `flock` on each shard file: no process
  evicts a pinned shard, and a dead process's pins vanish with it (the kernel drops them);
* downloads a window ahead only when it fits without evicting what a reader still needs,
  and dates it ahead (its mtime an hour past the download's end, set before it shows in
  the folder) until it is read, as it does the shards a reader asks for that are here
  already (read in an earlier epoch, or by another process) unless this process reads
  them now, so that every process evicts the shards read already first: under a limit
  each shard is downloaded at most once per pass of a reader over it. A download ahead
  holds nothing (no process waits on another's read-ahead): under a limit too small for
  every reader's two windows it may be evicted, and is then downloaded again;
* shares one folder between the processes of a machine: one download per shard (a file
  lock), uniquely named part files held locked by their writer (a killed writer's part is
  removed by the next process that needs room), write-then-rename;
* forgets a reader when it is closed or garbage collected (a dropped pipeline).
"""

import collections
import concurrent.futures
import contextlib
import dataclasses
import errno
import fcntl
import os
import pathlib
import re
import stat
import threading
import time
import weakref

from absl import logging

from imagesets.storage import atomic_files
from imagesets.storage import bucket as bucket_lib
from imagesets.storage import file_locks
from imagesets.storage import transfer
from imagesets.storage import versions

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SHA = re.compile(r"[0-9a-f]{64}")
# The folder's layout and locking protocol, in <shards>/.layout. Processes of different
# layouts on one folder would break each other's locks, so a folder of another layout is
# refused in one line. This layout removes a shard's lock file on release (so they never
# pile up) and touches no other layout's lock files: a waiter of a layout that keeps them,
# holding a file removed under it, would share the lock with the next holder.
LAYOUT = "2"
_LAYOUT_FILE = ".layout"
STALE_LAYOUT_SECONDS = 60.0
_LOCKS = ".locks-2"           # <shards>/.locks-2/<sha>: held while a process downloads it
_CACHE_LOCK = ".cache.lock"   # held while a process counts, evicts and reserves room
DEFAULT_DOWNLOADS = 4         # shards in flight per process
# Windows downloaded ahead of the one read: without a limit two, so that downloads that
# end early start the next ones instead of idling until the reader moves on (a cold
# epoch runs at the pool's rate); under a limit one, the room that windows are sized for.
UNLIMITED_READ_AHEAD = 2
ROOM_WAIT_SECONDS = 120.0     # how long a reader waits for other readers to free room
# A shard read next (downloaded ahead, or here already) is dated this far ahead until it
# is read (pinned): least recently used first, every process evicts the shards read
# already before it.
READ_NEXT_SECONDS = 3600.0
# How long a reader waits for another thread's download of a shard it needs. Bounded: a
# tf.data numpy function that never returns deadlocks the iterator's destructor.
DOWNLOAD_WAIT_SECONDS = 1800.0


class CacheLayoutError(versions.PublishError):
  """The cache folder was made by an imagesets of another cache layout."""


def _check_layout(folder: pathlib.Path) -> None:
  """Records this layout in a folder without one (the first process wins: a marker made at
  once by another layout is then read and refused), refuses another."""
  path = folder / _LAYOUT_FILE
  _remove_stale_layout_files(path)
  found, tries = _read_layout(path), 3
  while found is None and tries:  # (our temporary marker removed under us: another try)
    _mark_layout(path)
    found, tries = _read_layout(path), tries - 1
  if found is None:
    raise CacheLayoutError(f"{path}: could not mark the cache's layout (the marker written was "
                           "removed three times by another process); retry, or give another "
                           "cache_dir")
  if found != LAYOUT:
    raise CacheLayoutError(
        f"{folder} is a shard cache of layout {found!r}, made by another version of imagesets "
        f"(this one uses layout {LAYOUT!r}); processes of two layouts would break each other's "
        f"locks: give this job another cache_dir, or remove {path} once no job of the other "
        "version uses the folder")


def _mark_layout(path: pathlib.Path) -> None:
  """Links a whole marker into place unless one is there (or ours vanished first)."""
  with transfer.disk_full_is_one_line(path, "writing the cache's layout marker"):
    with contextlib.suppress(FileNotFoundError):
      atomic_files.write(path, f"{LAYOUT}\n".encode(), exclusive=True)


def _remove_stale_layout_files(path: pathlib.Path) -> None:
  """The temporary markers of processes killed while they marked the folder: files whose
  writer's pid is gone and that are older than STALE_LAYOUT_SECONDS (a pid of another pid
  namespace sharing the folder looks gone; a marker takes a moment to write)."""
  for leftover, pid in atomic_files.leftovers(path):
    with contextlib.suppress(OSError, OverflowError):
      stat_ = leftover.lstat()
      if (pid is not None and stat.S_ISREG(stat_.st_mode)
          and time.time() - stat_.st_mtime > STALE_LAYOUT_SECONDS
          and not transfer.pid_is_alive(pid)):
        leftover.unlink()


def _read_layout(path: pathlib.Path) -> str | None:
  """The layout a marker names; None without one."""
  try:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # (a FIFO: no wait)
  except FileNotFoundError:
    return None
  except OSError as error:  # a symlink planted there (ELOOP)
    raise CacheLayoutError(f"{path} is not a file ({error.strerror}): refused; remove it") from None
  if not stat.S_ISREG(os.fstat(fd).st_mode):
    os.close(fd)
    raise CacheLayoutError(f"{path} is not a file: refused; remove it")
  with os.fdopen(fd, "rb") as handle:
    found = handle.read(64).decode(errors="replace").strip()
  if not found:
    raise CacheLayoutError(f"{path}, the cache's layout marker, is empty (a disk filled while it "
                           "was written?): remove it")
  return found


class ReaderClosedError(versions.PublishError):
  """A wait of a reader that was closed, or whose pipeline failed in another read."""


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


def format_size(num_bytes: int) -> str:
  for unit in ("B", "KiB", "MiB", "GiB"):
    if num_bytes < 1024 or unit == "GiB":
      return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
    num_bytes /= 1024
  return str(num_bytes)


@dataclasses.dataclass(frozen=True)
class Shard:
  """A shard file of a published version: its content (sha256, size) and where it is."""

  sha256: str
  size: int
  bucket: bucket_lib.Bucket = dataclasses.field(compare=False, hash=False)
  rel: str = dataclasses.field(compare=False, hash=False)   # path in the bucket


class ShardCache:
  """The shard store of one cache folder in this process (`shared` gives one per folder
  and limit)."""

  def __init__(self, root: pathlib.Path, limit=None, *, downloads: int = DEFAULT_DOWNLOADS,
               retry_seconds: float = transfer.DEFAULT_RETRY_SECONDS):
    self.limit = parse_size(limit)
    self.folder = transfer.own_folder(pathlib.Path(root) / "shards", root)
    _check_layout(self.folder)
    transfer.own_folder(self.folder / _LOCKS, root)
    transfer.remove_stale_parts(self.folder)  # a killed job's, limit or not
    self.retry_seconds = retry_seconds
    self.stats = collections.Counter()   # downloads, bytes, retries, damaged, evicted
    self._lock = threading.Lock()
    self._changed = threading.Condition(self._lock)
    self._pins: dict[str, list] = {}     # sha -> [file holding a shared lock, count]
    self._readers: weakref.WeakSet = weakref.WeakSet()
    self._in_flight: set[str] = set()
    self._queued: dict[str, concurrent.futures.Future] = {}  # read-ahead not started yet
    self._closing = threading.Event()   # set by close(): waits of its downloads end
    self._failed: dict[str, Exception] = {}  # a prefetch's error, for the reader to raise
    self._orphans: collections.deque = collections.deque()  # unpins of finalizers (`release_later`)
    self._pool = concurrent.futures.ThreadPoolExecutor(max(1, downloads),
                                                       thread_name_prefix="imagesets-shard")

  # ------------------------------------------------------------ readers

  def register(self, reader):
    """Counts `reader.wanted()` (SHA-256 of what it holds and reads next) as needed: those
    shards are evicted last, and never to make room for a download ahead. Held weakly."""
    with self._lock:
      self._readers.add(reader)
    return reader

  def check_fits(self, largest: int, what: str, held: int = 1, readers: int = 1) -> None:
    """Refuses a limit below what `readers` readers that each pin `held` windows of one
    shard need (below it, readers that wait for each other, Grain's workers, can wait for
    room forever)."""
    need = largest * held * readers
    if self.limit is None or self.limit >= need:
      return
    what = f"the largest shard of {what} ({format_size(largest)})"
    if need > largest:
      who = (f"{readers} readers (Grain's worker processes) that each pin" if readers > 1
             else "a reader that pins")
      what = f"what {who} {held} shards need ({format_size(need)}: {what})"
    raise ValueError(f"cache_limit {format_size(self.limit)} is smaller than {what}; give at "
                     f"least {format_size(need * 2)}, or cache_limit=None")

  def window_size_for(self, wanted: int, largest: int, held: int = 1, readers: int = 1) -> int:
    """Shards a window may hold so that the `held` windows each of `readers` readers pins
    and the next one fit in `limit`."""
    if self.limit is None:
      return wanted
    return max(1, min(wanted, self.limit // (readers * (held + 1) * largest)))

  def _protected(self) -> set[str]:
    """What this process's readers read now or next (evicted last, never by a prefetch)."""
    with self._lock:
      readers = list(self._readers)
    return set().union(*(reader.wanted() for reader in readers))

  # ------------------------------------------------------------ shards

  def path(self, shard: Shard) -> pathlib.Path:
    return self.folder / shard.sha256

  def _present(self, shard: Shard) -> bool:
    try:
      return self.path(shard).stat().st_size == shard.size
    except FileNotFoundError:
      return False

  def pin(self, shard: Shard, abort: threading.Event | None = None) -> pathlib.Path:
    """The local path of `shard`, downloaded (now, in this thread, unless a download of it
    is under way) and pinned until `unpin`. Every wait is bounded and ends at once when
    `abort` is set (the reader was closed, or another of its reads failed)."""
    abort = abort or threading.Event()
    self.drain_releases()
    while not self._try_pin(shard):
      deadline = time.monotonic() + DOWNLOAD_WAIT_SECONDS
      with self._lock:
        error = self._failed.pop(shard.sha256, None)
        queued = self._queued.pop(shard.sha256, None)
        if queued is not None and queued.cancel():  # not started: this thread downloads it
          self._in_flight.discard(shard.sha256)    # (not after other readers' read-ahead)
          self._changed.notify_all()
        waited = shard.sha256 in self._in_flight
        while shard.sha256 in self._in_flight:  # a prefetch of it: wait for that one
          _check_wait(abort, deadline, f"waiting for the download of {shard.rel}")
          self._changed.wait(0.2)
          error = error or self._failed.pop(shard.sha256, None)
      if error is not None:
        raise error  # the prefetch's own error: not downloaded twice more
      if not waited:
        self._fetch(shard, urgent=True, abort=abort)
    return self.path(shard)

  def _try_pin(self, shard: Shard) -> bool:
    sha = shard.sha256
    with self._lock:
      if sha in self._pins:
        self._pins[sha][1] += 1
        self._failed.pop(sha, None)
        return True
    try:
      handle = _open_shard(self.path(shard))
    except FileNotFoundError:
      return False
    fcntl.flock(handle, fcntl.LOCK_SH)
    stat = os.fstat(handle.fileno())
    if stat.st_nlink == 0 or stat.st_size != shard.size:  # evicted before we locked it
      handle.close()
      return False
    with self._lock:
      # (it is here, whoever downloaded it: an earlier failure to download it is over)
      self._failed.pop(sha, None)
      if sha in self._pins:  # another thread pinned it meanwhile
        handle.close()
        self._pins[sha][1] += 1
      else:
        self._pins[sha] = [handle, 1]
    with contextlib.suppress(OSError):
      os.utime(self.path(shard))  # recently used: evicted last
    return True

  def release_later(self, shards) -> None:
    """Unpins `shards` at the cache's next call: for finalizers, which the garbage
    collector may run in a thread that holds the cache's lock (taking it there would
    deadlock). Takes no lock."""
    self._orphans.extend(shards)

  def drain_releases(self) -> None:
    """Unpins what finalizers left to `release_later`."""
    while True:
      try:
        shard = self._orphans.popleft()
      except IndexError:
        return
      with contextlib.suppress(KeyError):
        self.unpin(shard)

  def unpin(self, shard: Shard) -> None:
    with self._lock:
      entry = self._pins[shard.sha256]
      entry[1] -= 1
      if entry[1] == 0:
        del self._pins[shard.sha256]
        entry[0].close()  # closing drops the shared lock
        self._changed.notify_all()

  def prefetch(self, shards) -> None:
    """Downloads `shards` in the background if they fit without evicting what readers
    still need; a shard that does not fit now is tried again when a reader moves on."""
    self.drain_releases()
    wanted = []
    with self._lock:
      for shard in shards:
        if self._present(shard) and self._date_ahead(shard):   # (here already)
          continue
        # (a shard whose download failed is not tried again: the reader raises that error)
        if shard.sha256 not in self._in_flight and shard.sha256 not in self._failed:
          self._in_flight.add(shard.sha256)
          wanted.append(shard)
    for shard in wanted:
      try:
        future = self._pool.submit(self._prefetch, shard)
      except RuntimeError:  # shutting down: nothing more to read
        self._done(shard)
        continue
      with self._lock:
        if shard.sha256 in self._in_flight and not future.done():
          self._queued[shard.sha256] = future

  def _date_ahead(self, shard: Shard) -> bool:
    """Dates a shard read next an hour on, so that every process evicts it after the
    shards read already; one this process reads now keeps the time its pin gave it (dated
    ahead, it would stay so once read). False when it is not here. Under the lock (a pin
    of this process comes before or after, never between the check and the date)."""
    if shard.sha256 not in self._pins:
      try:
        os.utime(self.path(shard), (_read_next_time(),) * 2)
      except FileNotFoundError:
        return False
      except OSError:   # (a file system that refuses times: the eviction order suffers)
        pass
    return True

  def _prefetch(self, shard: Shard) -> None:
    try:
      self._fetch(shard, urgent=False)
    except Exception as error:  # noqa: BLE001 - the reader raises it when it gets there
      with self._lock:
        self._failed[shard.sha256] = error
      logging.warning("downloading %s ahead failed: %s", shard.rel, error)
    finally:
      self._done(shard)

  def _done(self, shard: Shard) -> None:
    with self._lock:
      self._in_flight.discard(shard.sha256)
      self._queued.pop(shard.sha256, None)
      self._changed.notify_all()

  def _fetch(self, shard: Shard, urgent: bool, abort=None) -> bool:
    """Downloads a shard unless present; one process downloads it, the others wait
    (bounded, and ended by `abort` or the cache's close). A prefetch that finds no room
    gives up (False)."""
    abort = abort or self._closing
    deadline = time.monotonic() + DOWNLOAD_WAIT_SECONDS
    waiting = lambda: _check_wait(  # noqa: E731
        abort, deadline, f"waiting for another process's download of {shard.rel}")
    with file_locks.exclusive(self.folder / _LOCKS / shard.sha256, waiting=waiting,
                              remove=True):
      if self._present(shard):   # (another process's download, since `prefetch` looked)
        if not urgent:
          with self._lock:
            self._date_ahead(shard)
        return True
      part = self._reserve(shard, urgent, abort)
      if part is None:
        return False
      # Read next: dated ahead before it shows in the folder, so that no process sees it
      # as used before the shards read while it downloaded.
      transfer.checked_download(shard.bucket, shard.rel, self.path(shard),
                                {"size": shard.size, "sha256": shard.sha256}, part=part,
                                retry_seconds=self.retry_seconds, stats=self.stats,
                                dated=None if urgent else _read_next_time)
      return True

  # ------------------------------------------------------------ room

  def _reserve(self, shard: Shard, urgent: bool, abort=None):
    """Room for `shard` under the limit, made by evicting unpinned shards, reserved by
    creating its (locked) part file; None for a prefetch that would have to evict what a
    reader still needs. A reader's own request waits for other readers to free room."""
    deadline = time.monotonic() + ROOM_WAIT_SECONDS
    while True:
      with file_locks.exclusive(self.folder / _CACHE_LOCK):
        if self.limit is None:
          transfer.remove_stale_parts(self.folder)  # (under a limit, used_bytes does it)
        if self.limit is None or self._make_room(shard.size, urgent):
          return transfer.open_part(self.folder, shard.sha256, shard.size)
      if not urgent:
        return None
      if abort is not None:
        _check_wait(abort, float("inf"), f"waiting for room for {shard.rel}")
      if time.monotonic() > deadline:
        raise versions.PublishError(
            f"cache_limit {format_size(self.limit)} leaves no room for {shard.rel} "
            f"({format_size(shard.size)}) in {self.folder}: every shard in it is being read "
            "by this or other processes. Give a larger cache_limit (two windows of shards "
            "per reader sharing it) or fewer processes per cache_dir.")
      with self._lock:
        self._changed.wait(0.2)

  def used_bytes(self) -> int:
    """Bytes of the shard folder: shards, and live downloads at their full size (a dead
    process's part files are removed here)."""
    transfer.remove_stale_parts(self.folder)
    total = 0
    with os.scandir(self.folder) as entries:
      for entry in entries:
        with contextlib.suppress(FileNotFoundError):
          if transfer.PART in entry.name:
            total += transfer.part_reserved_bytes(entry.name)
          elif _SHA.fullmatch(entry.name):
            total += entry.stat().st_size
    return total

  def _make_room(self, size: int, urgent: bool) -> bool:
    """Evicts until `size` more bytes fit; the shards this process's readers read next go
    last, and only for a reader's own request."""
    self.drain_releases()
    excess = self.used_bytes() + size - self.limit
    if excess <= 0:
      return True
    protected = self._protected()
    with self._lock:
      pinned = set(self._pins)
    candidates = []
    with os.scandir(self.folder) as entries:
      for entry in entries:
        if _SHA.fullmatch(entry.name) and entry.name not in pinned:
          with contextlib.suppress(FileNotFoundError):
            stat = entry.stat()
            if urgent or entry.name not in protected:
              candidates.append((entry.name in protected, stat.st_mtime, entry.name))
    for _, _, name in sorted(candidates):  # unprotected first, least recently used first
      excess -= self._evict(name)
      if excess <= 0:
        return True
    return False

  def _evict(self, name: str) -> int:
    path = self.folder / name
    try:
      handle = _open_shard(path)
    except (FileNotFoundError, NotAShardError):
      return 0
    with handle:
      try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except BlockingIOError:
        return 0  # pinned by a reader (of any process)
      size = os.fstat(handle.fileno()).st_size
      path.unlink()
    self.stats["evicted"] += 1
    return size

  def forget_failures(self) -> None:
    with self._lock:
      self._failed.clear()

  def wake_all(self) -> None:
    with self._lock:
      self._changed.notify_all()

  def close(self) -> None:
    self._closing.set()
    self._pool.shutdown(wait=False, cancel_futures=True)
    with self._lock:
      for handle, _ in self._pins.values():
        handle.close()
      self._pins.clear()


class NotAShardError(versions.PublishError):
  """What stands at a shard's name in the cache is not a regular file."""


def _open_shard(path: pathlib.Path):
  """The shard file at `path`, opened for reading; FileNotFoundError without one. A link
  (to bytes never checked against the shard's SHA-256), a FIFO (a read that never ends)
  or a device there is NotAShardError, one line: refused, neither followed nor read."""
  try:
    return atomic_files.open_regular(path)
  except atomic_files.NotAFileOfOurs:
    pass
  except OSError as error:
    if error.errno != errno.ELOOP:
      raise
  raise NotAShardError(
      f"{path} is not a regular file (a symlink, a FIFO or a device) where the shard cache "
      "keeps a shard it downloaded and checked: refused, neither followed nor read; remove "
      "it (the shard is then downloaded again)")


def _read_next_time() -> float:
  return time.time() + READ_NEXT_SECONDS


def _check_wait(abort: threading.Event, deadline: float, what: str) -> None:
  if abort.is_set():
    if getattr(abort, "error", None) is not None:
      raise abort.error  # the read that failed first: its error is the pipeline's
    raise ReaderClosedError(f"stopped {what}: this pipeline's reader was closed or another "
                            "of its reads failed (see that error)")
  if time.monotonic() > deadline:
    raise ReaderClosedError(f"gave up {what} after {DOWNLOAD_WAIT_SECONDS:.0f} s: the "
                            "process downloading it is stuck; check the network and retry")


_shared: dict[tuple, ShardCache] = {}
_shared_lock = threading.Lock()


def process_stats() -> collections.Counter:
  """Downloads, bytes, retries, damaged and evicted shards of every cache of this process."""
  total = collections.Counter()
  with _shared_lock:
    for cache in _shared.values():
      total.update(cache.stats)
  return total


def shared(root: pathlib.Path, limit=None) -> ShardCache:
  """The process's one cache of folder `root` and limit (`"20GB"` and `20_000_000_000`
  are one limit, so one cache)."""
  key = (str(pathlib.Path(root).absolute()), parse_size(limit))
  with _shared_lock:
    if key not in _shared:
      _shared[key] = ShardCache(root, key[1])
    return _shared[key]
