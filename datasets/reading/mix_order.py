"""Which part each position of a mixed read comes from, as pure functions.

A mix of K parts reads each part in its own read order (`order.Run`: each reader its own
shards of the part, in windows, a new seeded order each of the part's epochs). A **mixed
epoch** reads exactly `per_epoch[k]` records of part k (`repeat` times its records,
`choose` records, or its weight's whole share), on any number of readers and across
resumes:

* **The part's stream.** Part k's records in the job, epoch after epoch, make one stream;
  mixed epoch e reads its records [e * per_epoch[k], (e + 1) * per_epoch[k]). So with
  `repeat=1` a mixed epoch reads every record of the part exactly once, with `repeat=2`
  exactly twice, and `choose=N` the part's next N records.
* **Readers' shares.** A pass of a part deals whole shards to the readers (`order`):
  reader r reads L_r of the pass's T records. The first g records of the pass's stream are
  reader r's `merged_counts(L, g)[r]`: the even merge below, so each reader's share of any
  prefix is proportional to its shards within a record or so. Reader r's quota of part k
  in mixed epoch e is its share of the stream's records of that epoch; a reader reads
  exactly its own shards of each pass of each part, so the readers of a job together read
  each part's stream exactly.
* **A reader's epoch.** Reader r's positions in a mixed epoch are its quotas of the parts
  (n_k: sum N), interleaved by the even merge: record m of part k has the time
  (2m + 1) / (2 n_k), and records are read in the order of (time, k). Over any prefix of g
  positions part k holds g * n_k / N +- (1 + K * n_k / N) / 2 records (see
  `merged_counts`), and so any window of L positions holds L * n_k / N +- (1 + K * n_k / N).
* **Resume.** A job's place is `MixedPosition`: each reader's position in its run, the
  run's unfinished mixed epochs (the quotas left of each, `passes`), and each part's
  `order.Position`. With the same readers and windows a run continues record for record;
  on another number of readers each part resumes from its own position and the unfinished
  epochs' quotas are dealt to the new readers: every mixed epoch still reads exactly its
  counts.

Nothing here reads a file or looks at a clock.
"""

import bisect
import dataclasses
import fractions
import math
import numbers
import threading

import numpy as np

from imagesets.reading import order as order_lib

MAX_SOURCES = 256
MAX_PASSES = 1000   # unfinished mixed epochs a saved position may carry (readers are an epoch or two apart)


def proportions(weights) -> tuple[fractions.Fraction, ...]:
  """The proportions of `weights` (positive, finite), as exact fractions summing to 1."""
  weights = list(weights)
  if not 1 <= len(weights) <= MAX_SOURCES:
    raise ValueError(f"a mix takes 1 to {MAX_SOURCES} sources, not {len(weights)}")
  exact = []
  for weight in weights:
    if isinstance(weight, (bool, np.bool_)) or not isinstance(weight, numbers.Real):
      raise ValueError(f"a weight is a positive number, not {weight!r}")
    if not (math.isfinite(weight) and weight > 0):
      raise ValueError(f"a weight is a positive number, not {weight!r}")
    if isinstance(weight, numbers.Integral):  # (numpy's integers too)
      exact.append(fractions.Fraction(int(weight)))
    elif isinstance(weight, fractions.Fraction):
      exact.append(weight)
    else:
      exact.append(_decimal(float(weight)))
  total = sum(exact)
  return tuple(w / total for w in exact)


def _decimal(weight: float) -> fractions.Fraction:
  """0.1 as 1/10, not the binary fraction nearest it: the fraction of denominator up to
  10**9 nearest `weight`, unless that is off by more than a billionth of it (weights
  under ~1e-9: those are taken as they are, never as 0)."""
  limited = fractions.Fraction(weight).limit_denominator(10**9)
  return limited if abs(limited - fractions.Fraction(weight)) <= weight * 1e-9 else (
      fractions.Fraction(weight))


def apportion(total: int, weights) -> tuple[int, ...]:
  """`total` records split by `weights` in whole counts: each the floor of its exact share,
  the records left to the largest remainders (ties to the lower index)."""
  shares = [p * total for p in proportions(weights)]
  counts = [math.floor(s) for s in shares]
  for k in sorted(range(len(shares)), key=lambda k: (counts[k] - shares[k], k))[
      :total - sum(counts)]:
    counts[k] += 1
  return tuple(counts)


# The even merge's order, exactly: record m of a source of n records has the time
# (2m + 1) / (2n); of two records the one of the smaller time comes first, of equal times
# the one of the lower source. Times are compared by cross-multiplying (no fractions: a
# read looks one up per record).


def _first(counts, taken) -> int:
  """The source of the record that follows `taken` (each source's records so far)."""
  best, best_a, best_n = -1, 0, 1
  for k, (c, n) in enumerate(zip(taken, counts)):
    if c < n and (best < 0 or (2 * c + 1) * best_n < best_a * n):
      best, best_a, best_n = k, 2 * c + 1, n
  if best < 0:
    raise IndexError("past the end of the merge")
  return best


def _last(counts, taken) -> int:
  """The source of the last record of `taken`."""
  best, best_a, best_n = -1, 0, 1
  for k, (c, n) in enumerate(zip(taken, counts)):
    if c and (best < 0 or (2 * c - 1) * best_n >= best_a * n):
      best, best_a, best_n = k, 2 * c - 1, n
  return best


def merged_counts(counts, g: int) -> list[int]:
  """How many records of each source come among the first `g` of the even merge of
  sources of `counts` records (see the module docstring). The g-th record's time tau
  holds tau * n_k -+ 1/2 of each source, so each count is g * n_k / N within
  (1 + K * n_k / N) / 2. Cost: O(K^2) at most (K / 2 steps of O(K))."""
  counts = [int(n) for n in counts]
  total = sum(counts)
  if not 0 <= g <= total:
    raise ValueError(f"{g} records of a merge of {total}")
  if g == total:
    return counts
  # Records of time <= g / N, then the latest taken back or the earliest added: at most
  # K / 2 steps (each source's count is within 1/2 of g * n_k / N).
  taken = [min(n, (2 * g * n + total) // (2 * total)) for n in counts]
  excess = sum(taken) - g
  for _ in range(excess):
    taken[_last(counts, taken)] -= 1
  for _ in range(-excess):
    taken[_first(counts, taken)] += 1
  return taken


def merged_sources(counts, taken, count: int) -> list[int]:
  """The sources of the `count` records that follow `taken` (`merged_counts` of a prefix)
  in the even merge of `counts`."""
  out, taken = [], list(taken)
  for _ in range(count):
    k = _first(counts, taken)   # (IndexError past the merge's end)
    out.append(k)
    taken[k] += 1
  return out


class MixedPositionError(order_lib.PositionError):
  """A saved mixed position that does not belong to this mix."""


@dataclasses.dataclass(frozen=True)
class MixedPosition:
  """Where a mixed job is: reader r of `readers` has read positions [0, at[r]) of its run.
  The run's passes are `passes` (the mixed epochs left unfinished when it was resumed:
  (epoch, records of each part still to read)), then full mixed epochs from `first_full`;
  its parts were resumed from `sources[k]` (an `order.Position`, or None: from their
  start) with windows of `windows[k]` shards. The run's examples are counted from
  `first_index` on (position j of reader r is example first_index + j * readers + r: each
  example of the job its own count, which seeds its augmentation); `fingerprint` names
  the mix."""

  readers: int
  at: tuple[int, ...]
  windows: tuple[int, ...]
  sources: tuple["order_lib.Position | None", ...]
  passes: tuple[tuple[int, tuple[int, ...]], ...]
  first_full: int
  fingerprint: str
  first_index: int = 0

  def to_json(self) -> dict:
    return {"mix": self.fingerprint, "readers": self.readers, "at": list(self.at),
            "windows": list(self.windows), "first_index": self.first_index,
            "passes": [[e, list(q)] for e, q in self.passes], "first_full": self.first_full,
            "sources": [None if p is None else p.to_json() for p in self.sources]}

  def next_index(self) -> int:
    """The first count no example of the position's run has."""
    return self.first_index + self.readers * max(self.at)

  @classmethod
  def from_json(cls, data) -> "MixedPosition":
    """A saved position (untrusted: every field checked, sizes bounded)."""
    if isinstance(data, MixedPosition):
      return data
    if not isinstance(data, dict) or "mix" not in data:
      raise MixedPositionError(
          "not a saved mixed read position: give what `mixing.position()` (or the keras "
          "callback's `saved_start`) returned")
    if "passes" not in data:
      raise MixedPositionError(
          "a mixed read position saved by an older imagesets, whose mixed epochs were not "
          "exact per part: start this epoch again without it")
    try:
      readers, at, windows = data["readers"], list(data["at"]), list(data["windows"])
      fingerprint, saved = data["mix"], list(data["sources"])
      first_index, first_full = data.get("first_index", 0), data["first_full"]
      passes = [(e, list(q)) for e, q in data["passes"]]
    except (KeyError, TypeError, ValueError) as error:
      raise MixedPositionError(f"not a saved mixed read position (no {error})") from None
    numbers = [readers, first_index, first_full, *at, *windows,
               *(n for e, q in passes for n in (e, *q))]
    if not all(type(n) is int for n in numbers) or not isinstance(fingerprint, str):
      raise MixedPositionError("a saved mixed read position holds something other than whole "
                               "numbers: it was edited or damaged")
    epochs = [e for e, _ in passes]
    if not (1 <= readers <= order_lib.MAX_READERS and len(at) == readers
            and 1 <= len(windows) == len(saved) <= MAX_SOURCES and min(windows) >= 1
            and min(at) >= 0 and max(at) <= order_lib.MAX_PASS
            and 0 <= first_index <= order_lib.MAX_PASS * order_lib.MAX_READERS
            and 0 <= first_full <= order_lib.MAX_PASS and len(passes) <= MAX_PASSES
            and all(len(q) == len(saved) and min(q) >= 0 and sum(q) > 0 for _, q in passes)
            and epochs == sorted(set(epochs)) and all(0 <= e < first_full for e in epochs)):
      raise MixedPositionError(f"a saved mixed read position with {readers} readers and "
                               f"{len(saved)} sources is out of bounds: it was edited or damaged")
    return cls(readers, tuple(at), tuple(windows),
               tuple(None if p is None else order_lib.Position.from_json(p) for p in saved),
               tuple((e, tuple(q)) for e, q in passes), first_full, fingerprint, first_index)


class MixedOrder:
  """The mixed order of a job of `readers` readers (see the module docstring): the parts'
  `orders`, each read `per_epoch[k]` records a mixed epoch in windows of `windows[k]`
  shards, from `sources[k]` (an `order.Position` or None); the run's passes are `passes`
  ((epoch, quotas): unfinished mixed epochs of a resumed job) then full mixed epochs from
  `first_full`, up to epoch `num_epochs` (None: no end).

  Bounds (every loop here ends): a part's passes are looked up until its stream passes a
  count G, and each pass holds a record or more: at most G + 1 passes. A reader's mixed
  passes are looked up until its positions pass j; every reader holds a shard, so a
  record, of each full epoch of each part (checked here), and so a part's full epoch
  reaches every reader within ceil(size_k / per_epoch[k]) + 1 mixed epochs: at most
  (j + 1) * min_k(ceil(size_k / per_epoch[k]) + 1) passes past the leftovers."""

  def __init__(self, orders, per_epoch, readers: int, windows, *, sources=None, passes=(),
               first_full: int = 0, num_epochs: int | None = None):
    self.orders, self.per_epoch = tuple(orders), tuple(int(c) for c in per_epoch)
    self.readers, self.windows = readers, tuple(windows)
    self.sources = tuple(sources) if sources is not None else (None,) * len(self.orders)
    for order, size in zip(self.orders, self.per_epoch):
      held = sum(1 for s in order.shards if s.take)
      if held < readers:
        raise order_lib.PositionError(
            f"reader {readers - 1} of {readers} reads no shard of a part of {held}: a "
            "position saved by more readers than shards was edited or damaged")
      if size < 1:
        raise ValueError(f"a part read {size} records a mixed epoch: every part is read")
    for epoch, quotas in passes:   # (a saved position's: untrusted)
      if len(quotas) != len(self.per_epoch) or any(
          not 0 <= q <= c for q, c in zip(quotas, self.per_epoch)):
        raise MixedPositionError(
            f"a saved mixed read position leaves {list(quotas)} records of mixed epoch {epoch} "
            f"to read, more than its {list(self.per_epoch)}: it was edited or damaged")
    self.parts = [order_lib.Run(o, readers, w, after=s)
                  for o, w, s in zip(self.orders, self.windows, self.sources)]
    self.num_epochs, self.first_full = num_epochs, first_full
    self.all_passes = tuple((e, tuple(q)) for e, q in passes)
    # (leftovers of epochs from num_epochs on stay unread: a position keeps them)
    self.passes = tuple(p for p in self.all_passes if num_epochs is None or p[0] < num_epochs)
    self._lock = threading.RLock()
    self._part_ends = [[] for _ in self.orders]      # part k: its passes' cumulative records
    self._part_lengths = [[] for _ in self.orders]   # part k: each pass's records per reader
    self._part_before = [[] for _ in self.orders]    # part k: per reader, records before pass q
    self._bounds = [[0] for _ in self.orders]        # part k: its stream before mixed pass h
    self._starts: dict[tuple[int, int], tuple[int, ...]] = {}
    self._ends: dict[int, list[int]] = {}            # reader: its passes' cumulative positions
    self._cursor: dict[int, tuple | None] = {}   # reader: (j, pass, t, quotas, ranks, taken)

  @property
  def num_passes(self) -> int | None:
    if self.num_epochs is None:
      return None
    if len(self.passes) < len(self.all_passes):
      return len(self.passes)
    return len(self.passes) + max(0, self.num_epochs - self.first_full)

  def epoch(self, h: int) -> int:
    return self.passes[h][0] if h < len(self.passes) else self.first_full + h - len(self.passes)

  def quotas(self, h: int) -> tuple[int, ...]:
    """Each part's records in mixed pass h, all readers together."""
    return self.passes[h][1] if h < len(self.passes) else self.per_epoch

  def _bound(self, k: int, h: int) -> int:
    """Part k's stream records of the run before mixed pass h."""
    bounds = self._bounds[k]
    while len(bounds) <= h:
      bounds.append(bounds[-1] + self.quotas(len(bounds) - 1)[k])
    return bounds[h]

  def _share(self, k: int, reader: int, stream: int) -> int:
    """How many of the first `stream` records of part k's stream in this run are the
    reader's: its shards' records, pass by pass; within a pass, the even merge of the
    readers' records."""
    ends, lengths, before = self._part_ends[k], self._part_lengths[k], self._part_before[k]
    run = self.parts[k]
    while not ends or ends[-1] <= stream:
      q = len(ends)
      dealt = np.array([run.pass_length(q, r) for r in range(self.readers)], np.int64)
      before.append(before[-1] + lengths[-1] if lengths else np.zeros(self.readers, np.int64))
      lengths.append(dealt)
      ends.append((ends[-1] if ends else 0) + int(dealt.sum()))
    q = bisect.bisect_right(ends, stream)
    start = ends[q - 1] if q else 0
    return int(before[q][reader]) + merged_counts(lengths[q], stream - start)[reader]

  def starts(self, h: int, reader: int) -> tuple[int, ...]:
    """The reader's records of each part read before mixed pass h: its ranks in the
    parts' runs."""
    with self._lock:
      key = (h, reader)
      found = self._starts.get(key)
      if found is None:
        found = tuple(self._share(k, reader, self._bound(k, h)) for k in range(len(self.orders)))
        if len(self._starts) >= 64 * self.readers:
          self._starts.pop(next(iter(self._starts)))
        self._starts[key] = found
      return found

  def reader_quotas(self, h: int, reader: int) -> tuple[int, ...]:
    """The reader's records of each part in mixed pass h."""
    return tuple(b - a for a, b in zip(self.starts(h, reader), self.starts(h + 1, reader)))

  def _reader_ends(self, reader: int, j: int | None, most: int | None = None) -> list[int]:
    """The cumulative positions of the reader's mixed passes, at least until one passes j
    (None: all of them; a run with an end). The class docstring bounds the passes; `most`:
    refuse (a saved position) rather than look up more passes than that."""
    with self._lock:
      ends = self._ends.setdefault(reader, [])
      passes = self.num_passes
      while (j is None or not ends or ends[-1] <= j) and (passes is None or len(ends) < passes):
        if most is not None and len(ends) >= most:
          raise _too_far(reader, most - len(self.passes))
        ends.append((ends[-1] if ends else 0) + sum(self.reader_quotas(len(ends), reader)))
      return ends

  def length(self, reader: int) -> int | None:
    """The reader's positions in the run (None: no end)."""
    if self.num_passes is None:
      return None
    ends = self._reader_ends(reader, None)
    return ends[-1] if ends else 0

  def place(self, reader: int, j: int) -> tuple[int, int]:
    """(mixed pass, index in it) of the reader's position j; j at the end of a run with an
    end gives (its number of passes, 0)."""
    ends = self._reader_ends(reader, j)
    h = bisect.bisect_right(ends, j)
    if h == len(ends) and j > (ends[-1] if ends else 0):
      raise IndexError(f"reader {reader} reads {ends[-1] if ends else 0} positions in this "
                       f"run, not {j}")
    return h, j - (ends[h - 1] if h else 0)

  def sources_at(self, reader: int, j0: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(part, rank in the part's run) of the reader's positions [j0, j0 + count)."""
    parts, ranks = [], []
    j = j0
    with self._lock:
      while count:
        cursor = self._cursor.get(reader)
        if cursor is not None and cursor[0] == j:   # (reads come in order: no lookup)
          _, h, t, quotas, first, taken = cursor
          taken = list(taken)
        else:
          h, t = self.place(reader, j)
          quotas, first = self.reader_quotas(h, reader), self.starts(h, reader)
          taken = merged_counts(quotas, t)
        take = min(count, sum(quotas) - t)
        if take <= 0:
          raise IndexError(f"reader {reader} reads {j} positions in this run, not {j0 + count}")
        for k in merged_sources(quotas, taken, take):
          parts.append(k)
          ranks.append(first[k] + taken[k])
          taken[k] += 1
        j, t, count = j + take, t + take, count - take
        self._cursor[reader] = (j, h, t, quotas, first, taken) if t < sum(quotas) else None
    return np.array(parts, np.int64), np.array(ranks, np.int64)

  def consumed(self, reader: int, j: int) -> list[int]:
    """The reader's records of each part at positions [0, j)."""
    h, t = self.place(reader, j)
    first = self.starts(h, reader)
    if h == len(self._reader_ends(reader, j)):   # (the end of a run with an end)
      return list(first)
    return [a + b for a, b in zip(first, merged_counts(self.reader_quotas(h, reader), t))]

  def resumed(self, at) -> dict:
    """The arguments (`sources`, `passes`, `first_full`) of a run of any number of readers
    that goes on from this run's readers at positions `at` (a run without an end): the
    unfinished mixed epochs' quotas left and each part's position, so each mixed epoch
    still reads exactly its counts and each part's stream goes on where it was."""
    assert self.num_epochs is None
    places = [self.place(r, j) for r, j in enumerate(at)]
    passes = []
    first, last = min(h for h, _ in places), max(h for h, _ in places)
    # (leftover passes no reader reached yet go on whole)
    for h in range(first, max(last, len(self.passes) - 1) + 1):
      left = list(self.quotas(h))
      for reader, (reached, t) in enumerate(places):
        if reached >= h:
          quotas = self.reader_quotas(h, reader)
          done = quotas if reached > h else merged_counts(quotas, t)
          left = [a - b for a, b in zip(left, done)]
      if sum(left):
        passes.append((self.epoch(h), tuple(left)))
    consumed = [self.consumed(r, j) for r, j in enumerate(at)]
    sources = tuple(run.position([run.place(r, consumed[r][k]) for r in range(self.readers)])
                    for k, run in enumerate(self.parts))
    return dict(sources=sources, passes=tuple(passes),
                first_full=max(self.first_full, self.epoch(last) + 1))

  def check_reachable(self, at, max_epochs: int) -> None:
    """Refuses, in one line, positions `at` more than `max_epochs` mixed epochs past the
    leftovers (a saved position is untrusted: placing one costs every pass before it)."""
    most = len(self.passes) + max_epochs
    for reader, j in enumerate(at):
      # (a reader's positions of a pass are at most its records: beyond, without a look-up)
      if j >= most * sum(self.per_epoch):
        raise _too_far(reader, max_epochs)
      self._reader_ends(reader, j, most)


def _too_far(reader: int, max_epochs: int) -> MixedPositionError:
  return MixedPositionError(f"a saved mixed read position places reader {reader} more than "
                            f"{max_epochs:,} mixed epochs into its run: it was edited or damaged")
