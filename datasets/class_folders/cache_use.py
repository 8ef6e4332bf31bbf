"""Builds of the image_dataset_from_directory cache that are in use are never removed.

A process that reads (or builds) a cached build holds a shared `fcntl.flock` on
`<build>/.in-use.lock` for the rest of its life: tf.data and Grain pipelines outlive the
call and any object we could tie the lock to (`ds.map(...)` makes new objects), so the
process is the owner. Removing a build takes the same lock exclusively without waiting,
and leaves the build alone when it cannot: another dataset, in this process or another,
still reads it. flock conflicts between separate opens, also within one process, and the
kernel drops the locks of a process that ends, however it ends.

A reader checks, once it holds the lock, that the file it locked is still the one at the
path (a remover deletes the folder, lock file included, while holding it): else the build
is gone and it locks the new file, so a reader never holds a lock on a removed build.
"""

import fcntl
import os
import pathlib
import shutil

LOCK_NAME = ".in-use.lock"
_HELD: dict[str, object] = {}  # build folder -> its open, shared-locked lock file


def _same_file(path: pathlib.Path, lock) -> bool:
  try:
    return os.stat(path).st_ino == os.fstat(lock.fileno()).st_ino
  except FileNotFoundError:
    return False


def hold(build: pathlib.Path) -> None:
  """Marks `build` (created if missing) as in use by this process until it ends."""
  path = build / LOCK_NAME
  held = _HELD.get(str(build))
  if held is not None and _same_file(path, held):
    return
  while True:
    build.mkdir(parents=True, exist_ok=True)
    lock = open(path, "a")  # pylint: disable=consider-using-with
    fcntl.flock(lock, fcntl.LOCK_SH)  # waits only while a remover holds it (a moment)
    if _same_file(path, lock):
      _HELD[str(build)] = lock
      return
    lock.close()


def release(build: pathlib.Path) -> None:
  """This process no longer uses `build` (before it replaces it itself)."""
  lock = _HELD.pop(str(build), None)
  if lock is not None:
    lock.close()


def is_building(build: pathlib.Path) -> bool:
  """A process builds into `build`: it holds a build lock there (`build_lock`). A build
  that died left its lock unheld, and its leftovers go with the folder."""
  for child in build.iterdir():
    if child.name.endswith(".lock") and child.name != LOCK_NAME:
      try:
        with open(child, "r") as lock:
          fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
      except BlockingIOError:
        return True
      except FileNotFoundError:  # that build has just finished
        pass
  return False


def remove_unless_used(build: pathlib.Path) -> bool:
  """Removes `build` if no process uses or builds it; True if it was removed."""
  path = build / LOCK_NAME
  try:
    if is_building(build):
      return False
    lock = open(path, "a")  # pylint: disable=consider-using-with
  except FileNotFoundError:  # removed by another process meanwhile
    return False
  with lock:
    try:
      fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      return False
    try:
      if not _same_file(path, lock) or is_building(build):
        return False
    except FileNotFoundError:
      return False
    shutil.rmtree(build, ignore_errors=True)
    return True
