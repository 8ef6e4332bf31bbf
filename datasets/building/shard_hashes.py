"""The SHA-256 of a named version's shards without reading them again, for the version built
on it, which checks every shard it keeps (`incremental`): each shard's hash with the stat
taken before that hash was made (as written, by `record_index`; or as checked by the build
that kept it), trusted while the shard has that size, modification time, inode and device
(`stat_cache`'s rules, less the change time, which linking a kept shard into the next
version sets). A shard written within RACY_SECONDS of its stat is read again by the next
build, which records it anew: trusted from the build after.

What this cannot see beyond `stat_cache`'s list: a shard rewritten in place whose
modification time is then set back to the nanosecond (`os.utime`, `touch -d`);
`imagesets verify` reads every byte. The cache (`FILE`, beside the name's versions) holds
the shards of the last version built; a build on an older version reads its shards.
"""

import dataclasses
import os
import pathlib
import time
from typing import Callable

from imagesets.building import stat_cache

FILE = ".shard_hashes.json"

Digest = str | OSError   # a shard's SHA-256, or why it could not be read
_now_ns = time.time_ns


@dataclasses.dataclass
class Checked:
  """Shards' SHA-256 (`digests`), the stat of each taken before its hash was made or
  trusted (`keys`), and the clock before those stats (`checked`)."""
  digests: dict[str, Digest]
  keys: dict[str, stat_cache.Key]
  checked: int


def now() -> int:
  """The clock, to take before the stats that go with hashes made after it."""
  return _now_ns()


def key_of(path) -> stat_cache.Key:
  return stat_cache.key_across_links(os.stat(path))


def hashes(version_dir: pathlib.Path, names: list[str],
           hash_files: Callable[[list[pathlib.Path]], list[Digest]]) -> Checked:
  """The SHA-256 (or the OSError of its read) of the shards `names` of a local
  `version_dir`: those the cache holds for their present stat, the rest by `hash_files`."""
  folder = pathlib.Path(version_dir)
  relative = {f"{folder.name}/{name}": name for name in names}

  def read(root, paths):
    return dict(zip(paths, hash_files([pathlib.Path(root) / path for path in paths])))
  try:
    found = stat_cache.file_hashes(str(folder.parent), list(relative), folder.parent / FILE,
                                   read, key_of=stat_cache.key_across_links, now_ns=_now_ns)
  except OSError:   # (a shard gone or unreadable: each says why; none is recorded)
    return Checked(dict(zip(names, hash_files([folder / name for name in names]))), {},
                   _now_ns())
  return Checked({name: found.hashes[path] for path, name in relative.items()},
                 {name: found.stats[path] for path, name in relative.items()}, found.checked)


def save(folder: pathlib.Path, version: str,
         written: dict[str, tuple[stat_cache.Key, str]], checked: int) -> None:
  """Records the shards of version `version`, in `folder` (its folder, or TFDS's unfinished
  folder that becomes it): `written` {name: (stat before the hash, SHA-256)}, `checked`
  the clock before any of those stats."""
  folder = pathlib.Path(folder)
  stat_cache.Hashed({f"{version}/{name}": digest for name, (_, digest) in written.items()},
                    folder.parent / FILE, str(folder.parent), checked,
                    {f"{version}/{name}": key for name, (key, _) in written.items()}).save()
