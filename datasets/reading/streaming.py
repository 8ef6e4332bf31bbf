"""The records of a split in stored or streaming order, read at local-disk speed.

`records(source, split, ...)` gives the serialized examples of a split of a `sources.Source`
as tf.data; `PositionSource` reads them by position for Grain. Both work on TFRecord and
ArrayRecord builds, local or streamed from a bucket through the shard cache.

The streaming order (docs/training_from_a_bucket.md): each epoch the worker's shards are
put in a seeded random order and read in windows of `window_shards` shards (fewer when
`cache_limit` holds fewer than two windows). The cache needs only the window being read
and the next one, so a global shuffle, which touches every shard at once, is traded for
mixing within a window (plus the pipelines' shuffle buffer on top): tf.data reads the
window's TFRecord shards interleaved record by record; by position (ArrayRecord, Grain)
the records of a window are shuffled together. Without shuffling (evaluation), shards are
read in stored order, one after another. The order depends only on the seed, the epoch and
the worker, so a restored `tf.data` checkpoint or Grain iterator continues with the same
examples.

Speed: TFRecord windows are read by TensorFlow's C++ `TFRecordDataset`s, ArrayRecord by
its C++ reader in batches; nothing takes a lock per record (a window's files are pinned
and opened once, when the reader enters it).
"""

import collections
import dataclasses
import math
import os
import struct
import threading
import time
import weakref

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from imagesets.reading import sources

DEFAULT_WINDOW_SHARDS = 4   # shards read together
_READ_BATCH = 64            # records read per call into Python (ArrayRecord)
_READ_CALLS = 4             # such calls at once (bounded: PositionReader keeps their windows)
_TFRECORD_BUFFER = 8 << 20  # bytes read ahead per TFRecord file
STRAGGLER_SECONDS = 60.0    # the longest a read waits for older windows' reads to end
# After entering a window failed, the reads of the pass that arrive this soon (queued
# behind the failed one) raise its error at once; later ones try again.
FAILED_PASS_SECONDS = 5.0
_STRAGGLE_WINDOWS = 16      # a read up to this far behind is a straggler (Grain's threads), not a new pass
# Reading by position (Grain), the reads of a window still to come are known (the
# positions this process reads: a stride, Grain's workers); a window is let go once they
# have all come, or when they have not come this long after no read was under way (a
# sampler not reading in order).
ARRIVAL_SECONDS = 1.0
_UNASKED, _ASKED_AHEAD, _ASKED = 0, 1, 2   # a record's mark in a pass (`_asked_again`)
_GRAIN_HELD = 2             # windows a Grain source keeps pinned: the current one and the one before

is_bucket_url = sources.is_bucket_url


@dataclasses.dataclass(frozen=True)
class Shard:
  name: str
  skip: int   # first record of the shard read (split slices such as train[:10%])
  take: int   # records read from it


@dataclasses.dataclass
class Plan:
  """The streaming order of one worker's shards: windows and record positions per epoch."""

  shards: list[Shard]
  window_shards: int
  shuffle: bool
  seed: int

  @property
  def windows_per_epoch(self) -> int:
    return -(-len(self.shards) // self.window_shards)

  @property
  def records_per_epoch(self) -> int:
    return sum(shard.take for shard in self.shards)

  def _shard_order(self, epoch: int) -> np.ndarray:
    if not self.shuffle:
      return np.arange(len(self.shards))
    return np.random.default_rng([self.seed, epoch]).permutation(len(self.shards))

  def window_indices(self, g: int) -> list[int]:
    """Indices into `shards` of window g of the run (window g % W of epoch g // W)."""
    epoch, within = divmod(g, self.windows_per_epoch)
    order = self._shard_order(epoch)
    return order[within * self.window_shards:(within + 1) * self.window_shards].tolist()

  def window(self, g: int) -> list[str]:
    return [self.shards[i].name for i in self.window_indices(g)]

  def window_span(self, g: int) -> tuple[int, int]:
    """[start, end): the positions of window g's records in the run (epoch after epoch)."""
    epoch, within = divmod(g, self.windows_per_epoch)
    takes = np.array([shard.take for shard in self.shards], np.int64)[self._shard_order(epoch)]
    start = epoch * self.records_per_epoch + int(takes[:within * self.window_shards].sum())
    return start, start + int(takes[within * self.window_shards:
                                    (within + 1) * self.window_shards].sum())

  def window_positions(self, g: int) -> np.ndarray:
    """int64 [records of window g, 3]: (shard index, record index, g), shuffled together
    when shuffling."""
    indices = self.window_indices(g)
    if not indices:
      return np.zeros([0, 3], np.int64)
    rows = np.concatenate([
        np.stack([np.full(self.shards[i].take, i),
                  np.arange(self.shards[i].skip, self.shards[i].skip + self.shards[i].take),
                  np.full(self.shards[i].take, g)], 1)
        for i in indices]).astype(np.int64)
    if self.shuffle:
      rows = np.random.default_rng([self.seed, *divmod(g, self.windows_per_epoch), 1]).permutation(rows)
    return rows

  def positions(self, epoch: int) -> np.ndarray:
    """int64 [records_per_epoch, 3]: the rows of the epoch's windows, one after another."""
    first = epoch * self.windows_per_epoch
    parts = [self.window_positions(first + w) for w in range(self.windows_per_epoch)]
    return np.concatenate(parts) if parts else np.zeros([0, 3], np.int64)


def plan_for(source: "sources.Source", split: str, *, shuffle: bool, seed: int | None,
             input_context=None, shard_index: int = 0, shard_count: int = 1,
             window_shards: int = DEFAULT_WINDOW_SHARDS, held: int = 1,
             readers: int = 1) -> Plan:
  """The worker's shards of `split` (every n-th, as TFDS's ReadConfig(input_context) does),
  in windows sized for `readers` readers that each pin `held` windows."""
  if input_context is not None:
    shard_index, shard_count = input_context.input_pipeline_id, input_context.num_input_pipelines
  builder = source.builder
  shards = [Shard(os.path.basename(i.filename), i.skip, i.take)
            for i in builder.info.splits[split].file_instructions if i.take]
  if len(shards) < shard_count:
    raise ValueError(
        f"{builder.info.full_name} split {split!r} has {len(shards)} shard file(s), fewer "
        f"than the {shard_count} input pipelines reading it: rebuild with --num_shards "
        f"{shard_count} or more")
  return Plan(shards[shard_index::shard_count],
              source.window_size_for(window_shards, held=held, readers=readers), shuffle,
              seed or 0)


def _num_windows(plan: Plan, num_epochs: int | None) -> int | None:
  return None if num_epochs is None else num_epochs * plan.windows_per_epoch


def records(source: "sources.Source", split: str, *, shuffle: bool = False,
            seed: int | None = None, num_epochs: int | None = 1, input_context=None,
            deterministic: bool = True,
            window_shards: int = DEFAULT_WINDOW_SHARDS) -> tf.data.Dataset:
  """Serialized examples of `split`, `num_epochs` times (None: forever), as tf.data:
  stored order, or the streaming order of `seed` with `shuffle`. Checkpointable (the
  windows come from the window number alone)."""
  plan = plan_for(source, split, shuffle=shuffle, seed=seed, input_context=input_context,
                  window_shards=window_shards)
  reader = source.reader(plan.window, _num_windows(plan, num_epochs))
  epochs_end = np.iinfo(np.int64).max if num_epochs is None else num_epochs
  if source.file_format == "tfrecord":
    ds = _tfrecord_windows(plan, reader, epochs_end)
  else:
    reader = PositionReader(source, plan, reader)
    ds = _position_windows(plan, reader, epochs_end, deterministic).unbatch()
  if num_epochs is not None:
    ds = ds.concatenate(_finishing(reader))
  options = tf.data.Options()
  options.deterministic = deterministic
  # The numpy functions only pin and open files that are the same whenever they run, so
  # iterator checkpoints may leave them out.
  options.experimental_external_state_policy = (
      tf.data.experimental.ExternalStatePolicy.IGNORE)
  ds = ds.with_options(options)
  # The numpy functions hold the reader weakly (`_weak`): the dataset (and so its
  # iterators, which hold their dataset) holds it, and a dropped pipeline's reader goes
  # with it, unpinning its window.
  ds._imagesets_reader = reader
  return ds


def _weak(reader):
  """`reader` as the numpy functions see it. tf.data keeps the Python functions of a
  traced pipeline in graphs that outlive the pipeline, so a closure holding the reader
  strongly would pin its window for the life of the process."""
  ref = weakref.ref(reader)

  def get():
    got = ref()
    if got is None:
      raise RuntimeError("this pipeline was dropped: its shard reader is closed")
    return got
  return get


def _finishing(reader) -> tf.data.Dataset:
  """No records: when a pass reaches it, the reader lets its last window go (a finished
  evaluation pins nothing while training goes on)."""
  reader = _weak(reader)

  def finish(_):
    reader().finish()
    return np.zeros([0], dtype=object)

  def empty(dummy):
    records = tf.numpy_function(finish, [dummy], tf.string, stateful=False)
    return tf.data.Dataset.from_tensor_slices(tf.reshape(records, [-1]))
  return tf.data.Dataset.range(1).flat_map(empty)


def _windows(plan: Plan, epochs_end: int) -> tf.data.Dataset:
  """The window numbers of the run."""
  return tf.data.Dataset.range(epochs_end * plan.windows_per_epoch if epochs_end < 2**40
                               else np.iinfo(np.int64).max)


def _tfrecord_windows(plan: Plan, reader, epochs_end: int) -> tf.data.Dataset:
  """Window after window, its shards read by TFRecordDatasets: interleaved record by
  record when shuffling, one after another in stored order otherwise."""

  reader = _weak(reader)

  def enter(g):
    paths = reader().enter(int(g))
    shards = [plan.shards[i] for i in plan.window_indices(int(g))]
    return (np.array([str(p) for p in paths], dtype=object),
            np.array([s.skip for s in shards], np.int64),
            np.array([s.take for s in shards], np.int64))

  def window(g):
    paths, skips, takes = tf.numpy_function(enter, [g], [tf.string, tf.int64, tf.int64],
                                            stateful=False)
    paths, skips, takes = (tf.reshape(x, [-1]) for x in (paths, skips, takes))
    # Over indices, not paths: a checkpoint then holds positions only, and a restored
    # iterator reads the files of the cache it runs with.
    read = lambda i: tf.data.TFRecordDataset(  # noqa: E731
        paths[i], buffer_size=_TFRECORD_BUFFER).skip(skips[i]).take(takes[i])
    files = tf.data.Dataset.range(tf.size(paths, out_type=tf.int64))
    if not plan.shuffle:
      return files.flat_map(read)
    return files.interleave(read, cycle_length=plan.window_shards, block_length=1,
                            num_parallel_calls=plan.window_shards, deterministic=True)

  return _windows(plan, epochs_end).flat_map(window)


def _position_windows(plan: Plan, reader: "PositionReader", epochs_end: int,
                      deterministic: bool) -> tf.data.Dataset:
  """Batches of records by position, window after window: the parallel reads of a window
  all end before the next window's begin (flat_map), so only one window's files are
  open at a time and an evicted shard is never held open."""
  read_batch = _reading(reader)

  def window(g):
    rows = tf.numpy_function(lambda w: plan.window_positions(int(w)), [g], tf.int64,
                             stateful=False)
    rows.set_shape([None, 3])
    return tf.data.Dataset.from_tensor_slices(rows).batch(_READ_BATCH).map(
        read_batch, num_parallel_calls=_READ_CALLS, deterministic=deterministic)
  return _windows(plan, epochs_end).flat_map(window)


def _reading(reader: "PositionReader"):
  reader = _weak(reader)

  def read_batch(rows):
    data = tf.numpy_function(lambda r: np.array(reader().read(r), dtype=object), [rows],
                             tf.string, stateful=False)
    data.set_shape([None])
    return data
  return read_batch


class _TFRecordFile:
  """Records of a TFRecord file by index (each: u64 length, u32 CRC, data, u32 CRC; the
  file was checked against its SHA-256, so the CRCs are not re-checked)."""

  def __init__(self, path):
    self._file = open(path, "rb")
    fd, offsets, position, size = self._file.fileno(), [], 0, os.fstat(self._file.fileno()).st_size
    while position < size:
      offsets.append(position)
      (length,) = struct.unpack("<Q", os.pread(fd, 8, position))
      position += 16 + length
    self._offsets = offsets

  def close(self) -> None:
    self._file.close()

  def read(self, indices) -> list[bytes]:
    fd, out = self._file.fileno(), []
    for index in indices:
      position = self._offsets[index]
      (length,) = struct.unpack("<Q", os.pread(fd, 8, position))
      out.append(os.pread(fd, length, position + 12))
    return out


def _read_once(path, file_format: str, indices) -> list[bytes]:
  records = _open_records(path, file_format)
  try:
    return records.read(indices)
  finally:
    records.close()


def _open_records(path, file_format: str):
  if file_format == "array_record":
    from array_record.python import array_record_module
    return array_record_module.ArrayRecordReader(str(path), "readahead_buffer_size:0")
  return _TFRecordFile(path)


class PositionReader:
  """Records by (shard index, record index, window) rows of `Plan.positions`. The files
  of the windows its shard reader holds pinned stay open (no lock, pin or open per
  record): the current one, and for Grain (whose reading threads straddle a window's
  end) the one before (`held=2`).

  Read by position (`read(..., at=position)`, Grain), the reader knows which reads of a
  window are still to come in this process (from the first position of the pass and the
  stride between positions: Grain's workers each read every n-th), so it lets a window go
  only once they have come, and a read that arrives after the window read ahead of it
  finds its files open rather than downloading its shard again."""

  def __init__(self, source, plan: Plan, reader, held: int = 1):
    self._format, self._plan, self._reader = source.file_format, plan, reader
    self._keep = held   # the windows `reader` holds pinned
    self._open: dict[int, dict[int, object]] = {}
    self._last: int | None = None   # the last window entered
    self._first: int | None = None  # the first window entered in the pass
    self._reading = collections.Counter()   # window -> reads under way in it
    self._retired: dict[int, dict[int, object]] = {}  # dropped, closed by their last read
    # The records asked for in each recent window, a mark a record; one asked for again is
    # a new pass (a loader iterated again, an iterator rewound), not a straggler.
    self._asked: dict[int, dict[int, np.ndarray]] = {}
    self._arrived = collections.Counter()   # window -> records asked for in the pass
    self._reads = _Reads()
    self._passes = 0   # new passes begun
    # Reads come from threads other than the main one (Grain's reading threads): a read may
    # then still come while another waits. Read from the main thread alone (a notebook's
    # source[i], in any order), nothing can come meanwhile: no read waits for one. (Not
    # inferred from the thread ids seen so far: under load one of Grain's threads can read
    # several windows before a second one runs at all.)
    self._parallel = False
    # Reads awaited did not come (a sampler that does not read in order, a thread starved
    # for longer than ARRIVAL_SECONDS): from then on no read waits for reads to come.
    self._unordered = False
    self._failure: tuple[Exception, float, int] | None = None  # (error, when, window)
    self._lock = threading.Lock()
    self._idle = threading.Condition(self._lock)

  def _new_pass(self) -> None:
    for w in list(self._open):
      self._retire(w)
    self._last, self._first, self._failure = None, None, None
    self._asked.clear()
    self._arrived.clear()
    self._reads = _Reads()
    self._passes += 1

  def _far_behind(self, g: int) -> bool:
    """A read of window g starts a new pass (a dataset iterated again, a restored
    iterator): it is far behind the last window entered, or, reading window after window
    (tf.data), behind it at all."""
    last = self._last
    if self._failure is not None:  # the pass reached the window whose entry failed
      last = max(-1 if last is None else last, self._failure[2])
    return last is not None and g < last and (
        self._keep == 1 or last - g > _STRAGGLE_WINDOWS)

  def _ahead(self, g: int) -> bool:
    """Whether a read of window g is ahead of the windows this pass holds and the next
    ones (reading by position): it may be a read of an iterator rewound meanwhile, still
    under way."""
    return self._keep > 1 and self._last is not None and g - self._last > self._keep

  def _asked_again(self, g: int, shard: int, indices: list[int]) -> bool:
    """Marks records `indices` of `shard` in window g asked for; True if one already was.
    A read `_ahead` marks them as such: the same records asked for again are then not a
    new pass."""
    info = self._plan.shards[shard]
    marks = self._asked.setdefault(g, {}).setdefault(shard, np.zeros(info.take, np.uint8))
    offsets = np.asarray(indices) - info.skip
    asked = marks[offsets]
    self._arrived[g] += int((asked == _UNASKED).sum())
    if self._ahead(g):
      marks[offsets] = np.maximum(asked, _ASKED_AHEAD)
      return False
    marks[offsets] = _ASKED
    return bool((asked == _ASKED).any())

  def _new_pass_from(self, g: int, shard: int, indices: list[int], at: int | None) -> None:
    """A new pass, whose first read is records `indices` of `shard` in window g (at
    position `at`)."""
    self._new_pass()
    self._asked_again(g, shard, indices)
    if at is not None:
      self._reads.add(at)

  def _to_come(self, windows) -> bool:
    """Whether reads of `windows` that this process makes in the pass have not come yet."""
    return any(self._arrived[w] < self._reads.count(*self._plan.window_span(w))
               for w in windows)

  def _wait_behind(self, g: int) -> None:
    """Before entering window g unpins the windows before g - keep + 1: waits for their
    reads under way to end (for up to STRAGGLER_SECONDS: an evicted file kept open would
    stay on the disk) and for those still to come in this process (for up to
    ARRIVAL_SECONDS: a straggler would download its shard again)."""
    start = arriving = time.monotonic()
    while g not in self._open:
      behind = [w for w in set(self._reading) | set(self._open) if w <= g - self._keep]
      busy = any(self._reading[w] for w in behind)
      if busy:
        arriving = None  # (the bound for arrivals starts when no read is under way)
      elif not (self._awaiting() and self._to_come(w for w in behind if w in self._open)):
        return
      elif arriving is None:
        arriving = time.monotonic()
      end = start + STRAGGLER_SECONDS if busy else arriving + ARRIVAL_SECONDS
      if time.monotonic() >= end:
        self._unordered = self._unordered or not busy
        return
      self._idle.wait(end - time.monotonic())

  def _awaiting(self) -> bool:
    """Whether a read waits for the reads of this process still to come."""
    return self._parallel and not self._unordered

  def _wait_for_pass(self, g: int) -> None:
    """A read of window g, ahead of windows this process still reads (a read of an
    iterator rewound meanwhile, still under way; parallel reads far out of order), waits
    while the pass gets nearer, entering them in order; it goes on when the pass has not
    moved for ARRIVAL_SECONDS with no other read under way (a slow read holds the pass up:
    STRAGGLER_SECONDS in all)."""
    deadline = time.monotonic() + STRAGGLER_SECONDS
    while g not in self._open:
      last = self._last
      if last is None or g - last <= self._keep or not self._awaiting() or not self._to_come(
          range(last + 1, min(g, last + 1 + _STRAGGLE_WINDOWS))):
        return
      if not self._idle.wait_for(lambda: self._last != last or g in self._open,  # noqa: B023
                                 ARRIVAL_SECONDS):
        # (reads under way in the pass's windows; not those waiting, like this one, ahead)
        held_up = any(n for w, n in self._reading.items() if w <= last + self._keep)
        if not held_up or time.monotonic() > deadline:
          return

  def _files(self, g: int, shard: int, indices: list[int],
             at: int | None) -> dict[int, object] | None:
    """The open files of window g, for records `indices` of `shard` (at position `at`
    when reading by position), counted as read until `_done(g)`; None for a read that
    straggles behind the windows held (read by a visit). Once entering a window failed,
    the reads queued behind it raise that error at once, each would otherwise wait out the
    same bounds again."""
    with self._lock:
      self._parallel = self._parallel or (threading.current_thread()
                                          is not threading.main_thread())
      if self._asked_again(g, shard, indices) or self._far_behind(g):
        self._new_pass_from(g, shard, indices, at)
      elif at is not None and not self._ahead(g):  # (a rewound iterator's: not this pass's)
        self._reads.add(at)
      # (reading window after window, tf.data keeps only the current window's: a read
      # behind it is a new pass anyway)
      horizon = _STRAGGLE_WINDOWS if self._keep > 1 else 0
      for old in [w for w in self._asked if w < g - horizon]:
        del self._asked[old]
        del self._arrived[old]
      if self._failure is not None:
        error, when, _ = self._failure
        if time.monotonic() - when < FAILED_PASS_SECONDS:
          raise error
        self._failure = None
      waited, passes = False, self._passes
      while True:
        if self._passes != passes and at is not None:
          # A new pass began while it waited (reading by position): it is the old pass's,
          # still under way (the last reads of a sampler's epoch, or of an iterator rewound
          # or iterated again); read it aside, without moving the new pass. (tf.data's reads
          # carry no position: such a read just goes on in the new pass.)
          return None
        files = self._open.get(g)
        if files is not None:
          self._reading[g] += 1
          return files
        if self._far_behind(g):
          self._new_pass_from(g, shard, indices, at)
          passes = self._passes
        last = self._last
        if last is not None and g < last:
          if self._first == last and last - g < self._keep:
            # The pass's first reads came out of order (parallel reads): the window
            # before the one it started at is held too, not read record by record.
            self._open[g] = self._opened(g, self._reader.hold(g))
            continue
          return None  # a little behind: a straggler
        if not waited:
          waited = True
          # While it waits, the read counts as under way in g: g is not let go (others
          # may enter it meanwhile, and the windows after) before it has read.
          self._reading[g] += 1
          try:
            self._wait_for_pass(g)
            self._wait_behind(g)
          finally:
            self._release(g)
          continue
        # Windows are entered in order, each once a pass, even when parallel reads reach
        # a later one first (a reader that skipped one would unpin and prefetch the wrong
        # windows); a far jump (a restored position) enters the window it reaches.
        start = last + 1 if last is not None and g - last <= self._keep else g
        for w in range(start, g + 1):
          try:
            paths = self._reader.enter(w)
          except Exception as error:
            self._failure = (error, time.monotonic(), w)
            raise
          self._open[w] = self._opened(w, paths)
        if last is None:
          self._first = g
        self._last = g
        self._idle.notify_all()  # (a read waiting for the pass to move)
        for old in [w for w in self._open if w <= g - self._keep]:
          self._retire(old)  # unpinned by the reader
        self._reading[g] += 1
        return self._open[g]

  def _opened(self, g: int, paths) -> dict[int, object]:
    return {i: _open_records(path, self._format)
            for i, path in zip(self._plan.window_indices(g), paths)}

  def _retire(self, g: int) -> None:
    """Closes window g's files now (not when garbage collected: an evicted file kept open
    stays on the disk), or, while reads of it are under way, when the last one ends."""
    files = self._open.pop(g)
    if self._reading[g]:
      self._retired[g] = files
    else:
      for records in files.values():
        records.close()

  def _done(self, g: int) -> None:
    with self._lock:
      self._release(g)

  def _release(self, g: int) -> None:
    """A read under way in window g (reading, or waiting to) ends; the last one closes the
    window's files if it was retired meanwhile. Under the lock."""
    self._reading[g] -= 1
    if not self._reading[g]:
      del self._reading[g]
      for records in self._retired.pop(g, {}).values():
        records.close()
      self._idle.notify_all()

  def finish(self) -> None:
    with self._lock:
      self._new_pass()
    self._reader.finish()

  def read(self, positions: np.ndarray, at: int | None = None) -> list[bytes]:
    """The records of rows `positions`; `at`: the run position of a single row (reading by
    position)."""
    out = [b""] * len(positions)
    for window, shard, rows in self._by_shard(positions):
      indices = positions[rows, 1].tolist()
      files = self._files(window, shard, indices, at)
      if files is None:  # a straggling read: that one shard, pinned for the read
        records = self._reader.visit(
            window, self._plan.window_indices(window).index(shard),
            lambda path: _read_once(path, self._format, indices))
      else:
        try:
          records = files[shard].read(indices)
        finally:
          self._done(window)
      for row, record in zip(rows, records):
        out[row] = record
    return out

  @staticmethod
  def _by_shard(positions: np.ndarray):
    """(window, shard, rows of `positions` in it) of each shard `positions` reads."""
    if len(positions) == 1:  # (Grain's one record a call: no numpy grouping, ~45 us)
      shard, _, window = positions[0].tolist()
      return [(window, shard, [0])]
    return [(window, shard,
             np.flatnonzero((positions[:, 0] == shard) & (positions[:, 2] == window)))
            for window, shard in np.unique(positions[:, [2, 0]], axis=0).tolist()]


class _Reads:
  """The positions one process reads in a pass, from those it has read: from the lowest,
  every `stride`-th (the greatest common divisor of their distances: Grain's n workers
  each read every n-th position)."""

  def __init__(self):
    self._first: int | None = None
    self._lowest: int | None = None
    self._stride = 0

  def __bool__(self) -> bool:
    return self._first is not None

  def add(self, position: int) -> None:
    if self._first is None:
      self._first = self._lowest = position
    self._lowest = min(self._lowest, position)
    self._stride = math.gcd(self._stride, position - self._first)

  def count(self, start: int, end: int) -> int:
    """How many of the positions in [start, end) are read."""
    if self._first is None:
      return 0
    start = max(start, self._lowest)
    stride = self._stride or 1  # (one position read: every one after it, until known)
    first = start + (self._first - start) % stride
    return 0 if first >= end else (end - 1 - first) // stride + 1


def load(dataset: str, split: str, data_dir: str, *, shuffle: bool = False,
         seed: int | None = None, num_epochs: int | None = 1, cache_dir=None, cache_limit=None,
         input_context=None, decoders=None) -> tf.data.Dataset:
  """Plain examples, as `tfds.load(dataset, split=split, data_dir=...)` gives them, of a
  version published at bucket `data_dir`, streamed. `decoders`: TFDS's (e.g.
  `{"image": tfds.decode.SkipDecoding()}`); `shuffle`: the streaming order by `seed`."""
  source = sources.open_source(dataset, data_dir, cache_dir=cache_dir, cache_limit=cache_limit)
  features = source.builder.info.features
  ds = records(source, split, shuffle=shuffle, seed=seed, num_epochs=num_epochs,
               input_context=input_context, deterministic=True)
  return ds.map(lambda record: features.deserialize_example(record, decoders=decoders),
                num_parallel_calls=tf.data.AUTOTUNE)


class PositionSource:
  """Records of a streamed split by position in the streaming order (epoch after epoch),
  for Grain: a sequential sampler over it reads the windowed order, and Grain's iterator
  state (the last position) resumes it exactly. Pickled to Grain's worker processes, where
  each opens the same shard cache (shared through its file locks); nothing is downloaded
  before the first read (Grain's main process reads nothing when it has workers).

  `readers`: the processes that read it at once, Grain's `worker_count` (each pins its own
  windows: they are sized so that all of them fit in `cache_limit`, and a limit too small
  for them is refused at once rather than leaving the workers waiting for each other's
  room)."""

  def __init__(self, url: str, spec: str, split: str, *, shuffle: bool, seed: int,
               num_epochs: int | None, shard_index: int = 0, shard_count: int = 1,
               cache_dir=None, cache_limit=None, window_shards: int = DEFAULT_WINDOW_SHARDS,
               readers: int = 1):
    self._args = dict(locals())
    del self._args["self"]
    self._open()

  def _open(self):
    args = self._args
    source = sources.open_source(args["spec"], args["url"], cache_dir=args["cache_dir"],
                                 cache_limit=args["cache_limit"])
    # Grain's reading threads straddle a window's end: the window before stays pinned
    # (and the windows are sized so that both and the next fit in the limit).
    held, readers = _GRAIN_HELD, max(1, args["readers"])
    self.plan = plan_for(source, args["split"], shuffle=args["shuffle"], seed=args["seed"],
                         shard_index=args["shard_index"], shard_count=args["shard_count"],
                         window_shards=args["window_shards"], held=held, readers=readers)
    self.reader = PositionReader(
        source, self.plan, source.reader(self.plan.window,
                                         _num_windows(self.plan, args["num_epochs"]), held,
                                         readers),
        held)
    self._epoch_rows = (None, None)

  def __getstate__(self):
    return self._args

  def __setstate__(self, args):
    self._args = args
    self._open()

  def __repr__(self) -> str:  # Grain checks a restored state against it
    args = ", ".join(f"{k}={v!r}" for k, v in sorted(self._args.items()))
    return f"PositionSource({args})"

  def __len__(self) -> int:
    epochs = self._args["num_epochs"]
    return self.plan.records_per_epoch * (epochs if epochs is not None else 10**9)

  def __getitem__(self, position: int) -> bytes:
    epoch, within = divmod(int(position), self.plan.records_per_epoch)
    cached_epoch, rows = self._epoch_rows
    if cached_epoch != epoch:
      rows = self.plan.positions(epoch)
      self._epoch_rows = (epoch, rows)   # one assignment: threads see a consistent pair
    return self.reader.read(rows[within:within + 1], at=int(position))[0]
