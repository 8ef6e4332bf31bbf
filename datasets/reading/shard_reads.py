"""Reading records out of shard files, holding each shard exactly as long as its reads need.

Two stores give shard files by name through one small interface (`ShardStore`: `pin`,
`unpin`, `prefetch`): `LocalShards` (a TFDS data_dir or a whole fetched copy: nothing to fetch or
hold) and `CachedShards` (a version streamed from a bucket through `shard_cache`: `pin`
downloads what is missing and holds the file against eviction).

`PlannedReads` reads records by their place in the order (`order.Run`): a reader's pass
says up front how many records of each shard it reads, so a shard is opened (pinned) at its
first read and closed (unpinned) when that many distinct records of it have been read, and
opening a window's first shard downloads the reader's next window ahead. A read that is not
the reader's planned next (a notebook's `source[i]`, the records of a rewound iterator
behind the windows it left) pins the one shard for that read and never waits for another.
No lock is held across a download or a file read; nothing depends on how long anything
took.
"""

import dataclasses
import os
import pathlib
import threading
import typing
import weakref

import numpy as np

from imagesets.reading import order as order_lib
from imagesets.reading import shard_cache as shard_cache_lib
from imagesets.storage import tfrecord_files


class ShardStore(typing.Protocol):
  """Shard files by name for one reader: what `PlannedReads` and `WindowPins` read from."""

  ahead: int   # windows to download ahead of the one read

  def pin(self, name: str) -> pathlib.Path:
    """The local path of shard `name`, downloaded if missing, held until `unpin`."""

  def unpin(self, name: str) -> None:
    """Lets go of one `pin` of `name`."""

  def prefetch(self, names) -> None:
    """Starts downloading `names` (read next), as room allows; never waits."""

  def close(self) -> None:
    """Lets go of everything held."""


class LocalShards:
  """Shard files of a local folder (a `ShardStore`)."""

  ahead = 0   # windows downloaded ahead of the one read

  def __init__(self, folder: pathlib.Path):
    self.folder = pathlib.Path(folder)

  def pin(self, name: str) -> pathlib.Path:
    return self.folder / name

  def unpin(self, name: str) -> None:
    pass

  def prefetch(self, names) -> None:
    pass

  def close(self) -> None:
    pass


class CachedShards:
  """Shard files of a published version, through the shard cache (a `ShardStore`): `pin` downloads a shard
  that is missing (checked) and holds it until `unpin`; `prefetch` downloads ahead when it
  fits the limit without evicting what a reader of this process holds or reads next (a
  download ahead holds nothing, but is evicted after the shards read already: under a
  limit too small for every reader's window and the next, another process may evict it,
  and it is downloaded again, never waited for)."""

  def __init__(self, cache: "shard_cache_lib.ShardCache", shards: dict):
    self._cache, self._shards = cache, shards   # name -> shard_cache.Shard
    # Windows downloaded ahead of the one read: under a limit one (the room windows are
    # sized for); without one two, so that downloads that end early start the next ones
    # instead of idling until the reader moves on (a cold epoch runs at the pool's rate).
    self.ahead = 1 if cache.limit is not None else shard_cache_lib.UNLIMITED_READ_AHEAD
    self._lock = threading.Lock()
    self._pinned: dict[str, int] = {}
    self._next: set[str] = set()
    self._abort = threading.Event()
    cache.register(self)
    # A dropped pipeline's store (garbage collected) lets its shards go.
    self._closer = weakref.finalize(self, _unpin_counted, cache, shards, self._pinned,
                                    self._abort)

  def pin(self, name: str) -> pathlib.Path:
    path = self._cache.pin(self._shards[name], self._abort)
    with self._lock:
      closed = self._abort.is_set()
      if not closed:
        self._pinned[name] = self._pinned.get(name, 0) + 1
        self._next.discard(name)
    if closed:
      self._cache.unpin(self._shards[name])
      raise shard_cache_lib.ReaderClosedError("this pipeline's shard reader was closed")
    return path

  def unpin(self, name: str) -> None:
    with self._lock:
      if not self._pinned.get(name):
        return   # (let go by close() already)
      self._pinned[name] -= 1
      if not self._pinned[name]:
        del self._pinned[name]
    self._cache.unpin(self._shards[name])

  def prefetch(self, names) -> None:
    """Downloads `names` ahead, in order, and counts them as read next (evicted last)."""
    names = list(names)
    with self._lock:
      self._next = set(names)
    self._cache.prefetch([self._shards[name] for name in names])

  def wanted(self) -> set[str]:
    """SHA-256 of the shards held and of those read next (evicted last)."""
    with self._lock:
      names = set(self._pinned) | self._next
    return {self._shards[name].sha256 for name in names}

  def close(self) -> None:
    with self._lock:
      self._closer()
    self._cache.wake_all()   # (waits of this reader end now)
    self._cache.drain_releases()


def _unpin_counted(cache, shards, pinned: dict, abort) -> None:
  """A store's finalizer (also run by `close`): takes no lock of the cache (the garbage
  collector may run it in a thread holding one), so the unpins wait for the cache's next
  call (`ShardCache.release_later`)."""
  abort.set()
  cache.release_later([shards[name] for name, count in list(pinned.items())
                       for _ in range(count)])
  pinned.clear()


class TFRecordFile:
  """Records of a TFRecord file by index (each: u64 length, u32 CRC of it, data, u32 CRC of
  it). Every CRC is checked (a local shard was never checked against a SHA-256): a damaged
  file is a ValueError naming it and the record, never a wrong record."""

  def __init__(self, path):
    self._path = path
    self._file = open(path, "rb")
    fd, offsets, position, size = self._file.fileno(), [], 0, os.fstat(self._file.fileno()).st_size
    framing, length_size = tfrecord_files.FRAMING, tfrecord_files.LENGTH.size
    while position < size:
      header = os.pread(fd, tfrecord_files.HEADER.size, position)
      if (len(header) < tfrecord_files.HEADER.size
          or tfrecord_files.masked_crc(header[:length_size])
          != tfrecord_files.CRC.unpack_from(header, length_size)[0]):
        self._damaged(len(offsets))
      offsets.append(position)
      position += framing + tfrecord_files.LENGTH.unpack_from(header)[0]
    if position != size:
      self._damaged(len(offsets) - 1)
    self._offsets = offsets

  def _damaged(self, index: int):
    self._file.close()
    raise ValueError(f"{self._path}: record {index} is damaged (its CRC or length does not "
                     "match): rebuild the version, or fetch it again")

  def close(self) -> None:
    self._file.close()

  def read(self, indices) -> list[bytes]:
    fd, out = self._file.fileno(), []
    for index in indices:
      position = self._offsets[index]
      (length,) = tfrecord_files.LENGTH.unpack(os.pread(fd, tfrecord_files.LENGTH.size,
                                                        position))
      framed = os.pread(fd, length + tfrecord_files.CRC.size,
                        position + tfrecord_files.HEADER.size)
      if len(framed) < length + tfrecord_files.CRC.size or (
          tfrecord_files.masked_crc(framed[:length])
          != tfrecord_files.CRC.unpack_from(framed, length)[0]):
        self._damaged(index)
      out.append(framed[:length])
    return out


def open_records(path, file_format: str):
  """A shard file's records by index: `.read(indices)`, `.close()`."""
  if file_format == "array_record":
    from array_record.python import array_record_module  # optional: ArrayRecord builds only
    return array_record_module.ArrayRecordReader(str(path), "readahead_buffer_size:0")
  if file_format != "tfrecord":
    raise ValueError(f"{path}: a {file_format} shard; this package reads TFRecord and "
                     "ArrayRecord builds (rebuild with --file_format tfrecord or array_record)")
  return TFRecordFile(path)


@dataclasses.dataclass
class _Open:
  """A shard held for a window of a pass: its file, the records read of it (distinct), the
  reads under way."""

  name: str
  records: object
  expected: int
  read: np.ndarray      # bool [take]: which of the shard's records were read
  busy: int = 0
  distinct: int = 0     # of them, how many (read.sum(), kept: a read is O(its records))

  @property
  def done(self) -> bool:
    return self.distinct >= self.expected


class PlannedReads:
  """Records of one reader's passes of `run` (see the module docstring). `read(q, index,
  count)` gives records [index, index + count) of the reader's pass q."""

  def __init__(self, store, file_format: str, run: "order_lib.Run", reader: int):
    self._store, self._format, self._run, self._reader = store, file_format, run, reader
    self._lock = threading.Lock()
    self._open: dict[tuple, _Open] = {}   # (pass, window, shard) -> held shard
    self._newest: tuple[int, int] | None = None   # (pass, window) of the newest planned read
    self._done: set[tuple[int, int]] = set()      # windows whose reads were all done
    self._finished: dict[tuple[int, int], int] = {}   # window -> its shards read whole
    self.stats = {"opened": 0, "visits": 0}

  def plan(self, q: int) -> "order_lib.ReaderPass":
    return self._run.reader_pass(q, self._reader)

  def read(self, q: int, index: int, count: int = 1) -> list[bytes]:
    plan = self.plan(q)
    if count == 1:   # (Grain's one record a call: no runs to find)
      shard, record = plan.rows[index].tolist()
      return self._read_shard(q, plan.window_of(index), shard, [record])
    rows = plan.rows[index:index + count]
    out: list[bytes] = [b""] * len(rows)
    for start, end in _runs(rows[:, 0]):
      shard = int(rows[start, 0])
      window = plan.window_of(index + start)
      indices = rows[start:end, 1].tolist()
      for i, record in zip(range(start, end), self._read_shard(q, window, shard, indices)):
        out[i] = record
    return out

  def _read_shard(self, q: int, window: int, shard: int, indices) -> list[bytes]:
    key = (q, window, shard)
    entry = self._enter(key)
    if entry is None:  # not the planned next: this shard for this read only
      return self.read_once(shard, indices)
    try:
      return entry.records.read(indices)
    finally:
      self._leave(key, entry, indices)

  def _enter(self, key) -> _Open | None:
    q, window, shard = key
    with self._lock:
      entry = self._open.get(key)
      if entry is not None:
        entry.busy += 1
        return entry
      behind = self._newest is not None and _behind(key[:2], self._newest, self.plan)
      if behind and not self._starts_over(key[:2]):
        return None   # a straggler: read once, its window is let go
      newest = self._newest is None or behind or key[:2] > self._newest
      if newest:
        if behind:   # the reader's pass starts over from here
          self._done = {k for k in self._done if k < key[:2]}
          self._finished = {k: n for k, n in self._finished.items() if k < key[:2]}
        self._newest = key[:2]
        self._release(lambda k: k[:2] != self._newest and (
            behind or _behind(k[:2], self._newest, self.plan)))
    name = self._run.order.shards[shard].name
    if newest:  # the window's shards (in parallel) and then the next window's
      current = [self._run.order.shards[s].name for s in self.plan(q).windows[window]]
      self._store.prefetch(current + _next_windows(self._run, self.plan, q, window,
                                                   self._store.ahead))
    path = self._store.pin(name)   # (no lock held: a download takes its time)
    records = _opened(path, self._format, self._store, name)
    slice_ = self._run.order.shards[shard]
    with self._lock:
      entry = self._open.get(key)
      if entry is None and _behind(key[:2], self._newest, self.plan):
        entry = None   # the reader moved on while this one waited: read it once
      elif entry is None:
        entry = _Open(name, records, self.plan(q).reads_of(shard), np.zeros(slice_.take, bool))
        self._open[key] = entry
        self.stats["opened"] += 1
        records = None
      if entry is not None:
        entry.busy += 1
    if records is not None:   # (not kept: another thread opened it, or read once)
      records.close()
      self._store.unpin(name)
    return entry

  def _starts_over(self, window: tuple[int, int]) -> bool:
    """Whether a read of `window`, behind the newest one and the one before, starts the
    reader's pass over from there (an iterator rewound, a dataset iterated again): every
    read of it was done, or it is more than a pass behind (no straggler is). Under the
    lock."""
    return window in self._done or window[0] < self._newest[0] - 1

  def _leave(self, key, entry: _Open, indices) -> None:
    with self._lock:
      where = np.asarray(indices) - self._run.order.shards[key[2]].skip
      entry.distinct += len(where) - int(entry.read[where].sum())
      entry.read[where] = True
      entry.busy -= 1
      if entry.done and not entry.busy and self._open.get(key) is entry:
        del self._open[key]
        self._close(entry)
        window = key[:2]
        self._finished[window] = self._finished.get(window, 0) + 1
        if self._finished[window] == len(self.plan(window[0]).windows[window[1]]):
          self._done.add(window)   # every shard of it read: a read of it again starts over
        oldest = (self._newest or window)[0] - 1   # (older ones start over anyway)
        self._done = {k for k in self._done if k[0] >= oldest}
        self._finished = {k: n for k, n in self._finished.items() if k[0] >= oldest}

  def _release(self, which) -> None:
    """Lets go of the shards of the windows `which(key)` no read is using (behind the
    newest window and the one before: their reads still to come, a straggler's, are read
    once each). Under the lock."""
    for key in [k for k in self._open if which(k)]:
      entry = self._open[key]
      if not entry.busy:
        del self._open[key]
        self._close(entry)

  def _close(self, entry: _Open) -> None:
    entry.records.close()
    self._store.unpin(entry.name)

  def read_once(self, shard: int, indices) -> list[bytes]:
    """Records `indices` of `shard`, pinned for this read only."""
    name = self._run.order.shards[shard].name
    with self._lock:
      self.stats["visits"] += 1
    path = self._store.pin(name)
    records = _opened(path, self._format, self._store, name)
    try:
      return records.read(indices)
    finally:
      records.close()
      self._store.unpin(name)

  def held(self) -> list[str]:
    with self._lock:
      return sorted(entry.name for entry in self._open.values())

  def finish(self) -> None:
    """The reader's pass is over (or its reads were dropped): lets every shard go that no
    read is using."""
    with self._lock:
      idle = [key for key, entry in self._open.items() if not entry.busy]
      entries = [self._open.pop(key) for key in idle]
      self._newest, self._done, self._finished = None, set(), {}
    for entry in entries:
      self._close(entry)

  def close(self) -> None:
    self.finish()
    self._store.close()


class WindowPins:
  """One reader's windows of `run`, read whole one after another (tf.data's TFRecord
  readers): `enter(q, w)` pins window w of pass q, lets the window before go (its reads
  are over: the next window is only entered once they are) and downloads the next window
  ahead."""

  def __init__(self, store, run: "order_lib.Run", reader: int):
    self._store, self._run, self._reader = store, run, reader
    self._lock = threading.Lock()
    self._held: list[str] = []

  def plan(self, q: int) -> "order_lib.ReaderPass":
    return self._run.reader_pass(q, self._reader)

  def enter(self, q: int, w: int) -> list[pathlib.Path]:
    names = [self._run.order.shards[s].name for s in self.plan(q).windows[w]]
    self.finish()
    # The window's shards downloaded at once, then the next window's as room allows.
    self._store.prefetch(names + _next_windows(self._run, self.plan, q, w, self._store.ahead))
    pinned = []
    try:
      for name in names:   # (no lock held: downloads take their time)
        pinned.append((name, self._store.pin(name)))
    except BaseException:
      for name, _ in pinned:
        self._store.unpin(name)
      raise
    with self._lock:
      self._held.extend(names)
    return [path for _, path in pinned]

  def finish(self) -> None:
    """The window read is over: lets its shards go."""
    with self._lock:
      held, self._held = self._held, []
    for name in held:
      self._store.unpin(name)

  def close(self) -> None:
    self.finish()
    self._store.close()


def _next_windows(run, plan, q: int, window: int, count: int) -> list[str]:
  """Names of the shards of the `count` windows after window `window` of pass q."""
  names = []
  for _ in range(count):
    window += 1
    while window >= len(plan(q).windows):
      q, window = q + 1, 0
      if run.num_passes is not None and q >= run.num_passes:
        return names
    names += [run.order.shards[s].name for s in plan(q).windows[window]]
  return names


def _opened(path, file_format, store, name):
  try:
    return open_records(path, file_format)
  except BaseException:
    store.unpin(name)
    raise


def _behind(key: tuple[int, int], newest: tuple[int, int] | None, plan) -> bool:
  """Whether window `key` (pass, window) is behind `newest` and the window before it."""
  if newest is None:
    return False
  q, w = key
  newest_q, newest_w = newest
  if q == newest_q:
    return w < newest_w - 1
  if q == newest_q - 1 and newest_w == 0:
    return w < len(plan(q).windows) - 1
  return q < newest_q


def _runs(values: np.ndarray):
  """[start, end) of each run of equal values."""
  if not len(values):
    return []
  edges = np.flatnonzero(np.diff(values)) + 1
  starts = np.concatenate([[0], edges]).tolist()
  return list(zip(starts, starts[1:] + [len(values)]))
