"""The read order: which (shard, record) each reader reads, as pure functions.

Nothing here reads a file, takes a lock or looks at a clock: given a split's shard slices,
the seed, the epoch and the reader's place, the sequence is a function of them alone (as
MosaicML `streaming`'s partition and shuffle are), so every process and worker of a job
computes the same order, and a saved position means the same records wherever it is read.

* **Readers.** A pass (an epoch, or what is left of one after a resume) deals whole shards
  to `readers` readers: the shards that still hold records of the pass, in a seeded order
  per epoch, the i-th to reader i % readers (unshuffled: stored order, as TFDS's
  `ReadConfig(input_context)` deals files). Every record of a pass is read by exactly one
  reader; no two readers read one shard in a pass.
* **Windows.** A reader reads its shards `window_shards` at a time. Within a window the
  records are mixed: "shuffle" permutes the window's records (seeded); "interleave" takes
  one record of each shard in turn, each shard in stored order (what TensorFlow's C++
  `TFRecordDataset`s interleaved give). Unshuffled, shards are read one after another.
  How many records a reader reads of each shard, and so of each window, is known up front:
  a reader holds a window until its count of reads is done, not for a time.
* **Position.** A job's place is, for each reader, the pass it is in and how many of that
  pass's records it has read (`Position`). A job resumed from a position with another
  number of readers first reads what is left of the unfinished epochs (each a pass of its
  own, dealt to the new readers: only shards that still hold records, so nothing is
  downloaded that is not read), then full epochs; every record of an epoch is read exactly
  once however often the job was stopped and resumed on however many readers.
"""

import bisect
import dataclasses
import functools
import hashlib
import json
import threading

import numpy as np

MIXES = ("shuffle", "interleave")


def derived_seed(seed: int, *salts: int) -> int:
  """An independent stream's seed, derived from the user's `seed` and `salts`. A negative
  seed is taken modulo 2**64, as Grain takes it (numpy's streams take none)."""
  seed = int(seed) % 2**64 if seed < 0 else int(seed)
  return int(np.random.SeedSequence([seed, *salts]).generate_state(1, np.uint32)[0])


@dataclasses.dataclass(frozen=True)
class ShardSlice:
  """Records [skip, skip + take) of shard file `name` (a split slice such as train[:10%]
  reads part of a shard)."""

  name: str
  skip: int
  take: int


@dataclasses.dataclass(frozen=True)
class Order:
  """The order of a split's records for one seed: see the module docstring."""

  shards: tuple[ShardSlice, ...]
  seed: int = 0
  shuffle: bool = False
  mix: str = "shuffle"

  def __post_init__(self):
    if self.mix not in MIXES:
      raise ValueError(f"mix must be one of {MIXES}, not {self.mix!r}")
    object.__setattr__(self, "shards", tuple(self.shards))
    object.__setattr__(self, "seed", int(self.seed) % 2**63)   # (numpy seeds are >= 0)

  @property
  def records_per_epoch(self) -> int:
    return sum(shard.take for shard in self.shards)

  @functools.cached_property
  def fingerprint(self) -> str:
    """Names the order a `Position` was counted in (a position read with another order
    would skip records it never read)."""
    described = json.dumps([[s.name, s.skip, s.take] for s in self.shards]
                           + [self.seed, self.shuffle, self.mix])
    return hashlib.sha256(described.encode()).hexdigest()[:16]

  def full_pool(self) -> tuple[np.ndarray, ...]:
    return tuple(np.arange(s.skip, s.skip + s.take, dtype=np.int64) for s in self.shards)

  def shard_order(self, epoch: int, pool, level: int) -> np.ndarray:
    """Indices of the shards holding records of `pool`, in the order they are dealt."""
    held = np.array([i for i, records in enumerate(pool) if len(records)], np.int64)
    if not self.shuffle:
      return held
    return np.random.default_rng([self.seed, epoch, level]).permutation(held)


@dataclasses.dataclass(frozen=True)
class ReaderPass:
  """What one reader reads in one pass: `rows` int64 [n, 2] of (shard index, record index)
  in read order; window w is rows[window_ends[w - 1]:window_ends[w]] of shards windows[w]."""

  windows: tuple[tuple[int, ...], ...]
  rows: np.ndarray
  window_ends: np.ndarray

  def __len__(self) -> int:
    return len(self.rows)

  def reads_of(self, shard: int) -> int:
    """How many records of `shard` this reader reads in the pass."""
    return int(np.count_nonzero(self.rows[:, 0] == shard))

  def window_of(self, index: int) -> int:
    """The window of the pass's `index`-th record."""
    return int(np.searchsorted(self.window_ends, index, side="right"))


def _mixed(order: Order, pool, window: tuple[int, ...], rng_key) -> np.ndarray:
  parts = [np.stack([np.full(len(pool[s]), s, np.int64), pool[s]], 1) for s in window]
  rows = np.concatenate(parts) if parts else np.zeros([0, 2], np.int64)
  if not order.shuffle:
    return rows
  if order.mix == "shuffle":
    return np.random.default_rng(rng_key).permutation(rows)
  # interleave: the k-th record of every shard, then the (k+1)-th ... (stable: shard order)
  turn = np.concatenate([np.arange(len(pool[s])) for s in window])
  return rows[np.argsort(turn, kind="stable")]


def reader_pass(order: Order, epoch: int, pool, level: int, reader: int, readers: int,
                window_shards: int) -> ReaderPass:
  """Reader `reader` of `readers`' part of the pass over `pool` (per shard, the record
  indices still to read in `epoch`); `level` tells passes over a resumed job's leftovers
  from full epochs (0) apart."""
  if not 0 <= reader < readers:
    raise ValueError(f"reader {reader} is not one of {readers} readers")
  if window_shards < 1:
    raise ValueError(f"window_shards must be at least 1, not {window_shards}")
  mine = order.shard_order(epoch, pool, level)[reader::readers].tolist()
  windows = tuple(tuple(mine[i:i + window_shards]) for i in range(0, len(mine), window_shards))
  parts = [_mixed(order, pool, window, [order.seed, epoch, level, readers, reader, w])
           for w, window in enumerate(windows)]
  rows = np.concatenate(parts) if parts else np.zeros([0, 2], np.int64)
  return ReaderPass(windows, rows, np.cumsum([len(p) for p in parts], dtype=np.int64))


class PositionError(ValueError):
  """A saved position that does not belong to this order (another seed, split or build)."""


@dataclasses.dataclass(frozen=True)
class Position:
  """Where a job is: reader r of `readers` is in pass at[r][0] of its run, having read
  at[r][1] of that pass's records. A run's passes are the leftovers of `after` (the
  position it was resumed from; None: a fresh run), then full epochs. `window_shards` and
  `fingerprint` are the run's (replaying a position needs the windows it was counted in)."""

  readers: int
  at: tuple[tuple[int, int], ...]
  window_shards: int
  fingerprint: str
  after: "Position | None" = None

  def to_json(self) -> dict:
    return {"readers": self.readers, "at": [list(a) for a in self.at],
            "window_shards": self.window_shards, "fingerprint": self.fingerprint,
            "after": None if self.after is None else self.after.to_json()}

  @classmethod
  def from_json(cls, data, depth: int = 0) -> "Position":
    """A saved position (untrusted: every field is checked, and its size bounded)."""
    if not isinstance(data, dict):
      raise PositionError(f"not a saved read position (a {type(data).__name__}): give what "
                          "`position()` returned")
    try:
      readers, window, fingerprint = data["readers"], data["window_shards"], data["fingerprint"]
      at = [tuple(place) for place in data["at"]]
      after = data.get("after")
    except (KeyError, TypeError) as error:
      raise PositionError(f"not a saved read position (no {error}): give what "
                          "`position()` returned") from None
    numbers = [readers, window, *(n for place in at for n in place)]
    if not all(type(n) is int for n in numbers) or not isinstance(fingerprint, str):
      raise PositionError("a saved read position holds something other than whole numbers: "
                          "it was edited or damaged")
    if not (1 <= readers <= MAX_READERS and len(at) == readers and window >= 1
            and all(len(place) == 2 and min(place) >= 0 for place in at)):
      raise PositionError(f"a saved read position with {readers} readers has {len(at)} "
                          f"places {at[:8]}: it was edited or damaged")
    passes = [p for p, _ in at]
    if max(passes) - min(passes) > MAX_PASS_SPREAD or max(passes) > MAX_PASS:
      raise PositionError(f"a saved read position has readers in passes {min(passes)} to "
                          f"{max(passes)}: it was edited or damaged")
    if after is not None and depth >= MAX_RESUMES:
      raise PositionError(f"a saved read position resumed more than {MAX_RESUMES} times in "
                          "one epoch: it was edited or damaged")
    return cls(readers, tuple(at), window, fingerprint,
               None if after is None else cls.from_json(after, depth + 1))


# Bounds on a saved position (untrusted input), far beyond any real job's.
MAX_READERS = 1 << 16
MAX_PASS = 1 << 40
MAX_PASS_SPREAD = 1000   # readers of a job are a pass or two apart
MAX_RESUMES = 64         # resumes of one unfinished epoch


class Run:
  """The passes of a job of `readers` readers over `order`, resumed from `after` (None: a
  fresh run from epoch `first_epoch`), up to epoch `num_epochs` (None: no end). Its passes
  are the leftovers of `after`'s unfinished epochs before `num_epochs`, then the full
  epochs from `first_full` to `num_epochs`."""

  def __init__(self, order: Order, readers: int, window_shards: int, *,
               after: Position | None = None, num_epochs: int | None = None,
               first_epoch: int = 0):
    if readers < 1:
      raise ValueError(f"readers must be at least 1, not {readers}")
    self.order, self.readers, self.window_shards = order, readers, window_shards
    self.after, self.num_epochs = after, num_epochs
    self.level = 0 if after is None else _depth(after) + 1
    # (readers of several threads share a run: its caches change under this lock)
    self._lock = threading.RLock()
    self._passes: dict[tuple[int, int], ReaderPass] = {}   # a few recent ones
    self._full_epoch = None   # (pass_length's: each shard's records, the full pool)
    self._ends: dict[int, list[int]] = {}   # reader -> its passes' cumulative lengths so far
    if after is None:
      self.leftovers, self.first_full = [], first_epoch
    else:
      if after.fingerprint != order.fingerprint:
        raise PositionError(
            "this read position was saved by a job reading another order (another split, "
            "seed, shuffle or build of the dataset): resume with the arguments it was saved "
            "with, or start without it")
      self.leftovers, self.first_full = _leftovers(order, after)
    # Leftovers of epochs from num_epochs on stay unread (a position keeps them).
    self.reachable = sum(1 for e, _ in self.leftovers if num_epochs is None or e < num_epochs)

  @property
  def num_passes(self) -> int | None:
    if self.num_epochs is None:
      return None
    if self.reachable < len(self.leftovers):
      return self.reachable
    return self.reachable + max(0, self.num_epochs - self.first_full)

  def epoch(self, q: int) -> int:
    return self.leftovers[q][0] if q < len(self.leftovers) else (
        self.first_full + q - len(self.leftovers))

  def pool(self, q: int):
    return self.leftovers[q][1] if q < len(self.leftovers) else self.order.full_pool()

  def reader_pass(self, q: int, reader: int) -> ReaderPass:
    key = (q, reader)
    with self._lock:
      found = self._passes.get(key)
      if found is None:
        level = self.level if q < len(self.leftovers) else 0
        found = reader_pass(self.order, self.epoch(q), self.pool(q), level, reader,
                            self.readers, self.window_shards)
        if len(self._passes) >= 4 * self.readers + 8:
          self._passes.pop(next(iter(self._passes)))
        self._passes[key] = found
      return found

  def length(self, reader: int) -> int:
    """How many records the reader reads in the run (a run with an end)."""
    return self._pass_ends(reader, None)[-1] if self.num_passes else 0

  def place(self, reader: int, n: int) -> tuple[int, int]:
    """(pass, index) of the reader's n-th record of the run (from 0); for n at its end,
    (its last pass, that pass's length): (0, 0) for a run of no passes."""
    ends = self._pass_ends(reader, n)
    q = bisect.bisect_right(ends, n)
    if q < len(ends):
      return q, n - (ends[q - 1] if q else 0)
    if n > (ends[-1] if ends else 0):
      raise ValueError(f"reader {reader} reads {ends[-1] if ends else 0} records in this "
                       f"run, not {n}")
    return (len(ends) - 1, ends[-1] - (ends[-2] if len(ends) > 1 else 0)) if ends else (0, 0)

  def pass_length(self, q: int, reader: int) -> int:
    """len(reader_pass(q, reader)); for a full epoch from its shards alone (a resumed
    job's place is found across every epoch before it)."""
    if q < len(self.leftovers):
      return len(self.reader_pass(q, reader))
    with self._lock:   # (one attribute, set whole: readers of other threads see it or not)
      if self._full_epoch is None:
        self._full_epoch = (np.array([s.take for s in self.order.shards], np.int64),
                            self.order.full_pool())
      takes, full = self._full_epoch
    dealt = self.order.shard_order(self.epoch(q), full, 0)[reader::self.readers]
    return int(takes[dealt].sum())

  def _pass_ends(self, reader: int, n: int | None) -> list[int]:
    """The cumulative lengths of the reader's passes, at least until one passes n (None:
    all of them)."""
    if self.num_passes is None and reader >= len(self.order.shards):
      # (its full epochs deal it no shard: its records end with the leftovers)
      raise PositionError(f"reader {reader} of {self.readers} reads no shard of a split of "
                          f"{len(self.order.shards)}: a position saved by more readers than "
                          "shards was edited or damaged")
    with self._lock:
      ends = self._ends.setdefault(reader, [])
      while ((n is None or not ends or ends[-1] <= n)
             and (self.num_passes is None or len(ends) < self.num_passes)):
        ends.append((ends[-1] if ends else 0) + self.pass_length(len(ends), reader))
      return list(ends)

  def position(self, at) -> Position:
    """The position of this run's readers at `at` [(pass, records read in it)]."""
    at = tuple((int(p), int(c)) for p, c in at)
    if len(at) != self.readers:
      raise ValueError(f"{len(at)} places for {self.readers} readers")
    after = self.after
    if after is not None and all(p >= len(self.leftovers) for p, _ in at):
      # Every reader is in full epochs: the leftovers no longer matter.
      at = tuple((self.epoch(p), c) for p, c in at)
      after = None
    elif after is None and self.first_full:
      at = tuple((self.epoch(p), c) for p, c in at)
    return Position(self.readers, at, self.window_shards, self.order.fingerprint, after)


def _depth(position: Position) -> int:
  return 0 if position.after is None else 1 + _depth(position.after)


def _leftovers(order: Order, position: Position):
  """[(epoch, pool)] of the records not read at `position`, epoch by epoch, and the first
  epoch no reader has begun."""
  run = Run(order, position.readers, position.window_shards, after=position.after)
  reached = max(p for p, _ in position.at)
  passes = max(reached + 1, len(run.leftovers))
  leftovers = []
  # (every reader read the whole of the passes before the lowest one a reader is in)
  for q in range(min(p for p, _ in position.at), passes):
    pool = [records.copy() for records in run.pool(q)]
    for reader, (p, count) in enumerate(position.at):
      if p < q:
        continue
      plan = run.reader_pass(q, reader)
      if p == q and count > len(plan):
        raise PositionError(f"a saved read position has reader {reader} at record {count} of "
                            f"pass {q}, which holds {len(plan)}: it was saved by another "
                            "build or order")
      done = plan.rows if p > q else plan.rows[:count]
      for shard in np.unique(done[:, 0]).tolist():
        pool[shard] = np.setdiff1d(pool[shard], done[done[:, 0] == shard, 1],
                                   assume_unique=True)
    if any(len(records) for records in pool):
      leftovers.append((run.epoch(q), tuple(pool)))
  return leftovers, run.epoch(passes - 1) + 1
