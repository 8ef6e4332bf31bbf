"""mix_order: the schedule of a mix is exact over every window (the bound it states), a pure
function of the weights and the position, and saved positions are checked."""

import fractions
import random

import numpy as np
import pytest

from imagesets.reading import mix_order
from imagesets.reading import order as order_lib


def schedule_of(weights) -> mix_order.Schedule:
  return mix_order.Schedule(mix_order.whole_counts(mix_order.proportions(weights)))


def test_weights_become_exact_fractions_and_whole_counts():
  assert mix_order.proportions([1, 2, 3]) == tuple(fractions.Fraction(k, 6) for k in (1, 2, 3))
  assert mix_order.whole_counts(mix_order.proportions([0.7, 0.2, 0.1])) == (7, 2, 1)
  assert mix_order.whole_counts(mix_order.proportions([5000, 3000])) == (5, 3)
  # A period past MAX_PERIOD is apportioned: each share off by less than one slot.
  weights = [1 / 3, 1 / 7, 1 / 65537]
  counts = mix_order.whole_counts(mix_order.proportions(weights))
  assert sum(counts) == mix_order.MAX_PERIOD
  for share, count in zip(mix_order.proportions(weights), counts):
    assert abs(count - share * mix_order.MAX_PERIOD) < 1
  for bad in ([], [1, 0], [1, -2], [1, float("nan")], [1, float("inf")], ["1"], [True]):
    with pytest.raises(ValueError):
      mix_order.proportions(bad)
  with pytest.raises(ValueError, match="below 1/65536"):
    mix_order.whole_counts(mix_order.proportions([1, 1e-7, 1 / 3]))


def brute_force(counts, n):
  """The schedule's definition, step by step: the source furthest behind its share."""
  period, seen, out = sum(counts), [0] * len(counts), []
  for t in range(n):
    deficits = [(t % period + 1) * a - period * (s - (t // period) * a)
                for a, s in zip(counts, seen)]
    k = deficits.index(max(deficits))
    out.append((k, seen[k]))
    seen[k] += 1
  return out


def test_the_source_and_rank_at_a_position_are_the_definition_anywhere():
  schedule = schedule_of([3, 1, 2])
  expected = brute_force(schedule.counts, 40)
  sources, ranks = schedule.at(np.arange(40))
  assert list(zip(sources.tolist(), ranks.tolist())) == expected
  # Any position alone (far past the first period) gives what the whole sequence gives.
  far = np.array([10**12 + 7, 5, 10**9])
  for j, (k, rank) in zip(far.tolist(), zip(*schedule.at(far))):
    before = schedule.before(j)
    assert rank == before[k]
    assert schedule.before(j + 1)[k] == before[k] + 1


def test_every_window_holds_its_share_within_the_stated_bound():
  rng = random.Random(0)
  for _ in range(60):
    weights = [rng.randint(1, 40) for _ in range(rng.randint(1, 8))]
    schedule = schedule_of(weights)
    assert schedule.discrepancy < 1
    shares = [c / schedule.period for c in schedule.counts]
    sources, _ = schedule.at(np.arange(3 * schedule.period + 17))
    prefix = np.stack([np.concatenate([[0], np.cumsum(sources == k)])
                       for k in range(len(weights))])
    for _ in range(40):   # windows of any length, anywhere (across periods too)
      start = rng.randrange(len(sources))
      length = rng.randrange(1, len(sources) - start + 1)
      held = prefix[:, start + length] - prefix[:, start]
      for k, share in enumerate(shares):
        assert abs(held[k] - length * share) <= 2 * schedule.discrepancy + 1e-9


def test_a_job_of_several_readers_holds_its_share_within_r_times_the_bound():
  schedule, readers = schedule_of([1, 2, 4]), 3
  # Global position i is reader i % R's position i // R.
  sources = schedule.at(np.arange(400) // readers)[0]
  for start in range(0, 300, 7):
    for length in (10, 33, 100):
      held = np.bincount(sources[start:start + length], minlength=3)
      for k, count in enumerate(schedule.counts):
        assert abs(held[k] - length * count / 7) <= 2 * readers * schedule.discrepancy


def test_a_saved_mixed_position_is_checked_as_untrusted_input():
  good = {"mix": "abc", "readers": 2, "at": [3, 4], "windows": [4, 4], "done": 0,
          "first_index": 9, "sources": [None, None]}
  assert mix_order.MixedPosition.from_json(good).to_json() == good
  for bad in (None, [], {"readers": 2}, {**good, "at": [3]}, {**good, "at": [3, -1]},
              {**good, "readers": 0, "at": []}, {**good, "at": [3, "4"]},
              {**good, "windows": [4]}, {**good, "windows": [0, 4]}, {**good, "done": -1}, {**good, "first_index": -1},
              {**good, "sources": [None, {"readers": 1}]}, {**good, "at": [3, 2**60]}):
    with pytest.raises(order_lib.PositionError):   # (MixedPositionError is one)
      mix_order.MixedPosition.from_json(bad)
