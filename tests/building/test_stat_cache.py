"""stat_cache: a tree's file hashes without reading unchanged files; a changed file is
always read again (git's index rules, its racy case included)."""

import hashlib
import json
import os
import pathlib
import time
import types

import pytest

from hang_guard import returns_within
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
  held["sha256"] = "Z" * 64
  cache.write_text(json.dumps(held))
  counted = Counted()
  assert _hashes(tmp_path / "two", ["a.jpg"], cache, clock, counted) == _truth(
      tmp_path / "one", ["a.jpg"])
  assert counted.read == ["a.jpg"]


def _held(root: str, checked: int, paths: list, keys: list, digests: str, **more) -> bytes:
  """A cache's bytes, as `stat_cache` writes them (format 2: columns)."""
  return json.dumps({"format": 2, "root": root, "checked_ns": checked, "paths": paths,
                     "keys": keys, "sha256": digests, **more}).encode()


_BIG = 99999999999999999999


@pytest.mark.parametrize("held", [
    b"not json", b"[]", b'{"format": 2}',
    _held("R", 0, [], [], "", format=99),
    _held("R", _BIG, ["a.jpg"], [1], "0" * 64),
    _held("R", _BIG, ["a.jpg"], [1, 2, 3, 4, 5], "short"),
    _held("R", _BIG, ["a.jpg"], [1, 2, 3, 4, 5], "0" * 63 + "g"),
    _held("R", 1e400, [], [], ""),
    _held("R", _BIG, ["a.jpg"], [1e400, 2, 3, 4, 5], "0" * 64),
    _held("R", _BIG, ["a.jpg"], [True, 2, 3, 4, 5], "0" * 64),
    _held("R", _BIG, [["a.jpg"]], [1, 2, 3, 4, 5], "0" * 64),
    _held("R", _BIG, "a.jpg", [1, 2, 3, 4, 5], "0" * 64),
    b'{"format": 2, "root": "R", "checked_ns": 99999999999999999999, "paths": '
    + b"[" * 100_000 + b"]" * 100_000 + b'}',
    _held("elsewhere", _BIG, [], [], "")])
def test_a_cache_that_cannot_be_used_is_ignored_and_written_again(held, tmp_path):
  clock, root, cache = Clock(), tmp_path / "tree", tmp_path / stat_cache.FILE
  clock.write(root / "a.jpg", _photos(1)[0])
  clock.now += 60 * SECOND
  cache.write_bytes(held.replace(b'"R"', json.dumps(str(root)).encode()))
  counted = Counted()
  assert _hashes(root, ["a.jpg"], cache, clock, counted) == _truth(root, ["a.jpg"])
  assert counted.read == ["a.jpg"]
  written = json.loads(cache.read_text())
  assert (written["paths"], written["sha256"]) == (["a.jpg"], _truth(root, ["a.jpg"])["a.jpg"])


@pytest.mark.parametrize("kind", ["format 1", "a float", "a bool", "columns misaligned",
                                  "keys misaligned"])
def test_an_entry_that_matches_the_stat_in_a_cache_not_as_written_is_not_trusted(kind, tmp_path):
  """Each cache below holds the file's very stat with a wrong digest, so trusting it would
  give a wrong hash: an object per file (format 1, before columns), a time as a float or
  a bool that equals it, a digest column one path too long, a number too many."""
  clock, root, cache = Clock(), tmp_path / "tree", tmp_path / stat_cache.FILE
  clock.write(root / "a.jpg", _photos(1)[0])
  clock.now += 60 * SECOND
  stat = clock.stat(str(root / "a.jpg"))
  numbers = [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev]
  if kind == "format 1":
    held = json.dumps({"format": 1, "root": str(root), "checked_ns": clock.now, "files": {
        "a.jpg": [*numbers, "0" * 64]}}).encode()
  elif kind == "a float":
    held = _held(str(root), clock.now, ["a.jpg"], [float(numbers[0]), *numbers[1:]], "0" * 64)
  elif kind == "a bool":
    clock.write(root / "a.jpg", b"x", mtime=1)
    clock.times[str(root / "a.jpg")] = (1, 1)
    stat = clock.stat(str(root / "a.jpg"))
    held = _held(str(root), clock.now, ["a.jpg"], [True, True, True, stat.st_ino, stat.st_dev],
                 "0" * 64)
  elif kind == "columns misaligned":
    held = _held(str(root), clock.now, ["a.jpg"], numbers, "0" * 128)
  else:
    held = _held(str(root), clock.now, ["a.jpg"], [*numbers, 7], "0" * 64)
  cache.write_bytes(held)
  counted = Counted()
  assert _hashes(root, ["a.jpg"], cache, clock, counted) == _truth(root, ["a.jpg"])
  assert counted.read == ["a.jpg"]


def test_a_cache_as_written_is_trusted_column_by_column(tmp_path):
  """The columns line up: of 300 real photos, each unchanged one takes its own digest from
  the cache, and only the two changed are read."""
  clock, root, cache = Clock(), tmp_path / "tree", tmp_path / stat_cache.FILE
  paths = [f"c{i % 7}/{i:03d}.jpg" for i in range(300)]
  for path, data in zip(paths, _photos(300)):
    clock.write(root / path, data)
  clock.now += 60 * SECOND
  _hashes(root, paths, cache, clock, Counted())
  clock.now += 60 * SECOND
  for path in (paths[5], paths[250]):
    clock.write(root / path, (root / path).read_bytes()[::-1])
  clock.now += 60 * SECOND
  counted = Counted()
  assert _hashes(root, paths, cache, clock, counted) == _truth(root, paths)
  assert sorted(counted.read) == [paths[5], paths[250]]


def test_a_cache_encoded_before_it_is_saved_is_the_cache_save_writes(tmp_path, monkeypatch):
  """`encode` (a build runs it while its workers group) makes what `save` then writes,
  once: the same bytes as a save alone, and a later build trusts it as one."""
  clock, root = Clock(), tmp_path / "tree"
  paths = [f"c{i % 3}/{i:02d}.jpg" for i in range(40)]
  for path, data in zip(paths, _photos(40)):
    clock.write(root / path, data)
  clock.now += 60 * SECOND
  made = []
  encoded = stat_cache._encoded
  monkeypatch.setattr(stat_cache, "_encoded", lambda *args: made.append(1) or encoded(*args))
  caches = []
  for early in (False, True):
    cache = tmp_path / f"{early}" / stat_cache.FILE
    cache.parent.mkdir()
    hashed = stat_cache.file_hashes(str(root), paths, cache, Counted(), stat=clock.stat,
                                    now_ns=lambda: clock.now)
    if early:
      hashed.encode()
      assert len(made) == 2 and not cache.exists()
    hashed.save()
    caches.append(cache)
  assert len(made) == 2 and caches[0].read_bytes() == caches[1].read_bytes()
  counted = Counted()
  assert stat_cache.file_hashes(str(root), paths, caches[1], counted, stat=clock.stat,
                                now_ns=lambda: clock.now).hashes == _truth(root, paths)
  assert counted.read == []


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
  lie = _held(str(root), clock.now, ["a.jpg"], [
      held.st_size, held.st_mtime_ns, held.st_ctime_ns, held.st_ino, held.st_dev],
      "0" * 64).decode()
  if kind == "fifo":
    os.mkfifo(cache)
  elif kind == "link":
    (tmp_path / "elsewhere.json").write_text(lie)
    cache.symlink_to(tmp_path / "elsewhere.json")
  else:
    monkeypatch.setattr(stat_cache, "_MAX_BYTES", len(lie) - 1)
    cache.write_text(lie)
  assert returns_within(30, _hashes, root, ["a.jpg"], cache, clock, Counted(),
                        what="a cache read") == _truth(root, ["a.jpg"])


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


@pytest.mark.parametrize("cores, runs", [(2, 1), (3, 2), (16, 2)])
def test_stats_begun_on_worker_processes_are_the_stats_taken_here(cores, runs, tmp_path,
                                                                  monkeypatch):
  """`stat_on`: the workers' keys, in the paths' order, with the clock read before them, in
  a run a core beside this process's (on two cores, one worker stats, the other idle); the
  cache then gives what it gives with the stats taken in this process."""
  from imagesets.building import parallel_map
  monkeypatch.setattr(parallel_map, "available_cores", lambda: cores)
  root, cache = tmp_path / "tree", tmp_path / stat_cache.FILE
  paths = [f"c{i % 3}/{i:02d}.jpg" for i in range(37)]
  for path, data in zip(paths, _photos(37)):
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_bytes(data)
  with parallel_map.executor(2) as pool:
    events, submit = [], pool.submit
    pool.submit = lambda *args: events.append("stat") or submit(*args)
    begun = stat_cache.stat_on(pool, str(root), paths,
                               now_ns=lambda: events.append("clock") or 123)
    assert events == ["clock"] + ["stat"] * runs  # (the clock read before any stat)
    assert begun.checked == 123 and len(begun.chunks) == runs
    assert begun.results()[0] == {p: stat_cache.key(os.stat(root / p)) for p in paths}
    with pytest.raises(ValueError, match="other files"):
      stat_cache.file_hashes(str(root), paths[1:], cache, Counted(), stats=begun)
    with pytest.raises(ValueError, match="other files"):  # (the same names in another tree)
      stat_cache.file_hashes(str(tmp_path / "copy"), paths, cache, Counted(), stats=begun)
    hashed = stat_cache.file_hashes(str(root), paths, cache, Counted(), stats=begun)
  assert hashed.checked == 123 and hashed.hashes == _truth(root, paths)
  assert hashed.stats == begun.results()[0]


def test_workers_look_the_files_up_in_the_cache_and_trust_what_this_process_would(
    tmp_path, monkeypatch, caplog):
  """`stat_on(cache=)`: the workers read the cache and keep what it trusts for their files;
  the caller reads it no more. The same hashes, files read and entries written as the
  cache read here gives: unchanged photos taken from it, a photo rewritten with its size
  and times put back (its change time moves) and one grown are read again; a cache that
  cannot be read is said once and every photo read."""
  from imagesets.building import parallel_map
  root, cache = tmp_path / "tree", tmp_path / stat_cache.FILE
  paths = [f"c{i % 3}/{i:02d}.jpg" for i in range(41)]
  for path, data in zip(paths, _photos(41)):
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_bytes(data)
  later = lambda: time.time_ns() + 60 * SECOND  # (no photo written in the racy seconds)
  stat_cache.file_hashes(str(root), paths, cache, Counted(), now_ns=later).save()
  rewritten, grown = root / paths[4], root / paths[30]
  before = os.stat(rewritten)
  rewritten.write_bytes(rewritten.read_bytes()[::-1])
  os.utime(rewritten, ns=(before.st_atime_ns, before.st_mtime_ns))
  grown.write_bytes(grown.read_bytes() + b"\0")
  here = Counted()
  expected = stat_cache.file_hashes(str(root), paths, cache, here, now_ns=later)
  assert sorted(here.read) == sorted([paths[4], paths[30]])
  monkeypatch.setattr(parallel_map, "available_cores", lambda: 3)  # (two runs: the paths cut)
  with parallel_map.executor(2) as pool:  # (its workers forked: the patch below is ours only)
    monkeypatch.setattr(stat_cache, "_read_trusted", lambda *args: pytest.fail("read here"))
    begun = stat_cache.stat_on(pool, str(root), paths, now_ns=later, cache=cache)
    counted = Counted()
    hashed = stat_cache.file_hashes(str(root), paths, cache, counted, stats=begun)
    assert len(begun.chunks) == 2 and hashed.hashes == expected.hashes == _truth(root, paths)
    assert sorted(counted.read) == sorted(here.read)
    assert hashed.stats == expected.stats
    reread = Counted()  # (`reread`: every photo read, whatever the workers looked up)
    assert stat_cache.file_hashes(str(root), paths, cache, reread, reread=True,
                                  stats=begun).hashes == expected.hashes
    assert sorted(reread.read) == sorted(paths)
    # (a cache of its own: read here as `file_hashes` was asked, not the workers' lookups)
    with pytest.raises(pytest.fail.Exception, match="read here"):
      stat_cache.file_hashes(str(root), paths, tmp_path / "other.json", Counted(), stats=begun)
    monkeypatch.undo()
    cache.write_text('{"format": 2, "root": ' + json.dumps(str(root)) + ', "checked_ns": 1.5}')
    caplog.clear()
    begun = stat_cache.stat_on(pool, str(root), paths, cache=cache)
    counted = Counted()
    assert stat_cache.file_hashes(str(root), paths, cache, counted, stats=begun).hashes == (
        _truth(root, paths))
  assert sorted(counted.read) == sorted(paths)
  assert [r.getMessage() for r in caplog.records] == [
      f"{cache}: not a file-hash cache (TypeError): every file is read"]


def test_stats_begun_after_a_change_of_folder_are_of_the_callers_relative_paths(
    tmp_path, monkeypatch):
  """`stat_on` with a relative root and cache, the working folder changed since the
  workers were forked: they stat this process's files and read its cache (each worker kept
  the folder it was forked in), and `file_hashes` takes what they trusted."""
  from imagesets.building import parallel_map
  root = tmp_path / "tree"
  paths = [f"c{i % 2}/{i:02d}.jpg" for i in range(9)]
  for path, data in zip(paths, _photos(9)):
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_bytes(data)
  later = lambda: time.time_ns() + 60 * SECOND  # (no photo written in the racy seconds)
  monkeypatch.chdir(tmp_path)
  stat_cache.file_hashes("tree", paths, stat_cache.FILE, Counted(), now_ns=later).save()
  monkeypatch.chdir(tmp_path.parent)
  with parallel_map.executor(2) as pool:  # (forked here)
    monkeypatch.chdir(tmp_path)
    begun = stat_cache.stat_on(pool, "tree", paths, cache=stat_cache.FILE, now_ns=later)
    keys, trusted, _ = begun.results()
    assert keys == {p: stat_cache.key(os.stat(root / p)) for p in paths}
    assert trusted == _truth(root, paths)   # (the workers read this process's cache)
    counted = Counted()
    hashed = stat_cache.file_hashes("tree", paths, stat_cache.FILE, counted, stats=begun)
    assert hashed.hashes == _truth(root, paths) and counted.read == []
    monkeypatch.chdir(tmp_path.parent)  # (another "tree": not the one the workers stat)
    with pytest.raises(ValueError, match="other files"):
      stat_cache.file_hashes("tree", paths, stat_cache.FILE, Counted(), stats=begun)


def test_stats_begun_follow_the_path_as_the_kernel_does(tmp_path):
  """A relative root with ".." after a symlink names the link target's parent's folder,
  as the caller's own reads find it: the workers stat those files, not the ones a
  normalised path names (whose digests would then be saved under the others' keys)."""
  from imagesets.building import parallel_map
  (tmp_path / "a" / "sub").mkdir(parents=True)
  (tmp_path / "link").symlink_to(tmp_path / "a" / "sub")
  paths = ["c/x.jpg"]
  for tree, data in zip(("a/tree", "tree"), _photos(2)):  # (a/tree: the one the kernel finds)
    (tmp_path / tree / paths[0]).parent.mkdir(parents=True)
    (tmp_path / tree / paths[0]).write_bytes(data)
  root = str(tmp_path / "link" / ".." / "tree")
  with parallel_map.executor(2) as pool:
    begun = stat_cache.stat_on(pool, root, paths)
    assert begun.results()[0] == {paths[0]: stat_cache.key(os.stat(tmp_path / "a/tree/c/x.jpg"))}


def test_stats_begun_are_keyed_as_file_hashes_asks(tmp_path):
  """`stat_on(key_of=)` keys the files as the workers stat them; `file_hashes` refuses
  stats keyed otherwise than it is asked to key them, or with a `stat` of its own."""
  from imagesets.building import parallel_map
  root = tmp_path / "tree"
  paths = [f"c/{i}.jpg" for i in range(3)]
  for path, data in zip(paths, _photos(3)):
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_bytes(data)
  cache = tmp_path / stat_cache.FILE
  with parallel_map.executor(2) as pool:
    plain = stat_cache.stat_on(pool, str(root), paths)
    across = stat_cache.stat_on(pool, str(root), paths, key_of=stat_cache.key_across_links)
    assert across.results()[0] == {p: stat_cache.key_across_links(os.stat(root / p))
                                   for p in paths}
    with pytest.raises(ValueError, match="keyed otherwise"):
      stat_cache.file_hashes(str(root), paths, cache, Counted(), stats=plain,
                             key_of=stat_cache.key_across_links)
    with pytest.raises(ValueError, match="keyed otherwise"):
      stat_cache.file_hashes(str(root), paths, cache, Counted(), stats=plain,
                             stat=Clock().stat)
    hashed = stat_cache.file_hashes(str(root), paths, cache, Counted(), stats=across,
                                    key_of=stat_cache.key_across_links)
  assert hashed.stats == across.results()[0] and hashed.hashes == _truth(root, paths)


def test_stats_of_an_absolute_root_need_no_working_folder(tmp_path, monkeypatch):
  """An absolute root is taken as it is: a working folder since removed is no error."""
  from imagesets.building import parallel_map
  root = tmp_path / "tree"
  (root / "c").mkdir(parents=True)
  (root / "c" / "x.jpg").write_bytes(_photos(1)[0])
  (tmp_path / "gone").mkdir()
  monkeypatch.chdir(tmp_path / "gone")
  (tmp_path / "gone").rmdir()
  with parallel_map.executor(2) as pool:
    begun = stat_cache.stat_on(pool, str(root), ["c/x.jpg"])
    assert stat_cache.file_hashes(str(root), ["c/x.jpg"], tmp_path / "cache.json", Counted(),
                                  stats=begun).hashes == _truth(root, ["c/x.jpg"])
