"""Locks between the processes of one machine that share a cache folder (fcntl.flock:
released by the kernel when a process dies, so a killed fetch never leaves a lock held)."""

import contextlib
import fcntl
import pathlib
import time
from typing import Callable

POLL_SECONDS = 0.1


@contextlib.contextmanager
def exclusive(path: pathlib.Path, waiting: Callable[[], None] | None = None):
  """Holds an exclusive lock on `path` (created if missing) for the block. `waiting`:
  called while another process holds it (every POLL_SECONDS); it raises to stop waiting.
  Without it, waits as long as the lock is held."""
  path.parent.mkdir(parents=True, exist_ok=True)
  with open(path, "a") as handle:
    if waiting is None:
      fcntl.flock(handle, fcntl.LOCK_EX)
    else:
      while True:
        try:
          fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
          break
        except BlockingIOError:
          waiting()
          time.sleep(POLL_SECONDS)
    try:
      yield
    finally:
      fcntl.flock(handle, fcntl.LOCK_UN)
