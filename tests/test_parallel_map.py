"""parallel_map: same results as map, in order, from processes or threads, bounded."""

import os

import pytest

from imagesets import parallel_map


def square_and_pid(x):
  return x * x, os.getpid()


@pytest.mark.parametrize("threads", [False, True])
def test_results_come_back_in_input_order(threads):
  results = list(parallel_map.ordered_map(square_and_pid, range(200), workers=2,
                                          threads=threads, chunk_size=3))
  assert [r for r, _ in results] == [x * x for x in range(200)]
  pids = {pid for _, pid in results}
  assert (os.getpid() in pids) == threads and (len(pids) == 2 or threads)


def test_one_worker_runs_inline():
  assert list(parallel_map.ordered_map(square_and_pid, range(5), workers=1)) == [
      (x * x, os.getpid()) for x in range(5)]


def test_items_are_pulled_lazily_so_memory_stays_bounded():
  pulled = []

  def items():
    for x in range(10_000):
      pulled.append(x)
      yield x

  results = parallel_map.ordered_map(square_and_pid, items(), workers=2, chunk_size=4, window=2)
  next(results)
  # window * workers chunks in flight, not all 10,000 items.
  assert len(pulled) <= 2 * 2 * 4 + 4
  results.close()


def test_worker_errors_reach_the_caller():
  with pytest.raises(ZeroDivisionError):
    list(parallel_map.ordered_map(divide_one_by, [1, 0, 2], workers=2))


def divide_one_by(x):
  return 1 / x
