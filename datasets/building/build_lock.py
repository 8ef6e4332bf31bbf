"""One build of a dataset version at a time, and no leftovers of builds that died.

TFDS builds a version into `<parent>/incomplete.XXXXXX_<version>/` beside the final
`<parent>/<version>/` and renames it at the end. A build that is killed (SIGKILL, out of
memory, a preempted machine) leaves that folder behind, tens of GB for a large tree, and
no later build removes it. Two builds of one version started together both write, and
the slower one fails on TFDS's final rename with a raw FileExistsError.

How the owner is known: a build holds an exclusive `fcntl.flock` on
`<parent>/.<version>.lock` for as long as it runs, and writes its pid, host and start
time into it. The kernel releases a flock when its process ends, however it ends, so:

* a lock we can take has no living owner: every `incomplete.*_<version>/` folder there
  was left by a build that is gone, and is removed before this build starts;
* a lock we cannot take for `GRACE_SECONDS` belongs to a build that is running: we stop
  with `BuildInProgressError`, one line that names its pid, and touch nothing of it.

The flock belongs to the open file description, which a forked child (the build's worker
pool) shares: each child detaches its copy as it starts (`os.register_at_fork`), so the
build process alone holds the lock. (Before, the orphaned workers of a killed build held
it until they noticed their parent was gone, `parallel_map.ORPHAN_POLL_SECONDS`: a rebuild
started as soon as the killed build was reaped was refused in 19 of 20 tries,
`benchmarks/kill_then_rebuild.py`.) The child points the descriptor at /dev/null with
plain system calls: buffered I/O there could wait forever on a lock that another thread of
the parent held at the fork. Lock files are opened and closed under a lock that a fork
takes first, so no child gets a lock fd between its opening and its listing. Only the
process that took the lock removes its file and lets go of it: a forked child that unwinds
through `hold` (sys.exit, an exception) leaves both to its parent. The grace covers a build
killed a moment ago: the kernel tears the process down, and lets go of its lock, some
milliseconds after `kill -9` returns (a rebuild started at once, without waiting for the
killed process, was refused in 19 of 20 tries without it).

A build removes its lock file before it lets go of it, and a build that has just
locked a file checks that it is still the one at that path (else it starts again), so
removing it never lets two builds in. Only a killed build leaves its (hidden, tiny)
lock file; the next build takes it over and removes it. Only local data dirs are locked:
buckets (gs://, s3://) have no flock, so builds into them go on as TFDS does alone.
"""

import contextlib
import datetime
import fcntl
import os
import pathlib
import shutil
import socket
import threading
import time

from absl import logging

from imagesets.building import problems

INCOMPLETE_PREFIX = "incomplete."
GRACE_SECONDS = 1.0  # how long a build waits for a held lock before it says "in progress"
_RETRY_SECONDS = 0.02
# The lock fds this process has open (raw fds: a forked child must not run buffered I/O,
# see module doc). Opened and closed under _FORK_GUARD, which a fork takes first: a child
# never gets a lock fd that is not in _HELD.
_HELD = set()
_FORK_GUARD = threading.Lock()


def _open(path: pathlib.Path, flags: int) -> int:
  with _FORK_GUARD:
    fd = os.open(path, flags | os.O_CLOEXEC, 0o644)
    _HELD.add(fd)
  return fd


def _close(fd: int) -> None:
  with _FORK_GUARD:
    _HELD.discard(fd)
    os.close(fd)  # releases the flock if no child shares it (none does: _detach_in_child)


def _detach_in_child() -> None:
  """In a forked child: its copies of the lock fds stop referring to the lock's open file,
  which leaves the flock to the parent. Plain system calls only (see module doc); dup2 over
  each rather than close, so no number stays free for an unrelated open to reuse."""
  try:
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
  except OSError:  # (no fd left) closing them still leaves the flock to the parent
    null = None
  for fd in _HELD:
    with contextlib.suppress(OSError):
      if null is None:
        os.close(fd)
      else:
        os.dup2(null, fd, inheritable=False)
  if null is not None:
    os.close(null)
  _HELD.clear()
  _FORK_GUARD.release()  # taken by the forking thread (before=), now this child's only thread


os.register_at_fork(before=_FORK_GUARD.acquire, after_in_parent=_FORK_GUARD.release,
                    after_in_child=_detach_in_child)


class BuildInProgressError(RuntimeError):
  """Another process is building (or has just built) this version."""

  def __init__(self, message: str, owner: str = "another process"):
    super().__init__(message)
    self.owner = owner  # "pid N on HOST, started ...", as its lock file says


def wait(version_dir: os.PathLike) -> None:
  """Returns once no process builds `version_dir` (blocks on its build lock)."""
  try:
    lock = _open(lock_path(version_dir), os.O_RDONLY)
  except FileNotFoundError:  # that build has just finished
    return
  try:
    fcntl.flock(lock, fcntl.LOCK_SH)  # granted once the builder lets go, however it ends
  finally:
    _close(lock)


def lock_path(version_dir: os.PathLike) -> pathlib.Path:
  version_dir = pathlib.Path(version_dir)
  return version_dir.parent / f".{version_dir.name}.lock"


def leftovers(version_dir: os.PathLike) -> list[pathlib.Path]:
  """TFDS's unfinished build folders of this version (`incomplete.XXXXXX_<version>`)."""
  version_dir = pathlib.Path(version_dir)
  if not version_dir.parent.is_dir():
    return []
  return sorted(path for path in version_dir.parent.glob(f"{INCOMPLETE_PREFIX}*_{version_dir.name}")
                if path.is_dir())


def _size(path: pathlib.Path) -> int:
  return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _remove_leftovers(version_dir: pathlib.Path) -> None:
  for path in leftovers(version_dir):
    size = _size(path)
    shutil.rmtree(path)
    logging.warning("removed %s (%.1f MB), left by a build of this version that did not "
                    "finish", path, size / 1e6)


def _locked(path: pathlib.Path, name: str, version_dir: pathlib.Path) -> int:
  """The lock file's fd, flock'ed by us; raises BuildInProgressError if a build holds it
  (still after GRACE_SECONDS)."""
  deadline = time.monotonic() + GRACE_SECONDS
  while True:
    try:
      lock = _open(path, os.O_RDWR | os.O_CREAT)
    except FileNotFoundError:  # the dataset folder a failed first build made, removed
      _made(path.parent)
      continue
    try:
      fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      if time.monotonic() < deadline:
        _close(lock)
        time.sleep(_RETRY_SECONDS)
        continue
      owner = os.pread(lock, 4096, 0).decode("utf-8", "replace").strip() or "another process"
      _close(lock)
      error = BuildInProgressError(
          f"{name} is being built by another process ({owner}) into {version_dir}; "
          "wait for it to finish (a finished build is then reused), or build into "
          "another data dir.", owner)
      problems.one_line_if_uncaught(error)
      raise error from None
    # The holder before us removes the file before it lets go: if what we locked is no
    # longer the file at `path`, another build may lock a new one; start again.
    try:
      same = os.stat(path).st_ino == os.fstat(lock).st_ino
    except FileNotFoundError:
      same = False
    if same:
      return lock
    _close(lock)


def _made(folder: pathlib.Path) -> None:
  """`folder` and those above it made, as `mkdir -p`, also while another build removes the
  empty folders its failed first build made (`hold`): pathlib's `mkdir` then raises
  FileExistsError (the folder was there, then gone before it checked it is one); made
  again. Something other than a folder in the way is an error."""
  while True:
    try:
      folder.mkdir(parents=True, exist_ok=True)
      return
    except FileExistsError:
      if os.path.lexists(folder) and not folder.is_dir():
        raise


@contextlib.contextmanager
def hold(version_dir: os.PathLike, name: str):
  """While the block runs, this process alone builds `version_dir` (see module doc)."""
  version_dir = pathlib.Path(version_dir)
  # The folders above the version this build makes (data dir, dataset, config folder)
  made = [folder for folder in version_dir.parents if not folder.exists()]
  _made(version_dir.parent)
  path = lock_path(version_dir)
  lock = _locked(path, name, version_dir)
  owner = os.getpid()  # a forked child that unwinds through here must not let go (doc)
  try:
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    line = f"pid {owner} on {socket.gethostname()}, started {started}".encode()
    # Written over what a killed build left (padded to its size: a build reading it at
    # once reads this line and blanks), then cut to its length; never cut to 0 bytes
    # first: ext4 (auto_da_alloc) writes a file emptied and written to disk on its close.
    os.pwrite(lock, line.ljust(os.fstat(lock).st_size), 0)
    os.ftruncate(lock, len(line))
    _remove_leftovers(version_dir)
    yield
  finally:
    if os.getpid() == owner:
      path.unlink(missing_ok=True)  # while still holding it: see _locked
      for folder in made:  # a first build that failed leaves no empty folder behind
        try:   # (innermost first; one not empty: it built, or another build is in)
          folder.rmdir()
        except OSError:
          break
      _close(lock)  # releases the flock
