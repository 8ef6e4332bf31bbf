"""mix_order: the even merge is its definition and holds the bound it states; a mixed order
reads exactly each part's count every mixed epoch, on 1 to 4 readers, resumed at any
point on another count, and its loops end within their stated bounds (calls counted);
saved positions are checked."""

import collections
import fractions
import random

import numpy as np
import pytest

from imagesets.reading import mix_order
from imagesets.reading import order as order_lib


def test_weights_become_exact_fractions_and_whole_counts():
  assert mix_order.proportions([1, 2, 3]) == tuple(fractions.Fraction(k, 6) for k in (1, 2, 3))
  assert mix_order.apportion(100, [0.7, 0.2, 0.1]) == (70, 20, 10)
  assert mix_order.apportion(100, [1, 2]) == (33, 67)
  assert mix_order.apportion(7, [1, 1, 1]) == (3, 2, 2)   # (ties to the lower index)
  for bad in ([], [1, 0], [1, -2], [1, float("nan")], [1, float("inf")], ["1"], [True],
              [np.bool_(True)], [np.float32("nan")]):
    with pytest.raises(ValueError):
      mix_order.proportions(bad)
  # numpy's numbers are numbers; weights under 1e-9 keep their ratio (never 0)
  assert mix_order.proportions([np.int64(1), np.float32(0.5)]) == (
      fractions.Fraction(2, 3), fractions.Fraction(1, 3))
  assert mix_order.apportion(1000, [2.5e-10, 7.5e-10]) == (250, 750)
  assert mix_order.apportion(1000, [1e-12, 1e-12]) == (500, 500)


def brute_merge(counts) -> list[int]:
  """The even merge's definition: record m of source k at (2m + 1) / (2 n_k), ties by k."""
  timed = [(fractions.Fraction(2 * m + 1, 2 * n), k) for k, n in enumerate(counts)
           for m in range(n)]
  return [k for _, k in sorted(timed)]


def test_the_even_merge_is_its_definition_and_holds_its_bound_over_every_window():
  rng = random.Random(0)
  for _ in range(150):
    counts = [rng.randint(0, 40) for _ in range(rng.randint(1, 7))]
    counts[0] += 1
    total, sources = sum(counts), brute_merge(counts)
    prefix = np.stack([np.concatenate([[0], np.cumsum(np.array(sources) == k)])
                       for k in range(len(counts))])
    for g in range(total + 1):
      assert mix_order.merged_counts(counts, g) == prefix[:, g].tolist()
    for g in rng.sample(range(total), min(total, 5)):
      assert mix_order.merged_sources(counts, mix_order.merged_counts(counts, g),
                                      total - g) == sources[g:]
    for _ in range(40):   # any window holds its share within 1 + K * n_k / N
      start = rng.randrange(total)
      length = rng.randrange(1, total - start + 1)
      held = prefix[:, start + length] - prefix[:, start]
      for k, n in enumerate(counts):
        assert abs(held[k] - length * n / total) <= 1 + len(counts) * n / total + 1e-9
  with pytest.raises(ValueError):
    mix_order.merged_counts([3, 4], 8)


def random_orders(rng):
  """1-5 parts of 1-3,000 records in 1-40 shards, their per-epoch counts by weight,
  repeat or choose."""
  orders, sizes = [], []
  for k in range(rng.randint(1, 5)):
    size = rng.randint(1, 3000)
    shards = rng.randint(1, min(40, size))
    cuts = sorted(rng.sample(range(1, size), shards - 1))
    takes = np.diff([0, *cuts, size]).tolist()
    orders.append(order_lib.Order([order_lib.ShardSlice(f"{k}-{i}", 0, t)
                                   for i, t in enumerate(takes)], rng.randrange(99), True))
    sizes.append(size)
  kind = rng.choice(["weight", "repeat", "choose"])
  if kind == "weight":
    per_epoch = mix_order.apportion(rng.randint(len(sizes), 5000),
                                    [rng.uniform(0.5, 4) for _ in sizes])
    per_epoch = [max(1, c) for c in per_epoch]
  elif kind == "repeat":
    per_epoch = [max(1, round(rng.choice([0.5, 1, 1, 1.5, 2]) * s)) for s in sizes]
  else:
    per_epoch = [rng.randint(1, 2 * s) for s in sizes]
  return orders, per_epoch, sizes


def read(mixed, reader, start, end, rng, reads):
  """Reads the reader's positions [start, end) in random chunks into reads[(epoch, part)]
  as (shard, record)."""
  j = start
  while j < end:
    count = min(end - j, rng.randint(1, 90))
    parts, ranks = mixed.sources_at(reader, j, count)
    for i, (k, rank) in enumerate(zip(parts.tolist(), ranks.tolist())):
      q, at = mixed.parts[k].place(reader, rank)
      record = tuple(mixed.parts[k].reader_pass(q, reader).rows[at].tolist())
      reads[(mixed.epoch(mixed.place(reader, j + i)[0]), k)].append(record)
    j += count


def resume(orders, per_epoch, saved, readers, windows, num_epochs):
  """A mixed order of `readers` going on from `saved` (as `mixing.MixedRun` resumes)."""
  saved = mix_order.MixedPosition.from_json(saved.to_json())
  args = dict(sources=saved.sources, passes=saved.passes, first_full=saved.first_full)
  if (readers, windows) == (saved.readers, saved.windows):
    return mix_order.MixedOrder(orders, per_epoch, readers, windows, num_epochs=num_epochs,
                                **args), list(saved.at)
  args = mix_order.MixedOrder(orders, per_epoch, saved.readers, saved.windows,
                              **args).resumed(saved.at)
  return mix_order.MixedOrder(orders, per_epoch, readers, windows, num_epochs=num_epochs,
                              **args), [0] * readers


def assert_each_epoch_reads_its_counts(reads, sizes, per_epoch, num_epochs):
  """Per part per mixed epoch exactly its count; over epochs 0..e each record read
  floor or ceil of (e + 1) * count / size times (the part's stream: every record once
  a part epoch)."""
  assert {e for e, _ in reads} <= set(range(num_epochs))
  for k, (size, count) in enumerate(zip(sizes, per_epoch)):
    seen = collections.Counter()
    for epoch in range(num_epochs):
      assert len(reads[(epoch, k)]) == count, (epoch, k)
      seen.update(reads[(epoch, k)])
      stream = (epoch + 1) * count
      assert len(seen) == min(size, stream)
      assert set(seen.values()) <= {stream // size, -(-stream // size)}


@pytest.mark.parametrize("seed", range(6))
def test_every_mixed_epoch_reads_each_parts_count_resumed_on_any_readers(seed):
  # Stopped and resumed 1 to 3 times, each time at random positions, on a random number of
  # readers and windows (a resumed run resumed again carries its leftover epochs on).
  rng = random.Random(seed)
  for _ in range(10):
    orders, per_epoch, sizes = random_orders(rng)
    most = min(4, *(len(o.shards) for o in orders))
    readers, windows = rng.randint(1, most), tuple(rng.randint(1, 3) for _ in orders)
    num_epochs = rng.randint(1, 3)
    mixed = mix_order.MixedOrder(orders, per_epoch, readers, windows, num_epochs=num_epochs)
    offsets = [0] * readers
    reads = collections.defaultdict(list)
    for _ in range(rng.randint(1, 3)):
      # (stops early as often as late: a run's first leftover epochs are short)
      taken = [offset + int(rng.random() ** 3 * (mixed.length(r) - offset + 1))
               for r, offset in enumerate(offsets)]
      taken = [min(t, mixed.length(r)) for r, t in enumerate(taken)]
      for r, (offset, count) in enumerate(zip(offsets, taken)):
        read(mixed, r, offset, count, rng, reads)
      saved = mix_order.MixedPosition(readers, tuple(taken), windows, mixed.sources,
                                      mixed.all_passes, mixed.first_full, "mix")
      if rng.random() > 0.25:
        readers = rng.randint(1, most)
        windows = tuple(rng.randint(1, 3) for _ in orders)
      mixed, offsets = resume(orders, per_epoch, saved, readers, windows, num_epochs)
    for r, offset in enumerate(offsets):
      read(mixed, r, offset, mixed.length(r), rng, reads)
    assert_each_epoch_reads_its_counts(reads, sizes, per_epoch, num_epochs)


def test_a_run_read_by_two_threads_at_once_sees_each_full_epoch_whole(monkeypatch):
  # A pass's length read while another read of the same run is filling its cache (here:
  # from inside that fill, as a second thread may) sees the cache whole or not at all.
  order = order_lib.Order([order_lib.ShardSlice(f"s{i}", 0, 3 + i) for i in range(6)], 4, True)
  run = order_lib.Run(order, 2, 1)
  full_pool, inner = order_lib.Order.full_pool, []

  def full_pool_reentered(self):
    if not inner:
      inner.append(None)
      inner[0] = run.pass_length(0, 1)
    return full_pool(self)
  monkeypatch.setattr(order_lib.Order, "full_pool", full_pool_reentered)
  outer = run.pass_length(0, 0)
  assert outer + inner[0] == sum(3 + i for i in range(6))


def test_placing_a_position_takes_the_passes_its_bound_states(monkeypatch):
  # Part 0: 1,000 records chosen 1 an epoch; part 1: 3 records, once an epoch.
  orders = [order_lib.Order([order_lib.ShardSlice(f"a{i}", 0, 250) for i in range(4)], 1, True),
            order_lib.Order([order_lib.ShardSlice(f"b{i}", 0, 1) for i in range(3)], 2, True)]
  counted = collections.Counter()
  lengths = order_lib.Run.pass_length

  def counting(self, q, reader):
    counted["part passes"] += 1
    return lengths(self, q, reader)
  monkeypatch.setattr(order_lib.Run, "pass_length", counting)
  mixed = mix_order.MixedOrder(orders, [1, 3], 3, (1, 1))
  j = 500
  mixed.sources_at(2, j, 1)
  passes = len(mixed._ends[2])
  # (j + 1) * min_k(ceil(size_k / per_epoch_k) + 1) mixed passes at most
  assert passes <= (j + 1) * min(1000 + 1, 1 + 1)
  # each part's passes looked up until its stream passes the bound: G + 1 at most
  assert counted["part passes"] <= 3 * (passes + 1 + passes * 3 + 1)


def test_a_saved_mixed_position_is_checked_as_untrusted_input():
  good = {"mix": "abc", "readers": 2, "at": [3, 4], "windows": [4, 4], "first_index": 9,
          "passes": [[0, [3, 0]], [1, [2, 5]]], "first_full": 2, "sources": [None, None]}
  assert mix_order.MixedPosition.from_json(good).to_json() == good
  for bad in (None, [], {"readers": 2}, {**good, "at": [3]}, {**good, "at": [3, -1]},
              {**good, "readers": 0, "at": []}, {**good, "at": [3, "4"]},
              {**good, "windows": [4]}, {**good, "windows": [0, 4]}, {**good, "first_index": -1},
              {**good, "sources": [None, {"readers": 1}]}, {**good, "at": [3, 2**60]},
              {**good, "passes": [[0, [3]]]}, {**good, "passes": [[0, [0, 0]]]},
              {**good, "passes": [[1, [1, 1]], [0, [1, 1]]]}, {**good, "passes": [[2, [1, 1]]]},
              {**good, "passes": [[0, [-1, 3]]]}, {**good, "first_full": -1},
              {**good, "passes": [[0, [1, 1]]] * 1001, "first_full": 2}):
    with pytest.raises(order_lib.PositionError):   # (MixedPositionError is one)
      mix_order.MixedPosition.from_json(bad)
  # Quotas within a part's per-epoch count, positions within the epochs a job may read.
  order = order_lib.Order([order_lib.ShardSlice(f"s{i}", 0, 4) for i in range(2)], 7, True)
  with pytest.raises(mix_order.MixedPositionError, match="more than its"):
    mix_order.MixedOrder([order], [8], 1, (1,), passes=[(0, (10**15,))], first_full=1)
  mixed = mix_order.MixedOrder([order], [8], 1, (1,))
  with pytest.raises(mix_order.MixedPositionError, match="more than 50 mixed epochs"):
    mixed.check_reachable([8 * 50], 50)
  mixed.check_reachable([8 * 50 - 1], 50)
  with pytest.raises(mix_order.MixedPositionError, match="more than 50 mixed epochs"):
    mixed.check_reachable([2**40], 50)
  older = {k: v for k, v in good.items() if k not in ("passes", "first_full")}
  with pytest.raises(mix_order.MixedPositionError, match="older imagesets"):
    mix_order.MixedPosition.from_json({**older, "done": 0})
