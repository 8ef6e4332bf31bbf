"""Locks between the processes of one machine that share a cache folder (fcntl.flock:
released by the kernel when a process dies, so a killed fetch never leaves a lock held)."""

import contextlib
import fcntl
import pathlib


@contextlib.contextmanager
def exclusive(path: pathlib.Path):
  """Holds an exclusive lock on `path` (created if missing) for the block."""
  path.parent.mkdir(parents=True, exist_ok=True)
  with open(path, "a") as handle:
    fcntl.flock(handle, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(handle, fcntl.LOCK_UN)
