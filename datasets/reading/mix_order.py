"""Which source each position of a mixed read comes from, as pure functions.

A mix of K sources reads, at each reader's local position j (0, 1, 2, ...), the next
record of source `Schedule.at(j)`'s own read order (`order`: the reader's shards of that
source, in windows, a new seeded order each of the source's epochs). The schedule is
periodic: proportions p_k (exact fractions) become whole counts a_k over a period
C = sum(a_k) (the least common denominator when it is at most `MAX_PERIOD`, else
`MAX_PERIOD` slots apportioned by largest remainders, so each p_k is off by < 1/C), and
slot t of the period goes to the source furthest behind its share: argmax over k of
(t + 1) * a_k - C * c_k(t), ties to the lowest k (c_k(t): slots of k before t). So

* the source and the source's record rank at j are functions of (proportions, j) alone
  (`at`), the same in every process, worker and run;
* over every prefix, |c_k(n) - n * p_k| <= `discrepancy` (computed exactly over one period:
  the schedule repeats), and so any window of L consecutive positions of a reader holds
  L * p_k +- 2 * discrepancy records of source k. A job of R readers (global position
  i read by reader i % R at j = i // R) holds L * p_k +- 2 * R * discrepancy in any L.

`MixedPosition` is where a mixed job is (its readers' j and the sources' resume points).
Nothing here reads a file or looks at a clock.
"""

import dataclasses
import fractions
import functools
import math

import numpy as np

from imagesets.reading import order as order_lib

MAX_PERIOD = 1 << 16
MAX_SOURCES = 256


def proportions(weights) -> tuple[fractions.Fraction, ...]:
  """The proportions of `weights` (positive, finite), as exact fractions summing to 1."""
  weights = list(weights)
  if not 1 <= len(weights) <= MAX_SOURCES:
    raise ValueError(f"a mix takes 1 to {MAX_SOURCES} sources, not {len(weights)}")
  exact = []
  for weight in weights:
    if isinstance(weight, bool) or not isinstance(weight, (int, float, fractions.Fraction)):
      raise ValueError(f"a weight is a positive number, not {weight!r}")
    if not (math.isfinite(weight) and weight > 0):
      raise ValueError(f"a weight is a positive number, not {weight!r}")
    # (0.1 means 1/10, not the binary fraction nearest it)
    exact.append(fractions.Fraction(weight).limit_denominator(10**9)
                 if isinstance(weight, float) else fractions.Fraction(weight))
  total = sum(exact)
  return tuple(w / total for w in exact)


def whole_counts(shares) -> tuple[int, ...]:
  """a_k: the slots of each source in one period (see the module docstring)."""
  period = functools.reduce(math.lcm, (p.denominator for p in shares), 1)
  if period <= MAX_PERIOD:
    return tuple(int(p * period) for p in shares)
  ideal = [p * MAX_PERIOD for p in shares]
  counts = [math.floor(x) for x in ideal]
  left = MAX_PERIOD - sum(counts)
  for k in sorted(range(len(shares)), key=lambda k: (counts[k] - ideal[k], k))[:left]:
    counts[k] += 1
  small = [k for k, count in enumerate(counts) if count == 0]
  if small:
    raise ValueError(f"source {small[0]}'s weight is below 1/{MAX_PERIOD} of the total: "
                     "give it a larger weight, or leave it out")
  return tuple(counts)


@dataclasses.dataclass(frozen=True)
class Schedule:
  """The periodic schedule of slot counts `counts` (see the module docstring)."""

  counts: tuple[int, ...]

  @functools.cached_property
  def period(self) -> int:
    return sum(self.counts)

  @functools.cached_property
  def _slots(self) -> tuple[np.ndarray, np.ndarray, float]:
    """(source of each slot of the period, its rank among that source's slots,
    discrepancy)."""
    a = np.array(self.counts, np.int64)
    period = self.period
    seen = np.zeros(len(a), np.int64)
    sources = np.empty(period, np.int16)
    ranks = np.empty(period, np.int64)
    worst = 0
    for t in range(period):
      k = int(np.argmax((t + 1) * a - period * seen))
      sources[t], ranks[t] = k, seen[k]
      seen[k] += 1
      worst = max(worst, int(np.abs(period * seen - (t + 1) * a).max()))
    assert seen.tolist() == list(self.counts)   # (each source's share, once a period)
    return sources, ranks, worst / period

  @property
  def discrepancy(self) -> float:
    """max over prefixes n and sources k of |c_k(n) - n * p_k| (< 1 for every schedule
    the tests build)."""
    return self._slots[2]

  def at(self, j) -> tuple[np.ndarray, np.ndarray]:
    """(source, rank) of each position `j` (int64 array): rank is how many records of that
    source the reader read before."""
    j = np.asarray(j, np.int64)
    sources, ranks, _ = self._slots
    cycles, slot = np.divmod(j, self.period)
    source = sources[slot].astype(np.int64)
    return source, cycles * np.asarray(self.counts, np.int64)[source] + ranks[slot]

  def one(self, j: int) -> tuple[int, int]:
    """`at` of one position, in Python ints (a Grain worker asks one at a time)."""
    sources, ranks, _ = self._slots
    cycles, slot = divmod(int(j), self.period)
    k = int(sources[slot])
    return k, cycles * self.counts[k] + int(ranks[slot])

  def before(self, j: int) -> list[int]:
    """c_k(j): how many records of each source a reader reads at positions [0, j)."""
    cycles, slot = divmod(int(j), self.period)
    head = np.bincount(self._slots[0][:slot].astype(np.int64), minlength=len(self.counts))
    return [cycles * a + int(h) for a, h in zip(self.counts, head)]


@functools.lru_cache(maxsize=16)
def schedule(counts: tuple[int, ...]) -> Schedule:
  """The `Schedule` of `counts`, built once a process."""
  return Schedule(counts)


class MixedPositionError(order_lib.PositionError):
  """A saved mixed position that does not belong to this mix."""


@dataclasses.dataclass(frozen=True)
class MixedPosition:
  """Where a mixed job is: reader r of `readers` has read positions [0, at[r]) of its run;
  the run's sources were resumed from `sources[k]` (an `order.Position`, or None: from
  their start) with windows of `windows[k]` shards; `done` examples were read in the runs
  before (for `num_epochs`); the run's examples are counted from `first_index` on (position
  j of reader r is example first_index + j * readers + r: each example of the job its own
  count, which seeds its augmentation); `fingerprint` names the mix."""

  readers: int
  at: tuple[int, ...]
  windows: tuple[int, ...]
  sources: tuple["order_lib.Position | None", ...]
  done: int
  fingerprint: str
  first_index: int = 0

  def to_json(self) -> dict:
    return {"mix": self.fingerprint, "readers": self.readers, "at": list(self.at),
            "windows": list(self.windows), "done": self.done, "first_index": self.first_index,
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
    try:
      readers, at, windows = data["readers"], list(data["at"]), list(data["windows"])
      done, fingerprint, saved = data["done"], data["mix"], list(data["sources"])
      first_index = data.get("first_index", 0)
    except (KeyError, TypeError) as error:
      raise MixedPositionError(f"not a saved mixed read position (no {error})") from None
    numbers = [readers, done, first_index, *at, *windows]
    if not all(type(n) is int for n in numbers) or not isinstance(fingerprint, str):
      raise MixedPositionError("a saved mixed read position holds something other than whole "
                               "numbers: it was edited or damaged")
    if not (1 <= readers <= order_lib.MAX_READERS and len(at) == readers
            and 1 <= len(windows) == len(saved) <= MAX_SOURCES and min(windows) >= 1
            and min(at) >= 0 and 0 <= done <= order_lib.MAX_PASS and max(at) <= order_lib.MAX_PASS
            and 0 <= first_index <= order_lib.MAX_PASS * order_lib.MAX_READERS):
      raise MixedPositionError(f"a saved mixed read position with {readers} readers and "
                               f"{len(saved)} sources is out of bounds: it was edited or damaged")
    return cls(readers, tuple(at), tuple(windows),
               tuple(None if p is None else order_lib.Position.from_json(p) for p in saved),
               done, fingerprint, first_index)
