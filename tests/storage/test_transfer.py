"""transfer's part files: only a dead writer's is removed (never one in the gap between its
creation and its lock), and a part removed under a live download ends in one line."""

import fcntl
import hashlib
import os
import pathlib
import subprocess
import sys
import time

import pytest

from publish_helpers import small_version
from imagesets.publishing import publish
from imagesets.storage import bucket as bucket_lib
from imagesets.storage import fetch
from imagesets.storage import transfer
from imagesets.storage import versions


def _part(folder, pid, *, age=0.0):
  """An unlocked part file named as `part_path` names one, for writer `pid`."""
  path = folder / f".shard{transfer.PART}4-{pid}-{os.urandom(6).hex()}"
  path.write_bytes(b"1234")
  if age:
    when = time.time() - age
    os.utime(path, (when, when))
  return path


def test_only_parts_of_dead_or_long_gone_writers_are_removed(tmp_path):
  finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                            capture_output=True, text=True, check=True)
  dead = int(finished.stdout)
  fresh_live = _part(tmp_path, os.getpid())  # a writer between open("xb") and flock
  fresh_dead = _part(tmp_path, dead)
  old_live = _part(tmp_path, os.getpid(), age=60)
  locked = _part(tmp_path, dead, age=60)
  with open(locked, "rb") as holder:
    fcntl.flock(holder, fcntl.LOCK_EX)   # a writer downloading
    freed = transfer.remove_stale_parts(tmp_path)
    assert locked.exists()
  assert fresh_live.exists()
  assert not fresh_dead.exists() and not old_live.exists()
  assert freed == 8


def test_a_published_file_named_like_a_part_is_kept_and_streamed_once(
    tmp_path, monkeypatch, tiny_data_dir):
  """A version's own file may have ".part-" in its name: it is no part (those are hidden),
  so a resumed fetch or a stream's metadata check does not delete it, and a streamed
  version's metadata is not downloaded again at every open."""
  import shutil
  from publish_helpers import FOLDER, TINY
  from imagesets.reading import sources
  old = tmp_path / f"notes{transfer.PART}1-2-3.txt"
  old.write_bytes(b"kept")
  when = time.time() - 3600
  os.utime(old, (when, when))
  stale = _part(tmp_path, os.getpid(), age=60)
  assert transfer.remove_stale_parts(tmp_path) == 4 and old.exists() and not stale.exists()
  data = tmp_path / "data"
  shutil.copytree(tiny_data_dir, data)
  (data / FOLDER / f"notes{transfer.PART}1-2-3.txt").write_bytes(b"notes")
  url = f"file://{tmp_path / 'bucket'}"
  publish.publish(TINY, data, url, progress=False)
  downloads, real = [], transfer.checked_download
  monkeypatch.setattr(transfer, "checked_download", lambda bucket, rel, *args, **kwargs:
                      downloads.append(rel) or real(bucket, rel, *args, **kwargs))
  for _ in range(2):
    sources.open_source(TINY, url, cache_dir=tmp_path / "cache")
    stream = next((tmp_path / "cache").rglob(".stream-1.0.0"))
    for path in stream.iterdir():  # (an hour old: long past STALE_PART_SECONDS)
      os.utime(path, (when, when))
  assert downloads.count(f"{FOLDER}/notes{transfer.PART}1-2-3.txt") == 1


def test_a_part_removed_under_a_live_download_ends_in_one_line(tmp_path):
  data = b"the bytes of a shard"
  (tmp_path / "bucket").mkdir()
  (tmp_path / "bucket" / "shard").write_bytes(data)
  entry = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}

  class RemovedMidway(bucket_lib.Bucket):
    def copy_to(self, rel, out, *args, **kwargs):
      super().copy_to(rel, out, *args, **kwargs)
      for part in (tmp_path / "cache").glob(f"*{transfer.PART}*"):
        part.unlink()   # as another process's cleanup would

  (tmp_path / "cache").mkdir()
  target = tmp_path / "cache" / "shard"
  with pytest.raises(versions.PublishError) as error:
    transfer.checked_download(RemovedMidway(str(tmp_path / "bucket")), "shard", target,
                              entry, retry_seconds=0)
  message = str(error.value)
  assert "\n" not in message and "removed by another process" in message
  assert "retry" in message and not target.exists()


def test_a_file_with_a_long_name_is_fetched_through_a_part_file_named_short(tmp_path,
                                                                            monkeypatch):
  """A file name of 234 characters (within NAME_MAX: publish takes it): the name of its
  part file keeps only its start, so fetch gets the file too, downloaded once."""
  long = "x" * 230 + ".txt"
  small_version(tmp_path / "data", extra={long: b"notes"})
  url = str(tmp_path / "bucket")
  publish.publish("ds/cfg:1.0.0", tmp_path / "data", url, progress=False)
  downloads, download = [], transfer.checked_download

  def counted(bucket, rel, *args, **kwargs):
    downloads.append(rel)
    return download(bucket, rel, *args, **kwargs)
  monkeypatch.setattr(transfer, "checked_download", counted)
  data_dir = fetch.fetch(url, "ds/cfg:1.0.0", cache_dir=tmp_path / "cache", progress=False)
  assert (pathlib.Path(data_dir) / "ds/cfg/1.0.0" / long).read_bytes() == b"notes"
  assert downloads.count(f"ds/cfg/1.0.0/{long}") == 1
  parts = {transfer.part_path(tmp_path, "y" * 255, 10**15) for _ in range(2)}
  assert len(parts) == 2 and all(len(part.name) <= 255 for part in parts)


def test_what_a_version_no_longer_names_is_removed_its_files_hidden_names_and_links_kept(
    tmp_path):
  folder, victim = tmp_path / "staging", tmp_path / "victim"
  (folder / "a" / "old").mkdir(parents=True)
  victim.mkdir()
  (victim / "keep").write_text("not the cache's")
  for name in ("a/b", "a/old/x", "c", ".part-of-a-live-writer", "a/.another"):
    (folder / name).write_text(name)
  (folder / "d").symlink_to(victim)  # (where a folder of the version goes)
  (folder / "e").symlink_to(victim)  # (named by no file)
  transfer.remove_others(folder, ["a/b", "d/e"])
  left = {p.relative_to(folder).as_posix() for p in folder.rglob("*")}
  assert left == {"a", "a/b", ".part-of-a-live-writer", "a/.another", "d", "e"}
  assert [p.name for p in victim.iterdir()] == ["keep"]
