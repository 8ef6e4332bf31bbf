"""The SHA-256 of a named version's shards without reading them again, for the version built
on it, which checks every shard it keeps (`incremental`): the hash each shard was written
with (its `record_index`), trusted while the shard has the size, modification time, inode
and device it had just after its build (`stat_cache`, less the change time, which linking
a kept shard into the next version sets).

What this cannot see beyond `stat_cache`'s list: a shard rewritten in place whose
modification time is then set back to the nanosecond (`os.utime`, `touch -d`);
`imagesets verify` reads every byte. The cache (`FILE`, beside the name's versions) holds
the shards of the last version built; a build on an older version reads its shards.
"""

import os
import pathlib
import time
from typing import Callable

from imagesets.building import stat_cache

FILE = ".shard_hashes.json"

Digest = str | OSError   # a shard's SHA-256, or why it could not be read
_now_ns = time.time_ns


def hashes(version_dir: pathlib.Path, names: list[str],
           hash_files: Callable[[list[pathlib.Path]], list[Digest]]) -> dict[str, Digest]:
  """{name: SHA-256 or the OSError of its read} of the shards `names` of a local
  `version_dir`: those the cache holds for their present stat, the rest by `hash_files`."""
  folder = pathlib.Path(version_dir)
  relative = {f"{folder.name}/{name}": name for name in names}

  def read(root, paths):
    return dict(zip(paths, hash_files([pathlib.Path(root) / path for path in paths])))
  try:
    found = stat_cache.file_hashes(str(folder.parent), list(relative), folder.parent / FILE,
                                   read, key_of=stat_cache.key_across_links).hashes
  except OSError:   # (a shard gone or unreadable: each says why)
    found = read(folder.parent, list(relative))
  return {name: found[path] for path, name in relative.items()}


def save(folder: pathlib.Path, version: str, written: dict[str, str]) -> None:
  """Records the shards just written into `folder` (version `version`'s folder, or TFDS's
  unfinished folder that becomes it) with their SHA-256 (`written`: {name: SHA-256})."""
  folder = pathlib.Path(folder)
  checked = _now_ns()   # (before the stats: see stat_cache)
  stats = {f"{version}/{name}": stat_cache.key_across_links(os.stat(folder / name))
           for name in written}
  stat_cache.Hashed({f"{version}/{name}": digest for name, digest in written.items()},
                    folder.parent / FILE, str(folder.parent), checked, stats).save()
