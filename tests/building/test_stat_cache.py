"""stat_cache: a tree's file hashes without reading unchanged files; a changed file is
always read again (git's index rules, its racy case included)."""

import hashlib
import json
import os
import pathlib
import threading
import types

import pytest

from imagesets.building import fingerprints
from imagesets.building import stat_cache
from imagesets_testing import photo_crops

SECOND = 10**9


class Clock:
  """A file system's times and the clock, as a build sees them: `stat` gives the real
  size, inode and device of each file and the times the test set for it."""

  def __init__(self):
    self.now = 1_000 * SECOND
    self.times = {}   # path -> (mtime_ns, ctime_ns)

  def write(self, path: pathlib.Path, data: bytes, *, mtime=None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    self.times[str(path)] = (self.now if mtime is None else mtime, self.now)

  def stat(self, path: str):
    real = os.stat(path)
    mtime, ctime = self.times[path]
    return types.SimpleNamespace(st_size=real.st_size, st_mtime_ns=mtime, st_ctime_ns=ctime,
                                 st_ino=real.st_ino, st_dev=real.st_dev)


def _photos(count):
  """JPEG crops of real photos."""
  return [data for _, data in photo_crops.jpegs(count)]


class Counted:
  def __init__(self):
    self.read = []

  def __call__(self, root, paths):
    self.read += paths
    return {p: hashlib.sha256((pathlib.Path(root) / p).read_bytes()).hexdigest() for p in paths}


def _hashes(root, paths, cache, clock, counted, reread=False):
  hashed = stat_cache.file_hashes(str(root), paths, cache, counted, reread=reread,
                                  stat=clock.stat, now_ns=lambda: clock.now)
  hashed.save()
  return hashed.hashes


def _truth(root, paths):
  return {p: hashlib.sha256((root / p).read_bytes()).hexdigest() for p in paths}


def test_unchanged_files_are_not_read_and_changed_ones_always_are(tmp_path):
  clock, root, cache = Clock(), tmp_path / "tree", tmp_path / "data" / "pets" / stat_cache.FILE
  photos = _photos(4)
  paths = [f"cats/{i}.jpg" for i in range(4)]
  for path, data in zip(paths, photos):
    clock.write(root / path, data)
  clock.now += 10 * SECOND   # the first build, 10 s after the photos were written
  counted = Counted()
  assert _hashes(root, paths, cache, clock, counted) == _truth(root, paths)
  assert sorted(counted.read) == paths
  clock.now += 60 * SECOND
  counted = Counted()
  assert _hashes(root, paths, cache, clock, counted) == _truth(root, paths)
  assert counted.read == []   # nothing changed: nothing read
  counted = Counted()   # a full build reads every file (what no stat shows: an mmap write)
  assert _hashes(root, paths, cache, clock, counted, reread=True) == _truth(root, paths)
  assert sorted(counted.read) == paths
  # later: one photo's bytes replaced, same size, its modification time put back
  # (touch -d, cp -p): its change time is the clock's
  original = clock.times[str(root / paths[1])][0]
  same_size = photos[1][:100] + bytes(255 - b for b in photos[1][100:200]) + photos[1][200:]
  clock.write(root / paths[1], same_size, mtime=original)
  # one replaced by a rename, at the same size and times as the file it replaces
  times = clock.times[str(root / paths[2])]
  clock.write(tmp_path / "new.jpg", (photos[3] + b"\0" * len(photos[2]))[:len(photos[2])])
  os.replace(tmp_path / "new.jpg", root / paths[2])
  clock.times[str(root / paths[2])] = times
  clock.now += 60 * SECOND
  counted = Counted()
  assert _hashes(root, paths, cache, clock, counted) == _truth(root, paths)
  assert sorted(counted.read) == [paths[1], paths[2]]


@pytest.mark.parametrize("mtime_back", [0, 86_400], ids=["written", "mtime put back a day"])
def test_a_write_in_the_same_tick_as_its_hash_is_read_again(mtime_back, tmp_path):
  # git's racy clean: a photo written (or given an old mtime: cp -p, touch -d) a second
  # before the build, and written again in the same clock tick after it was hashed, has
  # the same size and times: it is never trusted.
  clock, root, cache = Clock(), tmp_path / "tree", tmp_path / stat_cache.FILE
  first, second = _photos(2)
  second = (second + b"\0" * len(first))[:len(first)]
  clock.write(root / "a.jpg", first, mtime=clock.now - mtime_back * SECOND)
  clock.now += SECOND
  _hashes(root, ["a.jpg"], cache, clock, Counted())
  times = clock.times[str(root / "a.jpg")]
  clock.write(root / "a.jpg", second)
  clock.times[str(root / "a.jpg")] = times   # the same tick: every time equal
  clock.now += 60 * SECOND
  counted = Counted()
  assert _hashes(root, ["a.jpg"], cache, clock, counted) == _truth(root, ["a.jpg"])
  assert counted.read == ["a.jpg"]


def test_a_cache_of_another_root_or_with_a_digest_not_hex_is_not_used(tmp_path):
  clock, cache = Clock(), tmp_path / stat_cache.FILE
  clock.write(tmp_path / "one" / "a.jpg", _photos(1)[0])
  (tmp_path / "two").symlink_to(tmp_path / "one")   # the same file, under another root
  clock.times[str(tmp_path / "two" / "a.jpg")] = clock.times[str(tmp_path / "one" / "a.jpg")]
  clock.now += 60 * SECOND
  _hashes(tmp_path / "one", ["a.jpg"], cache, clock, Counted())
  counted = Counted()
  _hashes(tmp_path / "two", ["a.jpg"], cache, clock, counted)
  assert counted.read == ["a.jpg"]
  held = json.loads(cache.read_text())   # (now of root "two")
  held["files"]["a.jpg"][-1] = "Z" * 64
  cache.write_text(json.dumps(held))
  counted = Counted()
  assert _hashes(tmp_path / "two", ["a.jpg"], cache, clock, counted) == _truth(
      tmp_path / "one", ["a.jpg"])
  assert counted.read == ["a.jpg"]


@pytest.mark.parametrize("held", [
    b"not json", b"[]", b'{"format": 1}', b'{"format": 99, "root": "R", "checked_ns": 0, "files": {}}',
    b'{"format": 1, "root": "R", "checked_ns": 99999999999999999999, "files": {"a.jpg": [1]}}',
    b'{"format": 1, "root": "R", "checked_ns": 99999999999999999999, '
    b'"files": {"a.jpg": [1, 2, 3, 4, 5, "short"]}}',
    b'{"format": 1, "root": "R", "checked_ns": 1e400, "files": {}}',
    b'{"format": 1, "root": "R", "checked_ns": 99999999999999999999, '
    b'"files": {"a.jpg": [1e400, 2, 3, 4, 5, "' + b"z" * 64 + b'"]}}',
    b'{"format": 1, "root": "R", "checked_ns": 99999999999999999999, "files": ' + b"[" * 100_000
    + b"]" * 100_000 + b'}',
    b'{"format": 1, "root": "elsewhere", "checked_ns": 99999999999999999999, "files": {}}'])
def test_a_cache_that_cannot_be_used_is_ignored_and_written_again(held, tmp_path):
  clock, root, cache = Clock(), tmp_path / "tree", tmp_path / stat_cache.FILE
  clock.write(root / "a.jpg", _photos(1)[0])
  clock.now += 60 * SECOND
  cache.write_bytes(held.replace(b'"R"', json.dumps(str(root)).encode()))
  counted = Counted()
  assert _hashes(root, ["a.jpg"], cache, clock, counted) == _truth(root, ["a.jpg"])
  assert counted.read == ["a.jpg"]
  assert json.loads(cache.read_text())["files"]["a.jpg"][-1] == _truth(root, ["a.jpg"])["a.jpg"]


@pytest.mark.parametrize("kind", ["fifo", "link", "too large"])
def test_a_cache_that_is_not_a_file_of_ours_is_not_waited_on_nor_read_whole(
    kind, tmp_path, monkeypatch):
  """A FIFO there would block a plain read until something writes to it (the build would
  hang), a link may lead anywhere, a huge file would be read whole: each is ignored (the
  link and the large file hold a cache that would be trusted, with a wrong hash)."""
  clock, root, cache = Clock(), tmp_path / "tree", tmp_path / stat_cache.FILE
  clock.write(root / "a.jpg", _photos(1)[0])
  clock.now += 60 * SECOND
  held = clock.stat(str(root / "a.jpg"))
  lie = json.dumps({"format": 1, "root": str(root), "checked_ns": clock.now, "files": {
      "a.jpg": [held.st_size, held.st_mtime_ns, held.st_ctime_ns, held.st_ino, held.st_dev,
                "0" * 64]}})
  if kind == "fifo":
    os.mkfifo(cache)
  elif kind == "link":
    (tmp_path / "elsewhere.json").write_text(lie)
    cache.symlink_to(tmp_path / "elsewhere.json")
  else:
    monkeypatch.setattr(stat_cache, "_MAX_BYTES", len(lie) - 1)
    cache.write_text(lie)
  done = []
  reader = threading.Thread(target=lambda: done.append(
      _hashes(root, ["a.jpg"], cache, clock, Counted())), daemon=True)
  reader.start()
  reader.join(30)
  assert done == [_truth(root, ["a.jpg"])]


def test_a_real_tree_hashed_right_after_it_was_written_is_read_whole_again(tmp_path,
                                                                         monkeypatch):
  root = tmp_path / "tree"
  paths = ["cats/a.jpg", "dogs/b.jpg"]
  for path, data in zip(paths, _photos(2)):
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_bytes(data)
  cache = tmp_path / stat_cache.FILE
  fingerprints.cached_file_hashes(str(root), paths, cache).save()
  read, sha256 = [], fingerprints._file_sha256
  monkeypatch.setattr(fingerprints, "_file_sha256", lambda root, path: read.append(path)
                      or sha256(root, path))
  stat = os.stat(root / paths[0])
  data = (root / paths[0]).read_bytes()
  (root / paths[0]).write_bytes(data[::-1])   # same size, other bytes, times put back
  os.utime(root / paths[0], ns=(stat.st_atime_ns, stat.st_mtime_ns))
  assert fingerprints.cached_file_hashes(str(root), paths, cache).hashes == _truth(root, paths)
  assert sorted(read) == paths   # (written within RACY_SECONDS of their hash: none trusted)
