"""Locks between the processes of one machine that share a cache folder (fcntl.flock:
released by the kernel when a process dies, so a killed fetch never leaves a lock held)."""

import contextlib
import errno
import fcntl
import os
import pathlib
import time
from typing import Callable

from imagesets.storage import versions

POLL_SECONDS = 0.1


class LockLinkError(versions.PublishError):
  """A symlink where a lock file belongs (a planted one would make us create files
  wherever it points)."""


@contextlib.contextmanager
def exclusive(path: pathlib.Path, waiting: Callable[[], None] | None = None,
              remove: bool = False):
  """Holds an exclusive lock on `path` (created if missing) for the block. `waiting`:
  called while another process holds it (every POLL_SECONDS); it raises to stop waiting.
  Without it, waits as long as the lock is held. `remove`: the lock file is unlinked on
  release (for locks named after many things, e.g. one per shard, that would otherwise
  pile up); a holder checks that the file it locked is still the one at `path`, so a
  waiter that locked a removed file tries again instead of sharing the lock."""
  path.parent.mkdir(parents=True, exist_ok=True)
  while True:
    handle = _open(path)
    try:
      _lock(handle, waiting)
      if not remove or _is_current(path, handle):
        break
    except BaseException:
      handle.close()
      raise
    handle.close()  # it locked a file another holder removed: lock the new one
  with handle:
    try:
      yield
    finally:
      if remove:
        with contextlib.suppress(FileNotFoundError):
          os.unlink(path)  # (still locked: a waiter on this file sees it gone)
      fcntl.flock(handle, fcntl.LOCK_UN)


def _open(path: pathlib.Path):
  """The lock file, created if missing, never through a symlink."""
  try:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
  except OSError as error:
    if error.errno != errno.ELOOP:
      raise
    raise LockLinkError(
        f"{path} is a symlink (to {os.path.realpath(path)}) where a lock file belongs: "
        "refused, nothing was created through it; remove that symlink") from None
  return os.fdopen(fd, "r+b")


def _lock(handle, waiting) -> None:
  if waiting is None:
    fcntl.flock(handle, fcntl.LOCK_EX)
    return
  while True:
    try:
      fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
      return
    except BlockingIOError:
      waiting()
      time.sleep(POLL_SECONDS)


def _is_current(path: pathlib.Path, handle) -> bool:
  try:
    return os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
  except FileNotFoundError:
    return False
