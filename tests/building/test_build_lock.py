"""One build per version: leftovers of killed builds go, a concurrent build stops cleanly."""

import contextlib
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest
import tensorflow_datasets as tfds

import imagesets  # noqa: F401
from conftest import REPO, warm
from imagesets.building import build_lock
from imagesets.reports import page_pictures

HELD_BUILD = pathlib.Path(__file__).with_name("held_build.py")


def _start_held_build(data_dir, go_file) -> subprocess.Popen:
  # Its own process group: a failed test can still end its worker processes.
  process = subprocess.Popen([sys.executable, str(HELD_BUILD), str(data_dir), str(go_file)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
  lines = []  # TFDS prints its own lines to stdout first
  while (line := process.stdout.readline()) and line.strip() != "generating":
    lines.append(line)
  if not line:
    process.kill()
    pytest.fail(f"held build did not start: {lines}{process.communicate()[1][-3000:]}")
  return process


def _version_dir(data_dir) -> pathlib.Path:
  return pathlib.Path(data_dir) / "synthetic_images" / "tiny" / "1.0.0"


def test_next_build_removes_what_a_killed_build_left(tmp_path):
  held = _start_held_build(tmp_path, tmp_path / "never")
  (leftover,) = build_lock.leftovers(_version_dir(tmp_path))
  # train's shards are written on the build's writer thread: on a loaded machine they may
  # land a moment after "generating"
  deadline = time.monotonic() + 60
  while not list(leftover.glob("*.tfrecord-*")) and time.monotonic() < deadline:
    time.sleep(0.1)
  assert list(leftover.glob("*.tfrecord-*"))  # train written, test under way
  held.send_signal(signal.SIGKILL)  # the build alone, as the OOM killer or `kill -9` does
  try:  # its forked workers end too: they held its lock (and its output pipes) as orphans
    held.communicate(timeout=30)
  finally:
    with contextlib.suppress(ProcessLookupError):
      os.killpg(held.pid, signal.SIGKILL)
  assert leftover.is_dir()  # what TFDS alone would leave behind for good
  assert build_lock.lock_path(_version_dir(tmp_path)).exists()  # its owner is gone

  builder = tfds.builder("synthetic_images/tiny", data_dir=tmp_path)
  builder.download_and_prepare()
  assert not leftover.exists()
  assert build_lock.leftovers(_version_dir(tmp_path)) == []
  assert not build_lock.lock_path(_version_dir(tmp_path)).exists()
  assert len(list(builder.as_dataset(split="train"))) == 12


# Holds the lock of VERSION_DIR with a worker pool, as a build does, and prints the workers'
# pids. Their orphan watch is slowed down: a worker busy in a long call outlives its build.
ORPHANED_POOL = """
import os, sys
from imagesets.building import build_lock, parallel_map
parallel_map.ORPHAN_POLL_SECONDS = 600
with build_lock.hold(sys.argv[1], name="x/1.0.0"), parallel_map.executor(2) as pool:
  pool.submit(os.getpid).result()  # (a fork pool starts all its workers at once)
  print(*pool._processes, flush=True)
  sys.stdin.read()
"""


def test_the_orphaned_workers_of_a_killed_build_do_not_hold_its_lock(tmp_path):
  version_dir = tmp_path / "x" / "1.0.0"
  held = subprocess.Popen([sys.executable, "-c", ORPHANED_POOL, str(version_dir)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                          start_new_session=True)
  try:
    workers = [int(pid) for pid in held.stdout.readline().split()]
    assert len(workers) == 2, workers
    held.kill()
    held.wait()  # the build is gone (reaped)
    for pid in workers:
      os.kill(pid, 0)  # its workers are not (raises ProcessLookupError if one is)
    with build_lock.hold(version_dir, name="x/1.0.0"):  # not refused as "in progress"
      assert build_lock.lock_path(version_dir).read_text().startswith(f"pid {os.getpid()} ")
  finally:
    with contextlib.suppress(ProcessLookupError):
      os.killpg(held.pid, signal.SIGKILL)


def test_a_lock_let_go_within_the_grace_is_taken_not_refused(tmp_path):
  """As a build killed a moment ago: its process lets go of the lock as the kernel ends it,
  some milliseconds after `kill -9` returned (here: 0.3 s after the next build tried)."""
  version_dir = tmp_path / "x" / "1.0.0"
  version_dir.parent.mkdir()
  dying = subprocess.Popen(
      [sys.executable, "-c", "import fcntl, sys, time; lock = open(sys.argv[1], 'a+'); "
       "fcntl.flock(lock, fcntl.LOCK_EX); print('held', flush=True); time.sleep(0.3)",
       str(build_lock.lock_path(version_dir))], stdout=subprocess.PIPE, text=True)
  try:
    assert dying.stdout.readline().strip() == "held"
    start = time.monotonic()
    with build_lock.hold(version_dir, name="x/1.0.0"):
      waited = time.monotonic() - start
  finally:
    dying.kill()
    dying.wait()
  assert 0.1 < waited < build_lock.GRACE_SECONDS


def test_the_owner_line_replaces_a_longer_one_left_and_the_file_is_never_emptied(
    tmp_path, monkeypatch):
  """A lock file left by a killed build holds its longer line: the new owner's replaces it
  whole. The file is never cut to 0 bytes: ext4 (auto_da_alloc) writes a file emptied and
  written to disk on its close, a write the lock never needs."""
  version_dir = tmp_path / "x" / "1.0.0"
  version_dir.parent.mkdir()
  path = build_lock.lock_path(version_dir)
  path.write_text("pid 4194304 on a-much-longer-host-name.example, started 2026-01-01 "
                  "00:00:00 UTC and more")
  cut, before_cut = [], []  # (the lengths cut to; what another build read before the cut)
  real = os.ftruncate
  monkeypatch.setattr(build_lock.os, "ftruncate", lambda fd, length: (
      cut.append(length), before_cut.append(path.read_text()), real(fd, length))[2])
  with build_lock.hold(version_dir, name="x/1.0.0"):
    line = path.read_text()
  assert line.startswith(f"pid {os.getpid()} on ") and line.endswith(" UTC"), line
  assert cut and 0 not in cut
  assert [text.strip() for text in before_cut] == [line] * len(cut)  # (no stale tail)


def test_a_build_never_removes_the_folder_of_a_running_build(tmp_path):
  held = _start_held_build(tmp_path, tmp_path / "go")
  try:
    (running,) = build_lock.leftovers(_version_dir(tmp_path))
    with pytest.raises(build_lock.BuildInProgressError,
                       match=rf"synthetic_images/tiny/1.0.0 is being built by another process "
                             rf"\(pid {held.pid} on .*\) into {_version_dir(tmp_path)}"):
      tfds.builder("synthetic_images/tiny", data_dir=tmp_path).download_and_prepare()
    assert running.is_dir()
  finally:
    (tmp_path / "go").touch()
    out, err = held.communicate(timeout=120)
  assert held.returncode == 0 and out.strip().endswith("built"), err[-3000:]
  assert not running.exists()  # renamed into place by its own build
  assert _version_dir(tmp_path).is_dir()
  assert sorted(p.name for p in _version_dir(tmp_path).parent.iterdir()) == [
      page_pictures.FILE, "1.0.0"]  # (the page's pictures, kept for the next version's)


def test_two_concurrent_cli_builds_one_succeeds_the_other_says_one_line(tmp_path):
  held = _start_held_build(tmp_path, tmp_path / "go")
  try:
    second = subprocess.run(
        [warm("tfds"), "build", "datasets/synthetic_images", "--config", "tiny",
         "--data_dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True)
  finally:
    (tmp_path / "go").touch()
    _, err = held.communicate(timeout=120)
  assert held.returncode == 0, err[-3000:]
  assert second.returncode != 0
  last = second.stderr.strip().splitlines()[-1]
  assert last.startswith("error: synthetic_images/tiny/1.0.0 is being built by another process "
                         f"(pid {held.pid} on "), second.stderr[-3000:]
  assert "Traceback" not in second.stderr
  # The winner's data is complete and readable.
  builder = tfds.builder("synthetic_images/tiny", data_dir=tmp_path)
  assert len(list(builder.as_dataset(split="test"))) == 4


def test_children_forked_while_another_thread_takes_and_lets_go_of_locks_do_not_hang(tmp_path):
  """A fork while a thread of the build writes its lock file (two builds in two threads, or a
  build's pool started as another build begins): the child's at-fork handler must not wait
  on anything that thread held (buffered I/O's lock did: the child hung for good)."""
  stop = threading.Event()

  def builds(version_dir):
    while not stop.is_set():
      with build_lock.hold(version_dir, name="x/1.0.0"):
        pass

  threads = [threading.Thread(target=builds, args=(tmp_path / "x" / version,))
             for version in ("1.0.0", "2.0.0")]  # two: more forks land while one writes
  for thread in threads:
    thread.start()
  children = set()
  forks = 0
  try:
    end = time.monotonic() + 2
    while time.monotonic() < end:
      pid = os.fork()
      if pid == 0:
        os._exit(0)  # pylint: disable=protected-access
      children.add(pid)
      forks += 1
      children -= {pid for pid in list(children) if os.waitpid(pid, os.WNOHANG)[0]}
  finally:
    stop.set()
    for thread in threads:
      thread.join()
  deadline = time.monotonic() + 5  # those forked last: a moment to end
  while children and time.monotonic() < deadline:
    children -= {pid for pid in list(children) if os.waitpid(pid, os.WNOHANG)[0]}
    time.sleep(0.05)
  hung = sorted(children)
  for pid in hung:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
  assert hung == [], f"{len(hung)} of {forks} children hung"


# Builds with a child forked inside the lock (os.fork, as a library may do) that leaves by
# sys.exit: through hold()'s `finally`, in the child.
FORK_UNWINDS = """
import os, sys
from imagesets.building import build_lock
with build_lock.hold(sys.argv[1], name="x/1.0.0"):
  pid = os.fork()
  if pid == 0:
    sys.exit(0)
  os.waitpid(pid, 0)
  print("child ended", flush=True)
  sys.stdin.read()
"""


def test_a_forked_child_unwinding_through_hold_leaves_the_lock_to_its_build(tmp_path):
  version_dir = tmp_path / "x" / "1.0.0"
  building = subprocess.Popen([sys.executable, "-c", FORK_UNWINDS, str(version_dir)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
  try:
    assert building.stdout.readline().strip() == "child ended"
    assert build_lock.lock_path(version_dir).read_text().startswith(f"pid {building.pid} ")
    with pytest.raises(build_lock.BuildInProgressError, match=f"pid {building.pid} "):
      with build_lock.hold(version_dir, name="x/1.0.0"):
        pass
  finally:
    building.communicate("", timeout=60)
  assert building.returncode == 0
  assert not build_lock.lock_path(version_dir).exists()  # its build removed it at its end


def test_a_failed_first_build_leaves_no_folder_and_a_build_after_it_makes_one(tmp_path):
  with pytest.raises(RuntimeError, match="the build failed"):   # data dir, dataset, config
    with build_lock.hold(tmp_path / "d" / "voc" / "detection" / "1.0.0", "voc"):
      raise RuntimeError("the build failed")
  assert list(tmp_path.iterdir()) == []   # (all made by that build, left empty)
  version_dir = tmp_path / "pets" / "1.0.0"
  with pytest.raises(RuntimeError, match="the build failed"):
    with build_lock.hold(version_dir, "pets"):
      assert version_dir.parent.is_dir()
      raise RuntimeError("the build failed")
  assert not version_dir.parent.exists()   # (made by that build, left empty)
  version_dir.parent.mkdir()
  with pytest.raises(RuntimeError):
    with build_lock.hold(version_dir, "pets"):
      raise RuntimeError("the build failed")
  assert version_dir.parent.is_dir()       # (there before it: stays)
  # A build that found the folder and lost it to the failed build's cleanup makes it again.
  version_dir.parent.rmdir()
  lock = build_lock._locked(build_lock.lock_path(version_dir), "pets", version_dir)
  assert build_lock.lock_path(version_dir).is_file()
  build_lock._close(lock)


def test_a_folder_another_build_removes_as_this_one_makes_it_is_made_again(tmp_path,
                                                                          monkeypatch):
  """Two first builds of a name's versions: one that fails removes the empty dataset folder
  it made, while the other makes it (pathlib's `mkdir(exist_ok=True)` then raises
  FileExistsError: the folder was there, and gone when it checked it is one). The other
  build makes it again and goes on; a file in the way is still an error."""
  version_dir = tmp_path / "x" / "1.0.0"
  real, raised = pathlib.Path.mkdir, []

  def mkdir(self, *args, **kwargs):
    if self == version_dir.parent and not raised:  # (as if removed between its two steps)
      raised.append(self)
      raise FileExistsError(17, "File exists", str(self))
    return real(self, *args, **kwargs)

  monkeypatch.setattr(pathlib.Path, "mkdir", mkdir)
  with build_lock.hold(version_dir, name="x/1.0.0"):
    assert raised and build_lock.lock_path(version_dir).exists()
  (tmp_path / "y").write_text("a file")
  with pytest.raises(FileExistsError):
    with build_lock.hold(tmp_path / "y" / "1.0.0", name="y/1.0.0"):
      pass
