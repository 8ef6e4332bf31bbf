"""The SHA-256 of a local tree's files without reading the unchanged ones, as git's index
does: a file whose size, modification and change times, inode and device are those it had
when it was hashed holds the same bytes.

A changed file is never taken for unchanged:
* writing a file changes its modification time; restoring that time (`touch -d`,
  `os.utime`, `cp -p`) sets its change time (ctime), which no call but the kernel's clock
  sets; a file replaced by a rename has another inode;
* a write within the timestamps' granularity of the hash (git's "racy clean" case: a
  second write in the same clock tick leaves every time equal) is caught by trusting only
  entries whose times were older than the stat that went with the hash by RACY_SECONDS:
  a file written shortly before a build is hashed again at the next one.
What it cannot see (a full build reads every file): a file written through a shared
memory map after its first written page (Linux updates the times once), a network file
system's client showing cached attributes (NFS: up to 60 s), a server whose clock lags
this machine's by more than RACY_SECONDS, a clock set back, bytes rotting on disk.
Bucket trees (gs://, s3://) are always read.

The cache is a JSON file beside a name's versions (`FILE`), written after a build, in
columns (the paths; their keys' numbers, five a path; their SHA-256s as one string); one
that cannot be read, or of another format, is ignored (every file is hashed, and the file
written again).
"""

import dataclasses
import itertools
import json
import logging
import os
import pathlib
import re
import time
from typing import Callable

from imagesets.building import parallel_map
from imagesets.storage import atomic_files

FILE = ".file_hashes.json"
RACY_SECONDS = 2.0   # FAT's two-second times; ext4, xfs, btrfs, tmpfs: a clock tick
_FORMAT = 2   # (1: an object per file; a cache of another format is not read)
_DIGEST_CHARS = 64
_KEY_NUMBERS = 5   # of a `Key`
_HEX = re.compile(r"[0-9a-f]*")
_MAX_BYTES = 1 << 30  # ~160 bytes a file: a cache of millions of files, not more

Key = tuple[int, int, int, int, int]   # size, mtime_ns, ctime_ns, inode, device
_now_ns = time.time_ns


def beside(data_dir, name: str) -> pathlib.Path | None:
  """The cache of the trees a name's versions are built from, in a local `data_dir`; None
  for a bucket's (gs://, s3://)."""
  return None if "://" in str(data_dir) else pathlib.Path(data_dir) / name / FILE


def key(stat: os.stat_result) -> Key:
  return (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev)


def key_across_links(stat: os.stat_result) -> Key:
  """`key` less the change time, which linking the file sets: for the files this package
  writes in its own folders and links into the next version (`shard_hashes`), never for a
  user's."""
  return (stat.st_size, stat.st_mtime_ns, 0, stat.st_ino, stat.st_dev)


@dataclasses.dataclass
class Hashed:
  """A tree's file hashes (`hashes`: {relative path: hex sha256}), and what `save` writes
  to the cache they were looked up in: the stat that went with each hash."""
  hashes: dict[str, str]
  cache: pathlib.Path | None = None
  root: str = ""
  checked: int = 0
  stats: dict[str, Key] = dataclasses.field(default_factory=dict)
  _encoded: bytes | None = dataclasses.field(default=None, repr=False, compare=False)

  def encode(self) -> None:
    """Makes what `save` writes (a build does, while its workers group its images), so
    that `save` only writes it. The hashes and stats are final once made."""
    if self.cache is not None and self._encoded is None:
      self._encoded = _encoded(self.root, self.checked, {
          path: (self.stats[path], digest) for path, digest in self.hashes.items()})

  def save(self) -> None:
    """The cache written with every file (after a build: a failed one leaves none)."""
    if self.cache is not None:
      self.encode()
      try:
        atomic_files.write(self.cache, self._encoded)
      except OSError as why:   # (a cache: the build goes on without it)
        logging.warning("%s: could not write the file-hash cache (%s)", self.cache, why)


@dataclasses.dataclass(frozen=True)
class Stats:
  """The `key` of each file of a tree, taken by worker processes (`stat_on`) while the
  caller goes on, the clock before the first was taken, and, looked up by the workers in
  `cache` too, the digest it trusts for each file whose key is the one it holds."""
  checked: int
  root: str
  relative_paths: list[str]
  chunks: list   # futures of `_looked_up` of consecutive runs of `relative_paths`
  cache: pathlib.Path | None = None   # (absolute: the workers' working folder is not ours)
  key_of: Callable[[os.stat_result], Key] = key
  folder: str = ""   # `root` joined to the caller's working folder (`_absolute`)

  def results(self) -> tuple[dict[str, Key], dict[str, str], str | None]:
    """(keys, the digests `cache` holds for unchanged files, why it was not read)."""
    keys, digests, why = [], [], None
    for chunk in self.chunks:
      their_keys, their_digests, their_why = chunk.result()
      keys += their_keys
      digests += their_digests
      why = why or their_why
    return (dict(zip(self.relative_paths, keys)),
            {path: digest for path, digest in zip(self.relative_paths, digests)
             if digest is not None}, why)


def stat_on(pool, root: str, relative_paths: list[str],
            now_ns: Callable[[], int] | None = None, cache: os.PathLike | None = None,
            key_of: Callable[[os.stat_result], Key] = key) -> Stats:
  """The stats `file_hashes` takes, begun on `pool` (`parallel_map.executor`'s processes):
  a stat is a system call of a few microseconds, 20,000 of them ~0.07 s of one core. With
  `cache`, the worker of each run also reads it and keeps what it trusts for its files
  (reading and checking a cache of 20,000 files: ~0.06 s the caller does not spend).
  Relative `root` and `cache` are this process's, now: the workers kept the working folder
  they were forked in. `key_of`: as `file_hashes`' (a top-level function: it is sent)."""
  checked = (now_ns or _now_ns)()   # (before the stats: a write after it has later times)
  # (a run a core beside the caller's, which goes on meanwhile: each run's worker reads the
  # cache whole, and more runs than cores only read it more often)
  runs = max(1, min(pool._max_workers,  # pylint: disable=protected-access
                    parallel_map.available_cores() - 1))
  size = -(-len(relative_paths) // runs) or 1
  cache = pathlib.Path(cache).absolute() if cache is not None else None
  folder = _absolute(root)
  return Stats(checked, root, relative_paths, [
      pool.submit(_looked_up, root, folder, relative_paths[start:start + size], cache, key_of)
      for start in range(0, len(relative_paths), size)], cache, key_of, folder)


def _absolute(root: str) -> str:
  """`root` as the kernel finds it from this process's working folder: joined, not
  normalised (a ".." after a symlink is the link target's parent)."""
  return root if os.path.isabs(root) else os.path.join(os.getcwd(), root)


def _looked_up(root: str, folder: str, relative_paths: list[str], cache: pathlib.Path | None,
               key_of: Callable[[os.stat_result], Key]
               ) -> tuple[list[Key], list[str | None], str | None]:
  """The keys of the files (`root` as the caller names it, whose `folder` is absolute); for
  each, the digest `cache` trusts for that very key, else None; and why the cache could
  not be read (None: it could, or there is none)."""
  keys = [key_of(os.stat(os.path.join(folder, path))) for path in relative_paths]
  if cache is None:
    return keys, [None] * len(keys), None
  known, why = _read_trusted(cache, root)
  return keys, [entry[1] if (entry := known.get(path)) is not None and entry[0] == key_
                else None for path, key_ in zip(relative_paths, keys)], why


def file_hashes(root: str, relative_paths: list[str], cache: os.PathLike,
                hash_files: Callable[[str, list[str]], dict[str, str]], *,
                reread: bool = False, stat: Callable[[str], os.stat_result] | None = None,
                now_ns: Callable[[], int] | None = None,
                key_of: Callable[[os.stat_result], Key] = key,
                stats: Stats | None = None) -> Hashed:
  """The hashes of the files of the local `root`: those `cache` holds for their present
  stat (none with `reread`: every file is read, the cache written afresh), the rest by
  `hash_files(root, paths)`. `stat`, `now_ns`: the file system's (os.stat) and the
  clock's; `key_of`: what of a stat must be as it was (`key`); `stats`: the files' keys,
  begun already (`stat_on`, of the same `relative_paths` and `key_of`, with os.stat),
  instead, and what the workers trusted of `cache` when they looked it up too."""
  if stats is not None:
    if (stats.relative_paths != relative_paths or stats.root != root
        or stats.folder != _absolute(root)):   # (the same name from another folder)
      raise ValueError("the stats begun are of other files")
    if stats.key_of is not key_of or stat is not None:
      raise ValueError("the stats begun are keyed otherwise: pass `key_of` to `stat_on`, "
                       "and no `stat` with `stats`")
    checked, (keys, looked_up, why) = stats.checked, stats.results()
    if stats.cache == pathlib.Path(cache).absolute() and not reread:
      _say_why(cache, why)
      return _hashed(root, relative_paths, cache, hash_files, checked, keys, looked_up)
  else:
    checked = (now_ns or _now_ns)()   # (before the stats: a write after it has later times)
    keys = {path: key_of((stat or os.stat)(os.path.join(root, path)))
            for path in relative_paths}
  known = {} if reread else _trusted(pathlib.Path(cache), root)
  return _hashed(root, relative_paths, cache, hash_files, checked, keys,
                 {path: known[path][1] for path in relative_paths
                  if path in known and known[path][0] == keys[path]})


def _hashed(root: str, relative_paths: list[str], cache: os.PathLike,
            hash_files: Callable[[str, list[str]], dict[str, str]], checked: int,
            keys: dict[str, Key], found: dict[str, str]) -> "Hashed":
  """`Hashed` of the files, `found` those whose digests the cache gave, the rest hashed."""
  found.update(hash_files(root, [path for path in relative_paths if path not in found]))
  return Hashed({path: found[path] for path in relative_paths}, pathlib.Path(cache), root,
                checked, keys)


def _trusted(cache: pathlib.Path, root: str) -> dict[str, tuple[Key, str]]:
  """`_read_trusted`'s entries, saying why when the cache cannot be read."""
  known, why = _read_trusted(cache, root)
  _say_why(cache, why)
  return known


def _say_why(cache, why: str | None) -> None:
  if why is not None:
    logging.warning("%s: not a file-hash cache (%s): every file is read", cache, why)


def _read_trusted(cache: pathlib.Path, root: str
                  ) -> tuple[dict[str, tuple[Key, str]], str | None]:
  """The entries of `cache` for `root` whose times were older than their stat by
  RACY_SECONDS ({} when there is none or it cannot be read), and why it could not be read
  (None: it could, or there is none)."""
  try:
    held = json.loads(atomic_files.read_back(cache, _MAX_BYTES))  # (no FIFO waited on)
    if held.get("format") != _FORMAT or held.get("root") != root:
      return {}, None
    margin = _integer(held["checked_ns"]) - int(RACY_SECONDS * 1e9)
    paths, numbers, digests = held["paths"], held["keys"], held["sha256"]
    if not (type(paths) is list and type(numbers) is list and type(digests) is str
            and len(numbers) == _KEY_NUMBERS * len(paths)
            and len(digests) == _DIGEST_CHARS * len(paths)):
      raise ValueError("columns of different lengths")
    if not set(map(type, numbers)) <= {int}:  # (not a bool, a float, a string of digits)
      raise TypeError("numbers that are not all integers")
    if not _HEX.fullmatch(digests):
      raise ValueError("a digest that is not hex")
    keys = zip(*[iter(numbers)] * _KEY_NUMBERS)
    return {path: (stat_key, digests[at * _DIGEST_CHARS:(at + 1) * _DIGEST_CHARS])
            for at, (path, stat_key) in enumerate(zip(paths, keys))
            if max(stat_key[1], stat_key[2]) < margin}, None
  except FileNotFoundError:
    return {}, None
  except Exception as why:  # pylint: disable=broad-except  (untrusted: anything is possible)
    return {}, type(why).__name__


def _integer(value) -> int:
  if type(value) is not int:  # (not a bool, a float or a string of digits)
    raise TypeError(f"{value!r} is not an integer")
  return value


def _encoded(root: str, checked: int, entries) -> bytes:
  """The cache's bytes, column by column (a path list, their keys' numbers, their digests
  as one string): a few large JSON values, read and written in C, not an object per file."""
  entries = {path: (stat_key, digest) for path, (stat_key, digest) in entries.items()
             if isinstance(digest, str) and len(digest) == _DIGEST_CHARS}
  data = {"format": _FORMAT, "root": root, "checked_ns": checked, "paths": list(entries),
          "keys": list(itertools.chain.from_iterable(k for k, _ in entries.values())),
          "sha256": "".join(digest for _, digest in entries.values())}
  return json.dumps(data, separators=(",", ":")).encode()
