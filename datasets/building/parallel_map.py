"""Map a function over items in worker processes, in order, with bounded memory.

`concurrent.futures`' own `map` submits every item at once, so results pile up in memory
when the consumer (the TFDS writer) is slower than the workers. Here at most `window`
chunks per worker are in flight, so memory does not grow with the number of items, and
results come back in input order, so the output is deterministic. One `executor()` can
serve several `ordered_map` calls (a builder's splits), so workers start once per build.
"""

import collections
import concurrent.futures
import contextlib
import gc
import itertools
import multiprocessing
import os
import signal
import threading
import time
from typing import Callable, Iterable, Iterator, TypeVar

from imagesets.building import problems

T = TypeVar("T")
R = TypeVar("R")
WORKER_NICENESS = 5  # added to the workers' niceness (os.nice)
ORPHAN_POLL_SECONDS = 0.2  # how soon a worker whose build died ends too


def available_cores() -> int:
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


@contextlib.contextmanager
def executor(workers: int | None = None, *, threads: bool = False):
  """Yields a pool for `ordered_map`, or None (run inline) when there is one core.

  Processes by default (the mapped function must then be picklable, i.e. top-level);
  `threads=True` for work that waits on I/O (bucket reads), where forking a process that
  runs TensorFlow's network clients is not safe: the processes are forked now, before the
  caller goes on to start any.
  """
  workers = available_cores() if workers is None else workers
  if workers <= 1:
    yield None
  elif threads:
    with frozen_gc(), concurrent.futures.ThreadPoolExecutor(workers) as pool:
      try:
        yield pool
      except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)  # (threads cannot be ended: the
        raise                                           # work not started is dropped)
  else:
    # fork: workers start in milliseconds and need not re-import the caller's modules
    # (the `tfds` CLI loads builders from a path). They only run `fn`, never TensorFlow.
    # Workers run at a lower priority than the process that hands out their work and
    # consumes it (for a build: TFDS's writer): when that process waits for a core behind
    # a worker, both workers soon wait for it. Measured: flowers builds 4-8 % faster.
    # gc.freeze(): the objects that exist now (TensorFlow's, TFDS's: hundreds of MB) are
    # left out of garbage collection until the pool is done, so collections in the
    # workers do not touch, and copy, every inherited page; and the build process's own
    # collections get cheap. A flowers build ran ~20 % faster (docs/flowers.md).
    with frozen_gc():
      with concurrent.futures.ProcessPoolExecutor(
          workers, mp_context=multiprocessing.get_context("fork"),
          initializer=_start_worker, initargs=(os.getpid(),)) as pool:
        pool.submit(int)  # (forks every worker now: the "fork" context starts them all)
        try:
          yield pool
        except BaseException:
          _stop(pool)
          raise


def _stop(pool: concurrent.futures.ProcessPoolExecutor) -> None:
  """Ends `pool`'s workers now, their work in hand dropped: the caller stopped (Ctrl-C, an
  error), so no one waits for it. A shutdown alone waits for every task a worker has
  started (a band of a million photos' picks: minutes after Ctrl-C)."""
  # pylint: disable=protected-access
  processes = list(pool._processes.values())
  results, manager = pool._result_queue, pool._executor_manager_thread
  pool.shutdown(wait=False, cancel_futures=True)
  for process in processes:
    process.terminate()  # (SIGTERM: a worker ignores only SIGINT)
  for process in processes:
    process.join()
  # A worker ended while sending a result left it cut off: the pool's reader of results
  # waits for the rest for as long as a writer is open, and this process holds one.
  results._writer.close()
  if manager is not None:
    manager.join()


def warm(pool, fn: Callable[[], None]) -> list[concurrent.futures.Future]:
  """Has the worker processes of `pool` (`executor`'s; none for threads or None) run `fn`,
  the imports their work would wait for, while the caller goes on: one call a worker
  (their futures), each taken by a worker that is idle, so ask when they are (a worker
  busy meanwhile may leave its call to another, and import at its first work)."""
  if not isinstance(pool, concurrent.futures.ProcessPoolExecutor):
    return []
  return [pool.submit(fn) for _ in range(pool._max_workers)]  # pylint: disable=protected-access


def _start_worker(parent: int) -> None:
  """A worker's start: a lower priority (above), and its end with its parent's: the
  workers of a build killed with SIGKILL (the OOM killer, `kill -9`) would live on as
  orphans, holding their memory and waiting for work. (They no longer hold the build's
  lock: build_lock closes it in every forked child. Not PR_SET_PDEATHSIG: it fires when
  the forking *thread* ends, which may be any thread.) Ctrl-C is its build's to handle: a
  worker ignores SIGINT (the terminal sends it to the whole process group), and ends when
  the build shuts its pool down."""
  os.nice(WORKER_NICENESS)
  signal.signal(signal.SIGINT, signal.SIG_IGN)

  def watch():
    while os.getppid() == parent:
      time.sleep(ORPHAN_POLL_SECONDS)
    os._exit(1)  # orphaned: the parent is gone, and with it whoever wanted our results

  threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


_freeze_lock = threading.Lock()
_freezes = 0  # pools inside a freeze of ours (two builds in two threads)
_froze = False  # whether that freeze is ours to undo
_thresholds = None  # the collector's thresholds before the outermost freeze, and ours
# Allocations between young collections in a build (Python's default: 700).
YOUNG_COLLECTION = 10_000


@contextlib.contextmanager
def frozen_gc():
  """gc.freeze() for the life of the pools (or of a whole build), nested: the last one out
  unfreezes, and only a freeze we made. Threads too: a full collection walks every object
  TensorFlow, Keras and TFDS made (0.2 s, measured in a keras-cache build of 2,000 photos;
  none once frozen). gc.unfreeze() thaws every frozen object, so when someone else froze
  first (the user, a server preforking its workers), it is left to them.

  Young collections are also batched (`YOUNG_COLLECTION` allocations apart, not 700): what
  a build makes (fingerprints, index rows: ~10 objects a photo) lives to its end, and every
  10 young collections a full one walked it all again (0.4-0.6 s of a build of 20,000
  photos on a base, of its 2.8 s; none with batching). The thresholds are put back at the
  end unless someone changed them meanwhile; a threshold of 0 (automatic collection off)
  is left as it is."""
  global _freezes, _froze, _thresholds
  with _freeze_lock:
    if _freezes == 0:
      _froze = gc.get_freeze_count() == 0
      if _froze:
        gc.freeze()
      before = gc.get_threshold()
      if before[0]:  # (0: collection switched off, which stays off)
        gc.set_threshold(max(before[0], YOUNG_COLLECTION), *before[1:])
      _thresholds = (before, gc.get_threshold())
    _freezes += 1
  try:
    yield
  finally:
    with _freeze_lock:
      _freezes -= 1
      if _freezes == 0:
        if _froze:
          gc.unfreeze()
          _froze = False
        before, ours = _thresholds
        if gc.get_threshold() == ours:
          gc.set_threshold(*before)


def _apply(fn, chunk):
  return [fn(item) for item in chunk]


def ordered_map(fn: Callable[[T], R], items: Iterable[T], pool=None, *,
                chunk_size: int = 16, window: int = 4, total: int | None = None) -> Iterator[R]:
  """Yields fn(item) for each item, in order, computed in `pool` (inline if None).

  `total`: how many items there are, when the caller knows: the last chunks then shrink
  (`chunk_sizes`), so that no worker is left with a full chunk while the others wait."""
  if pool is None:
    yield from map(fn, items)
    return
  items = iter(items)
  in_flight = window * pool._max_workers  # pylint: disable=protected-access
  sizes = chunk_sizes(chunk_size, in_flight, total)
  pending = collections.deque()
  try:
    while chunk := list(itertools.islice(items, next(sizes))):
      pending.append(pool.submit(_apply, fn, chunk))
      if len(pending) >= in_flight:
        yield from _result(pending.popleft())
    while pending:
      yield from _result(pending.popleft())
  finally:
    for future in pending:  # the caller stopped early: drop the work not yet started
      future.cancel()


def _result(future: concurrent.futures.Future) -> list:
  """A chunk's results; a worker process that died (the OOM killer, a crash in a decoder)
  is said in one line, not as the pool's traceback (which names no item either)."""
  try:
    return future.result()
  except concurrent.futures.process.BrokenProcessPool as error:
    raise problems.one_line_if_uncaught(WorkerDiedError(
        "a worker process died abruptly (killed, e.g. out of memory, or crashed) while "
        "doing the build's work; nothing was written: rerun, and if it dies again, look "
        "for very large images or free some memory")) from error


class WorkerDiedError(RuntimeError):
  """A worker process of `ordered_map` ended without returning its work."""


def chunk_sizes(chunk_size: int, in_flight: int, total: int | None) -> Iterator[int]:
  """The sizes of the chunks handed out: `chunk_size` each, or with the `total` known,
  at most the `in_flight`-th part of the items not handed out yet (guided scheduling, as
  OpenMP's): a build of 200 photos on 2 workers is 34, 28, 23, ... 1 photos a chunk, not 64,
  64, 64, 8 (one worker idle for the last 64)."""
  if total is None:
    yield from itertools.repeat(chunk_size)
    return
  left = total
  while True:
    size = max(1, min(chunk_size, -(-left // in_flight)))
    left = max(0, left - size)
    yield size
