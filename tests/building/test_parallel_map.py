"""parallel_map: same results as map, in order, from processes or threads, bounded."""

import os
import signal
import subprocess
import sys
import threading

import pytest

from hang_guard import returns_within
from imagesets.building import parallel_map


def square_and_pid(x):
  return x * x, os.getpid()


@pytest.mark.parametrize("threads", [False, True])
def test_results_come_back_in_input_order(threads):
  with parallel_map.executor(2, threads=threads) as pool:
    results = list(parallel_map.ordered_map(square_and_pid, range(200), pool, chunk_size=3))
    again = list(parallel_map.ordered_map(square_and_pid, range(5), pool))  # pool reused
  assert [r for r, _ in results] == [x * x for x in range(200)]
  pids = {pid for _, pid in results}
  # Processes: the work ran in workers, never in this process. How many workers took a
  # share is the pool's business (CI once saw one fork take all 200 quick items).
  assert (os.getpid() in pids) == threads and len(pids) <= 2
  assert [r for r, _ in again] == [0, 1, 4, 9, 16]


def test_one_worker_runs_inline():
  with parallel_map.executor(1) as pool:
    assert pool is None
    assert list(parallel_map.ordered_map(square_and_pid, range(5), pool)) == [
        (x * x, os.getpid()) for x in range(5)]


def test_items_are_pulled_lazily_so_memory_stays_bounded():
  pulled = []

  def items():
    for x in range(10_000):
      pulled.append(x)
      yield x

  with parallel_map.executor(2) as pool:
    results = parallel_map.ordered_map(square_and_pid, items(), pool, chunk_size=4, window=2)
    next(results)
    # window * workers chunks in flight, not all 10,000 items.
    assert len(pulled) <= 2 * 2 * 4 + 4
    results.close()


def test_worker_errors_reach_the_caller():
  with pytest.raises(ZeroDivisionError), parallel_map.executor(2) as pool:
    list(parallel_map.ordered_map(divide_one_by, [1, 0, 2], pool))


def _killed_at_three(x):
  if x == 3:  # as the OOM killer ends a worker
    os.kill(os.getpid(), signal.SIGKILL)
  return x


def test_a_worker_killed_is_said_in_one_line():
  with pytest.raises(parallel_map.WorkerDiedError, match="worker process died") as raised:
    with parallel_map.executor(2) as pool:
      list(parallel_map.ordered_map(_killed_at_three, range(8), pool, chunk_size=1))
  assert raised.value.one_line_if_uncaught  # (the command line prints it, not a traceback)


def divide_one_by(x):
  return 1 / x


def test_process_pool_leaves_inherited_objects_out_of_garbage_collection():
  """Frozen while the pool runs (workers' collections would copy every inherited page),
  thawed after, also when the work fails."""
  import gc
  before = gc.get_freeze_count()
  with pytest.raises(ZeroDivisionError):
    with parallel_map.executor(2) as pool:
      assert gc.get_freeze_count() > before
      list(parallel_map.ordered_map(_inverse, [1, 0], pool))
  assert gc.get_freeze_count() == before


def _inverse(value):
  return 1 / value


def _niceness(_):
  return os.nice(0)


def test_process_workers_run_at_a_lower_priority_than_the_caller():
  with parallel_map.executor(2) as pool:
    niceness = set(parallel_map.ordered_map(_niceness, range(40), pool, chunk_size=1))
  assert niceness == {min(19, os.nice(0) + parallel_map.WORKER_NICENESS)}


def test_a_freeze_made_by_someone_else_stays_frozen():
  """gc.unfreeze() thaws every frozen object: the pool never undoes a freeze it did not make."""
  import gc
  gc.freeze()
  try:
    users = gc.get_freeze_count()
    with parallel_map.executor(2) as pool:
      assert list(parallel_map.ordered_map(_inverse, [1, 2], pool)) == [1, 0.5]
    assert gc.get_freeze_count() > users // 2  # (frozen objects that die leave the count)
  finally:
    gc.unfreeze()


def test_nested_pools_thaw_once_the_last_one_is_done():
  """Two builds in two threads: the first pool to end must not thaw the other's objects."""
  import gc
  assert gc.get_freeze_count() == 0
  with parallel_map.executor(2) as outer:
    frozen = gc.get_freeze_count()
    with parallel_map.executor(2):
      pass
    assert gc.get_freeze_count() > frozen // 2 > 0  # still frozen (some frozen objects died)
    assert list(parallel_map.ordered_map(_inverse, [4], outer)) == [0.25]
  assert gc.get_freeze_count() == 0


def test_thread_pools_freeze_too_and_thaw_after():
  """A build on threads (keras' pixels, buckets) runs frozen as one on processes: its one
  full collection walked every object TensorFlow made (0.2 s of a 2,000-photo build)."""
  import gc
  assert gc.get_freeze_count() == 0
  with parallel_map.executor(2, threads=True) as pool:
    assert gc.get_freeze_count() > 0
    assert list(parallel_map.ordered_map(_inverse, [2], pool)) == [0.5]
  assert gc.get_freeze_count() == 0


def test_a_pool_batches_young_collections_and_puts_the_thresholds_back():
  """What a build makes lives to its end: inside, no full collection walks it again for
  a hundred thousand objects kept (with Python's thresholds, several would)."""
  import gc
  before = gc.get_threshold()
  with parallel_map.frozen_gc():
    assert gc.get_threshold() == (parallel_map.YOUNG_COLLECTION, *before[1:])
    gc.collect()  # (every generation's count from 0)
    full = gc.get_stats()[2]["collections"]
    kept = [[number] for number in range(100_000)]
    assert gc.get_stats()[2]["collections"] == full
    with parallel_map.frozen_gc():  # (nested: the outer one puts them back)
      pass
    assert gc.get_threshold()[0] == parallel_map.YOUNG_COLLECTION
  assert gc.get_threshold() == before and len(kept) == 100_000


def test_thresholds_someone_set_during_a_pool_are_theirs():
  import gc
  before = gc.get_threshold()
  try:
    with parallel_map.frozen_gc():
      gc.set_threshold(5000, 5, 5)
    assert gc.get_threshold() == (5000, 5, 5)
  finally:
    gc.set_threshold(*before)


def test_collection_switched_off_stays_off():
  import gc
  before = gc.get_threshold()
  gc.set_threshold(0, *before[1:])
  try:
    with parallel_map.frozen_gc():
      assert gc.get_threshold()[0] == 0
    assert gc.get_threshold()[0] == 0
  finally:
    gc.set_threshold(*before)


class _Recorded:
  """A pool that records the size of each chunk handed to it."""

  def __init__(self, pool):
    self.pool, self.sizes, self._max_workers = pool, [], pool._max_workers

  def submit(self, fn, *args):
    self.sizes.append(len(args[1]))
    return self.pool.submit(fn, *args)


@pytest.mark.parametrize("total", [1, 5, 200, 1_000])
def test_with_the_total_known_the_last_chunks_shrink_so_no_worker_is_left_alone(total):
  """200 items in chunks of 64 on 2 workers were 64, 64, 64, 8: one worker made the third
  64 while the other waited. With the total known, a chunk is at most the `in_flight`-th
  part of what is left (guided scheduling), every item once, in order."""
  with parallel_map.executor(2, threads=True) as pool:
    recorded = _Recorded(pool)
    results = list(parallel_map.ordered_map(square_and_pid, range(total), recorded,
                                            chunk_size=64, window=3, total=total))
  assert [r for r, _ in results] == [x * x for x in range(total)]
  sizes = recorded.sizes
  assert sum(sizes) == total and sizes == sorted(sizes, reverse=True) and max(sizes) <= 64
  for at, size in enumerate(sizes):  # (6 chunks in flight: 2 workers, 3 each)
    assert size == max(1, min(64, -(-(total - sum(sizes[:at])) // 6)))
  assert sizes[-1] == 1 and (total < 384 or sizes[0] == 64)


def test_without_the_total_every_chunk_is_the_chunk_size():
  with parallel_map.executor(2, threads=True) as pool:
    recorded = _Recorded(pool)
    list(parallel_map.ordered_map(square_and_pid, range(200), recorded, chunk_size=64))
  assert recorded.sizes == [64, 64, 64, 8]


def test_workers_fork_at_once_and_warm_runs_in_them_once_a_worker():
  """The workers are forked as the pool is made (before the caller starts anything: a
  network client), and `warm` runs in them (one call a worker; which worker takes which
  is theirs), never in this process; nothing for threads or no pool."""
  with parallel_map.executor(2) as pool:
    assert len(pool._processes) == 2  # (before any work was given)
    calls = parallel_map.warm(pool, os.getpid)
    ran_in = [call.result() for call in calls]
    assert len(ran_in) == 2 and set(ran_in) <= set(pool._processes)
  with parallel_map.executor(2, threads=True) as threads:
    assert parallel_map.warm(threads, pytest.fail) == []
  assert parallel_map.warm(None, pytest.fail) == []


def _interrupt_ignored(_):
  import signal
  return signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_workers_leave_ctrl_c_to_the_build():
  """The terminal sends Ctrl-C to the whole process group: a worker ignores it (it would
  print its own traceback) and ends when the build shuts the pool down."""
  with parallel_map.executor(2) as pool:
    assert all(parallel_map.ordered_map(_interrupt_ignored, range(4), pool, chunk_size=1))


_INTERRUPTED_WHILE_WORKING = """
import multiprocessing, os, signal, struct, sys, threading
from imagesets.building import parallel_map

running = [multiprocessing.get_context("fork").Event() for _ in range(2)]  # (the workers')

def forever(_):
  running[0].set()
  threading.Event().wait()   # (work that would outlast any wait for it)

def cut_off(_):
  # A result's first bytes sent, then the worker stops for good (as when it is ended while
  # sending a large result): the pool's reader of results waits for the rest.
  frame = sys._getframe()
  while frame.f_code.co_name != "_process_worker":
    frame = frame.f_back
  os.write(frame.f_locals["result_queue"]._writer.fileno(), struct.pack("!i", 1 << 20) + b"x")
  running[1].set()
  threading.Event().wait()

try:
  with parallel_map.executor(2) as pool:
    workers = list(pool._processes)
    # (and one more, too large for the pipe to the workers: its writer waits for a reader)
    started = [pool.submit(work, argument) for work, argument in (
        (forever, 0), (cut_off, 1), (forever, b"x" * (8 << 20)))]
    for event in running:   # (both workers at their work: it is under way when stopped)
      event.wait()
    raise KeyboardInterrupt
except KeyboardInterrupt:
  pass
alive = []
for pid in workers:
  try:
    os.kill(pid, 0)
    alive.append(pid)
  except ProcessLookupError:
    pass
print("alive", alive, "stopped", [f.cancelled() or f.exception() is not None for f in started])
"""


def test_ctrl_c_stops_the_workers_work_instead_of_waiting_for_it():
  """Ctrl-C in a build whose workers are busy (a million photos' picks take minutes) ends
  the pool at once: the work in hand is no one's any more. The workers are ended and
  reaped, none left running, and a result cut off mid-send is not waited for; a pool that
  waited for them never exits (the timeout)."""
  process = subprocess.Popen([sys.executable, "-c", _INTERRUPTED_WHILE_WORKING],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
  try:
    output, _ = process.communicate(timeout=60)
  except subprocess.TimeoutExpired:
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate()
    pytest.fail("the pool's end waited for its workers' work after Ctrl-C")
  assert process.returncode == 0
  assert output.split("\n")[0] == "alive [] stopped [True, True, True]"


def test_ctrl_c_in_a_thread_pool_drops_the_work_not_started():
  """Threads cannot be ended: the two at work finish, the eight queued never start."""
  gate, ran = threading.Event(), []

  def work(number):
    gate.wait()
    ran.append(number)

  def interrupted():
    try:
      with parallel_map.executor(2, threads=True) as pool:
        futures = [pool.submit(work, number) for number in range(10)]
        futures[-1].add_done_callback(lambda _: gate.set())  # (cancelled: let two end)
        raise KeyboardInterrupt
    except KeyboardInterrupt:
      return futures
  try:
    futures = returns_within(60, interrupted, what="a thread pool's exit after Ctrl-C")
  finally:
    gate.set()
  assert len(ran) <= 2 and sum(future.cancelled() for future in futures) >= 8
