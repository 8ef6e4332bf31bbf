"""shard_hashes: a version's shards are not read again while they are the files hashed;
one changed since (bytes, a replacement, a removal) is read, and linking a kept shard into
the next version does not make it untrusted."""

import hashlib
import os
import pathlib
import time

import pytest

from imagesets.building import shard_hashes
from imagesets.building import stat_cache

LATER = 10 * 10**9   # the build's end, past the racy margin after its shards were written


def write_version(folder: pathlib.Path, count: int = 6) -> dict[str, str]:
  """`count` shards of distinct bytes in `folder`; {name: SHA-256}."""
  folder.mkdir(parents=True)
  written = {}
  for i in range(count):
    data = os.urandom(1000 + i)
    (folder / f"pets-train.tfrecord-{i:05d}-of-{count:05d}").write_bytes(data)
    written[f"pets-train.tfrecord-{i:05d}-of-{count:05d}"] = hashlib.sha256(data).hexdigest()
  return written


class Reads:
  """A `hash_files` that counts the shards it reads."""

  def __init__(self):
    self.paths = []

  def __call__(self, paths):
    self.paths += [p.name for p in paths]
    out = []
    for path in paths:
      try:
        out.append(hashlib.sha256(path.read_bytes()).hexdigest())
      except OSError as why:
        out.append(why)
    return out


def record(version: pathlib.Path, written: dict[str, str]) -> None:
  """`shard_hashes.save` as a build does: the clock, then each shard's stat, then (as
  `written` was) its hash."""
  checked = shard_hashes.now()
  shard_hashes.save(version, version.name,
                    {name: (shard_hashes.key_of(version / name), digest)
                     for name, digest in written.items()}, checked)


@pytest.fixture
def saved(tmp_path, monkeypatch):
  """pets/1.0.0's shards, recorded LATER than they were written."""
  version = tmp_path / "pets" / "1.0.0"
  written = write_version(version)
  monkeypatch.setattr(shard_hashes, "_now_ns", lambda: time.time_ns() + LATER)
  record(version, written)
  return version, written


def test_unchanged_shards_are_not_read_and_a_link_keeps_them_trusted(saved):
  version, written = saved
  reads = Reads()
  assert shard_hashes.hashes(version, list(written), reads).digests == written
  assert reads.paths == []
  # The next version links the shards it keeps: their change time moves, not their bytes.
  later = version.parent / "1.1.0"
  later.mkdir()
  for name in written:
    os.link(version / name, later / name)
  assert shard_hashes.hashes(version, list(written), reads).digests == written
  assert reads.paths == []


def test_a_changed_replaced_or_removed_shard_is_read(saved):
  version, written = saved
  names = sorted(written)
  rewritten = bytearray((version / names[0]).read_bytes())
  rewritten[10] ^= 1
  before = os.stat(version / names[0])
  (version / names[0]).write_bytes(bytes(rewritten))           # same size, same inode,
  os.utime(version / names[0], ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))  # later
  replacement = version / "replacement"
  replacement.write_bytes((version / names[1]).read_bytes())
  stat = os.stat(version / names[1])
  os.utime(replacement, ns=(stat.st_atime_ns, stat.st_mtime_ns))
  replacement.rename(version / names[1])                       # same bytes and times, new inode
  (version / names[2]).unlink()
  reads = Reads()
  found = shard_hashes.hashes(version, names, reads).digests
  assert found[names[0]] == hashlib.sha256(bytes(rewritten)).hexdigest() != written[names[0]]
  assert isinstance(found[names[2]], FileNotFoundError)
  assert sorted(reads.paths) == sorted(names)  # (a shard gone: each is read, saying why)
  del found[names[2]]
  (version / names[2]).write_bytes(b"back")
  reads = Reads()
  found = shard_hashes.hashes(version, names, reads).digests
  assert sorted(reads.paths) == names[:3]
  assert {n: found[n] for n in names[3:]} == {n: written[n] for n in names[3:]}


def test_shards_written_just_before_the_record_are_read_again(tmp_path):
  """git's racy case: a write in the same clock tick as the record would leave every time
  equal, so a shard newer than RACY_SECONDS at the record is not trusted."""
  version = tmp_path / "pets" / "1.0.0"
  written = write_version(version)
  record(version, written)
  reads = Reads()
  assert shard_hashes.hashes(version, list(written), reads).digests == written
  assert sorted(reads.paths) == sorted(written)


def test_only_the_recorded_version_and_folder_are_trusted(saved, tmp_path):
  version, written = saved
  copy = tmp_path / "elsewhere" / "pets" / "1.0.0"
  copy.parent.mkdir(parents=True)
  os.link(version.parent / shard_hashes.FILE, copy.parent / shard_hashes.FILE)
  copy.mkdir()
  for name in written:
    os.link(version / name, copy / name)  # (the very files, through another folder)
  reads = Reads()
  assert shard_hashes.hashes(copy, list(written), reads).digests == written
  assert sorted(reads.paths) == sorted(written)
  other = version.parent / "0.9.0"
  other.mkdir()
  for name in written:
    os.link(version / name, other / name)
  reads = Reads()
  assert shard_hashes.hashes(other, list(written), reads).digests == written
  assert sorted(reads.paths) == sorted(written)


def test_a_damaged_cache_means_every_shard_is_read(saved):
  version, written = saved
  (version.parent / shard_hashes.FILE).write_text('{"format": 1, "root": 7')
  reads = Reads()
  assert shard_hashes.hashes(version, list(written), reads).digests == written
  assert sorted(reads.paths) == sorted(written)


def test_the_change_time_is_left_out_only_of_the_shards_key():
  stat = os.stat(__file__)
  assert stat_cache.key(stat)[2] == stat.st_ctime_ns
  assert stat_cache.key_across_links(stat) == (stat.st_size, stat.st_mtime_ns, 0,
                                               stat.st_ino, stat.st_dev)
