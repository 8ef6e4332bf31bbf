"""Map a function over items in worker processes, in order, with bounded memory.

`concurrent.futures`' own `map` submits every item at once, so results pile up in memory
when the consumer (the TFDS writer) is slower than the workers. Here at most `window`
chunks per worker are in flight, so memory does not grow with the number of items, and
results come back in input order, so the output is deterministic.
"""

import collections
import concurrent.futures
import itertools
import multiprocessing
import os
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def available_cores() -> int:
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _apply(fn, chunk):
  return [fn(item) for item in chunk]


def ordered_map(fn: Callable[[T], R], items: Iterable[T], *, workers: int | None = None,
                threads: bool = False, chunk_size: int = 16, window: int = 4) -> Iterator[R]:
  """Yields fn(item) for each item, in order.

  Processes by default (`fn` must then be picklable, i.e. top-level); `threads=True` for
  work that waits on I/O (bucket reads), where forking a process that runs TensorFlow's
  network clients is not safe.
  """
  workers = available_cores() if workers is None else workers
  if workers <= 1:
    yield from map(fn, items)
    return
  if threads:
    pool = concurrent.futures.ThreadPoolExecutor(workers)
  else:
    # fork: workers start in milliseconds and need not re-import the caller's modules
    # (the `tfds` CLI loads builders from a path). They only run `fn`, never TensorFlow.
    pool = concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("fork"))
  items = iter(items)
  with pool:
    pending = collections.deque()
    while chunk := list(itertools.islice(items, chunk_size)):
      pending.append(pool.submit(_apply, fn, chunk))
      if len(pending) >= window * workers:
        yield from pending.popleft().result()
    while pending:
      yield from pending.popleft().result()
