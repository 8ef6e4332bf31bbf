"""The read order's properties, over many random shard layouts, seeds and reader counts."""

import collections
import json

import numpy as np
import pytest

from imagesets.reading import order as order_lib


def _order(rng, mix="shuffle", shuffle=True):
  takes = rng.integers(0, 30, rng.integers(1, 24))
  skips = rng.integers(0, 5, len(takes))
  shards = [order_lib.ShardSlice(f"s-{i:05d}", int(skip), int(take))
            for i, (skip, take) in enumerate(zip(skips, takes))]
  return order_lib.Order(shards, seed=int(rng.integers(1000)), shuffle=shuffle, mix=mix)


def _epoch_records(order):
  return collections.Counter((i, r) for i, s in enumerate(order.shards)
                             for r in range(s.skip, s.skip + s.take))


def _read(run, q, reader, start=0, stop=None):
  return [tuple(row) for row in run.reader_pass(q, reader).rows[start:stop].tolist()]


@pytest.mark.parametrize("mix,shuffle", [("shuffle", True), ("interleave", True),
                                         ("shuffle", False)])
def test_every_record_once_an_epoch_disjoint_whole_shards_and_reproducible(mix, shuffle):
  rng = np.random.default_rng(0)
  for _ in range(60):
    order = _order(rng, mix, shuffle)
    readers, window = int(rng.integers(1, 7)), int(rng.integers(1, 5))
    run = order_lib.Run(order, readers, window, num_epochs=3)
    for epoch in range(3):
      seen, owner = collections.Counter(), {}
      for reader in range(readers):
        rows = _read(run, epoch, reader)
        seen.update(rows)
        for shard, _ in rows:
          assert owner.setdefault(shard, reader) == reader  # whole shards: one reader each
        again = order_lib.Run(order, readers, window).reader_pass(epoch, reader)
        assert again.rows.tolist() == [list(r) for r in rows]
      assert seen == _epoch_records(order)


def test_windows_hold_their_shards_records_and_the_counts_are_known_up_front():
  rng = np.random.default_rng(1)
  for _ in range(40):
    order = _order(rng, "shuffle")
    plan = order_lib.Run(order, 2, 3).reader_pass(0, 1)
    start = 0
    for window, end in zip(plan.windows, plan.window_ends.tolist()):
      assert len(window) <= 3
      rows = plan.rows[start:end]
      assert set(rows[:, 0].tolist()) <= set(window)
      for shard in window:
        assert plan.reads_of(shard) == order.shards[shard].take
      start = end


def test_interleave_reads_each_shard_in_stored_order_and_unshuffled_is_stored_order():
  shards = [order_lib.ShardSlice(f"s{i}", 2, 5) for i in range(6)]
  plan = order_lib.Run(order_lib.Order(shards, 3, True, "interleave"), 1, 3).reader_pass(0, 0)
  for shard in range(6):
    records = plan.rows[plan.rows[:, 0] == shard, 1].tolist()
    assert records == [2, 3, 4, 5, 6]
  first = plan.rows[:3, 0].tolist()
  assert sorted(first) == sorted(plan.windows[0])  # one record of each shard in turn
  plain = order_lib.Run(order_lib.Order(shards), 2, 2).reader_pass(0, 1)
  assert plain.windows == ((1, 3), (5,))
  assert plain.rows[:, 0].tolist() == [1] * 5 + [3] * 5 + [5] * 5


def test_epochs_differ_and_seeds_differ():
  shards = [order_lib.ShardSlice(f"s{i}", 0, 10) for i in range(8)]
  run = order_lib.Run(order_lib.Order(shards, 0, True), 1, 2)
  other = order_lib.Run(order_lib.Order(shards, 1, True), 1, 2)
  assert _read(run, 0, 0) != _read(run, 1, 0)
  assert _read(run, 0, 0) != _read(other, 0, 0)


def _stop_somewhere(run, rng):
  """Reads a random part of a run (a reader may be a pass ahead of another, or at the
  end); returns what was read and the readers' places."""
  read, at = collections.Counter(), []
  passes = run.num_passes
  for reader in range(run.readers):
    if not passes:
      at.append((0, 0))
      continue
    q = int(rng.integers(0, min(2, passes)))
    for p in range(q):
      read.update((run.epoch(p),) + row for row in _read(run, p, reader))
    count = int(rng.integers(0, len(run.reader_pass(q, reader)) + 1))
    read.update((run.epoch(q),) + row for row in _read(run, q, reader, 0, count))
    at.append((q, count))
  return read, run.position(at)


def _expected(order, epochs):
  expected = collections.Counter()
  for epoch in range(epochs):
    expected.update((epoch,) + key for key in _epoch_records(order))
  return expected


@pytest.mark.parametrize("counts", [(4, 2, 2), (2, 3, 1), (1, 4, 3), (3, 3, 5)])
def test_a_position_resumes_on_any_reader_count_reading_every_record_exactly_once(counts):
  rng = np.random.default_rng(sum(counts) * 10 + counts[0])
  for mix in ("shuffle", "interleave"):
    for _ in range(20):
      order = _order(rng, mix)
      read, position = collections.Counter(), None
      for readers in counts[:-1]:   # stopped, saved, loaded, resumed on another count
        run = order_lib.Run(order, readers, int(rng.integers(1, 4)), after=position,
                            num_epochs=2)
        more, position = _stop_somewhere(run, rng)
        read.update(more)
        position = order_lib.Position.from_json(json.loads(json.dumps(position.to_json())))
      run = order_lib.Run(order, counts[-1], 2, after=position, num_epochs=2)
      for q in range(run.num_passes):
        for reader in range(counts[-1]):
          read.update((run.epoch(q),) + row for row in _read(run, q, reader))
      assert read == _expected(order, 2)


def test_resumes_with_fewer_epochs_then_more_lose_and_repeat_nothing():
  # A job stopped in epoch 1, restarted with num_epochs=1 (nothing left to read: its
  # position must not move), restarted again, then extended to 3 epochs.
  rng = np.random.default_rng(7)
  for _ in range(40):
    order = _order(rng)
    read, position = collections.Counter(), None
    for readers, epochs in [(2, 2), (3, 1), (1, 1), (2, 3), (3, 2), (2, 4)]:
      run = order_lib.Run(order, readers, 2, after=position, num_epochs=epochs)
      more, position = _stop_somewhere(run, rng)
      read.update(more)
    run = order_lib.Run(order, 2, 2, after=position, num_epochs=4)
    for q in range(run.num_passes):
      for reader in range(2):
        read.update((run.epoch(q),) + row for row in _read(run, q, reader))
    assert read == _expected(order, 4)


def test_a_resumed_run_reads_no_shard_whose_records_were_all_read():
  shards = [order_lib.ShardSlice(f"s{i}", 0, 10) for i in range(8)]
  order = order_lib.Order(shards, 5, True)
  run = order_lib.Run(order, 2, 1, num_epochs=1)
  done = {reader: run.reader_pass(0, reader).windows[0][0] for reader in range(2)}
  partial = run.reader_pass(0, 1).windows[1][0]
  position = run.position([(0, 10), (0, 15)])  # reader 0: one shard; reader 1: 1.5
  resumed = order_lib.Run(order, 3, 2, after=position, num_epochs=1)
  shards_read = {s for reader in range(3) for s in resumed.reader_pass(0, reader).rows[:, 0].tolist()}
  assert done[0] not in shards_read and done[1] not in shards_read
  assert len(shards_read) == 6 and partial in shards_read  # 8 - the 2 read whole
  assert sum(len(resumed.reader_pass(0, r)) for r in range(3)) == 80 - 25


def test_a_position_of_full_epochs_forgets_the_resume_it_came_from():
  shards = [order_lib.ShardSlice(f"s{i}", 0, 4) for i in range(5)]
  order = order_lib.Order(shards, 5, True)
  position = order_lib.Run(order, 2, 1).position([(0, 3), (0, 1)])
  resumed = order_lib.Run(order, 3, 1, after=position)
  later = resumed.position([(2, 1), (1, 0), (3, 0)])  # all past the 1 pass of leftovers
  assert later.after is None and later.at == ((2, 1), (1, 0), (3, 0))  # pass q: epoch q


def test_a_position_of_another_order_or_a_damaged_one_is_refused_in_one_line():
  shards = [order_lib.ShardSlice(f"s{i}", 0, 4) for i in range(5)]
  position = order_lib.Run(order_lib.Order(shards, 5, True), 2, 1).position([(0, 3), (0, 1)])
  with pytest.raises(order_lib.PositionError, match="another order"):
    order_lib.Run(order_lib.Order(shards, 6, True), 2, 1, after=position)
  data = position.to_json()
  data["at"] = [[0, 3]]
  with pytest.raises(order_lib.PositionError, match="edited or damaged"):
    order_lib.Position.from_json(data)
  with pytest.raises(order_lib.PositionError, match="not a saved read position"):
    order_lib.Position.from_json({"readers": 2})
  data = position.to_json()
  data["at"] = [[0, 300], [0, 1]]
  with pytest.raises(order_lib.PositionError, match="which holds"):
    order_lib.Run(order_lib.Order(shards, 5, True), 2, 1,
                  after=order_lib.Position.from_json(data))


@pytest.mark.parametrize("edit,match", [
    (lambda d: d.update(at=[[10**12, 0], [0, 0]]), "passes 0 to"),
    (lambda d: d.update(readers=True), "whole numbers"),
    (lambda d: d.update(window_shards=0), "edited or damaged"),
    (lambda d: d.update(at=[[0, 1.9], [0, 1]]), "whole numbers"),
    (lambda d: d.update(after=5), "not a saved read position"),
    (lambda d: d.update(readers=10**9, at=[[0, 0]] * 3), "edited or damaged"),
])
def test_an_untrusted_position_is_refused_in_one_line_without_work(edit, match):
  shards = [order_lib.ShardSlice(f"s{i}", 0, 4) for i in range(5)]
  data = order_lib.Run(order_lib.Order(shards, 5, True), 2, 1).position([(0, 3), (0, 1)]).to_json()
  edit(data)
  with pytest.raises(order_lib.PositionError, match=match) as error:
    order_lib.Position.from_json(data)
  assert "\n" not in str(error.value)
  nested = None
  for _ in range(200):
    nested = {**order_lib.Run(order_lib.Order(shards, 5, True), 2, 1).position(
        [(0, 3), (0, 1)]).to_json(), "after": nested}
  with pytest.raises(order_lib.PositionError, match="resumed more than"):
    order_lib.Position.from_json(nested)
  with pytest.raises(order_lib.PositionError, match="a list"):
    order_lib.Position.from_json([1, 2])


def test_a_resume_late_in_a_long_run_costs_no_more_than_one_early():
  # Only the passes the readers are in are replayed, not every epoch before them.
  shards = [order_lib.ShardSlice(f"s{i}", 0, 4) for i in range(6)]
  order = order_lib.Order(shards, 5, True)
  calls = []
  real = order_lib.reader_pass
  order_lib.reader_pass = lambda *a, **k: calls.append(a[1]) or real(*a, **k)
  try:
    position = order_lib.Run(order, 2, 1).position([(10**6, 3), (10**6 + 1, 1)])
    order_lib.Run(order, 3, 1, after=position)
  finally:
    order_lib.reader_pass = real
  assert len(calls) <= 2 * 2 and min(calls) == 10**6


def test_a_readers_nth_record_is_placed_in_its_pass_and_the_end_is_its_last_pass():
  shards = [order_lib.ShardSlice(f"s{i}", 0, 4) for i in range(3)]
  run = order_lib.Run(order_lib.Order(shards, 5, True), 2, 1, num_epochs=2)
  sizes = [len(run.reader_pass(q, 0)) for q in range(2)]
  rows = [(q, i) for q in range(2) for i in range(sizes[q])]
  assert [run.place(0, n) for n in range(len(rows))] == rows
  assert run.length(0) == sum(sizes) and run.place(0, sum(sizes)) == (1, sizes[1])
  with pytest.raises(ValueError, match="reads"):
    run.place(0, sum(sizes) + 1)
  nothing = order_lib.Run(order_lib.Order(shards, 5, True), 2, 1, num_epochs=0)
  assert nothing.length(1) == 0 and nothing.place(1, 0) == (0, 0)


def test_a_negative_or_numpy_seed_derives_as_its_int_does():
  assert order_lib.derived_seed(np.int64(7), 1) == order_lib.derived_seed(7, 1)
  assert order_lib.derived_seed(np.int64(-1), 2) == order_lib.derived_seed(-1, 2) == (
      order_lib.derived_seed(2**64 - 1, 2))
