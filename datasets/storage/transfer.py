"""The one checked way a file of a published version reaches the local disk, and the one
way a version is resolved; `fetch` (whole copies) and the read side's shard cache both use
them.

* `open_version`: the committed version a spec names and its manifest (every name in it
  checked by `manifest.Manifest.from_bytes` before any path is made from it), asked of the
  bucket; a version cached before is used as it is only when the bucket cannot answer.
* `checked_download`: one file through a uniquely named part file (two processes never
  share one), its size and SHA-256 computed while it is written and compared with the
  manifest before it is renamed into place; a damaged copy is fetched once more, then one
  error. Network faults are retried with backoff for `retry_seconds`; a full disk, a
  missing object and a damaged copy are not (one line each, saying what to do).
"""

import contextlib
import errno
import fcntl
import hashlib
import os
import pathlib
import shutil
import time
import uuid
from typing import Callable

from absl import logging

from imagesets.storage import atomic_files
from imagesets.storage import bucket as bucket_lib
from imagesets.storage import manifest as manifest_lib
from imagesets.storage import versions

DEFAULT_RETRY_SECONDS = 60.0
PART = ".part-"   # <folder>/.<name, cut>.part-<size>-<pid>-<random>: a download in progress
STALE_PART_SECONDS = 30.0   # an unlocked part this old is a dead writer's, whatever its pid


class DamagedError(versions.PublishError):
  """A file of the bucket does not match its manifest, twice."""


class DiskFullError(versions.PublishError):
  """The local disk (or quota) is full."""


@contextlib.contextmanager
def disk_full_is_one_line(path: pathlib.Path, what: str):
  """A full disk or quota (ENOSPC, EDQUOT) while writing `path` becomes one DiskFullError
  line naming the file and the fix; any other error passes through."""
  try:
    yield
  except OSError as error:
    if error.errno not in (errno.ENOSPC, errno.EDQUOT):
      raise
    raise DiskFullError(
        f"the disk is full: no space left on the device of {path} while {what}; free space "
        "there, or give a smaller cache_limit or another cache_dir") from None


def is_transient(error: bucket_lib.BucketError) -> bool:
  text = str(error)
  return (not isinstance(error, bucket_lib.NotAnObjectError)
          and not text.startswith("access denied") and "does not exist" not in text)


class Deadline:
  """Retries of network faults with backoff until `seconds` from creation have passed
  (one budget for a whole operation, however many requests it makes)."""

  def __init__(self, seconds: float, stats=None):
    self.seconds, self.stats = seconds, stats
    self._end = time.monotonic() + seconds

  def call(self, action: str, where: str, call: Callable):
    delay, attempts = 0.5, 0
    while True:
      attempts += 1
      try:
        return call()
      except bucket_lib.BucketError as error:
        if not is_transient(error):
          raise
        if self.seconds <= 0:
          raise  # no retries of our own: the clients' bounded ones only
        if time.monotonic() + delay > self._end:
          raise bucket_lib.BucketError(
              f"{error} (gave up after {attempts} attempt(s) over {self.seconds:.0f} s of "
              f"retries to {action} {where})") from None
        if self.stats is not None:
          self.stats["retries"] += 1
        logging.warning("retrying in %.1f s: %s", delay, error)
        time.sleep(delay)
        delay = min(delay * 2, 8.0)


class CacheFolderError(versions.PublishError):
  """A folder of the cache resolves outside it (a symlink the cache did not make)."""


def own_folder(folder: pathlib.Path, root: pathlib.Path) -> pathlib.Path:
  """Makes `folder`, a folder of the cache under `root` checked by `check_folder`, and
  returns it."""
  check_folder(folder, root)
  folder.mkdir(parents=True, exist_ok=True)
  return folder


def check_folder(folder: pathlib.Path, root: pathlib.Path) -> None:
  """A symlink in the place of `folder`, a folder of the cache under `root` (a user's link
  to a bigger disk, a planted one), or above it leading out of `root`, is refused in one
  line, never followed nor removed: the cache writes only in its own real folders."""
  real, real_root = os.path.realpath(folder), os.path.realpath(root)
  if folder.is_symlink() or os.path.commonpath([real, real_root]) != real_root:
    link = next((p for p in (folder, *folder.parents) if p.is_symlink()), folder)
    where = "" if link == folder else f"{folder}: "
    raise CacheFolderError(
        f"{where}{link} is a symlink (to {os.path.realpath(link)}) in the cache's folders, "
        f"which could lead outside the cache {real_root}: refused, nothing was written or "
        "removed; remove that symlink, or point cache_dir at the real folder")


def write_atomically(path: pathlib.Path, data: bytes) -> None:
  """`path` holds `data` whole or not at all (`atomic_files.write`); a full disk is one line."""
  with disk_full_is_one_line(path, f"writing {path.name} ({len(data)} bytes)"):
    atomic_files.write(path, data)


def open_version(bucket: bucket_lib.Bucket, spec: str, cached: Callable, *,
                 retry_seconds: float = DEFAULT_RETRY_SECONDS, stats=None,
                 log: Callable[[str], None] | None = None):
  """(ref, manifest) of the committed version `spec` names in `bucket`.

  `cached(ref)` gives the path of a manifest cached for a pinned ref (or None): it is used
  only when the bucket does not answer or no longer holds the version, with a warning, so
  a version deleted and published again is read as published now. `log` is told which
  config and version a spec without them resolved to.
  """
  ref = versions.Ref.parse(spec)
  pinned = ref.config is not None and ref.version is not None
  local = cached(ref) if pinned else None
  local = local if local is not None and local.is_file() else None
  # With a cached copy to fall back on, one attempt: no point waiting for a bucket.
  deadline = Deadline(0 if local else retry_seconds, stats)
  try:
    if not pinned:
      deadline.call("look up", bucket.url, bucket.check)
    resolved = deadline.call("look up", bucket.url,
                             lambda: versions.resolve_remote(ref, bucket))
    manifest = deadline.call("read the manifest of", bucket.url_of(resolved.folder),
                             lambda: manifest_lib.published(bucket, resolved))
  except (bucket_lib.BucketError, versions.PublishError) as error:
    if local is None or (isinstance(error, versions.PublishError)
                         and not isinstance(error, versions.DatasetNotPreparedError)):
      raise
    logging.warning("%s: using the manifest cached in %s (the bucket did not give it: %s)",
                    ref, local.parent, error)
    return ref, manifest_lib.Manifest.from_bytes(local.read_bytes(), str(local))
  if log and resolved != ref:
    chose = " and ".join(what for what, given in (("default config", ref.config),
                                                  ("latest published version", ref.version))
                         if given is None and (what != "default config" or resolved.config))
    log(f"{spec}: {resolved} ({chose} in {bucket.url})")
  return resolved, manifest


def part_path(folder: pathlib.Path, name: str, size: int) -> pathlib.Path:
  # (unique by pid and random part; the name cut short keeps it within NAME_MAX)
  return folder / (f".{atomic_files.name_kept(name)}{PART}{size}-{os.getpid()}-"
                   f"{uuid.uuid4().hex[:12]}")


def open_part(folder: pathlib.Path, name: str, size: int):
  """A new part file, created exclusively and held under an exclusive lock until closed:
  a part file nobody holds locked belongs to a dead process and may be removed."""
  folder.mkdir(parents=True, exist_ok=True)
  path = part_path(folder, name, size)
  handle = open(path, "xb")
  fcntl.flock(handle, fcntl.LOCK_EX)
  return path, handle


def pid_is_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    pass   # alive, another user's
  return True


def _is_stale(name: str, handle) -> bool:
  """Whether a part file we could lock belongs to a dead writer: its pid (in its name,
  from `part_path`) is gone, or it is older than STALE_PART_SECONDS. A writer locks its
  part just after creating it, so a young part with a live pid may be in that gap; a pid
  alive again in another process (reuse, another pid namespace) only delays the removal."""
  try:
    pid = int(name.rsplit(PART, 1)[1].split("-")[1])
  except (IndexError, ValueError):
    pid = None   # not named by part_path: by age only
  if pid is not None and not pid_is_alive(pid):
    return True
  return time.time() - os.fstat(handle.fileno()).st_mtime > STALE_PART_SECONDS


def remove_stale_parts(folder: pathlib.Path, recursive: bool = False) -> int:
  """Removes part files whose writer is gone (killed, OOM, preempted); bytes freed.
  `recursive`: in the subfolders too (a version's files may be nested). A part is stale
  when nobody holds its lock and `_is_stale` says its writer is gone."""
  freed = 0
  with contextlib.suppress(FileNotFoundError), os.scandir(folder) as entries:
    for entry in entries:
      if recursive and entry.is_dir(follow_symlinks=False):
        freed += remove_stale_parts(pathlib.Path(entry.path), recursive=True)
        continue
      # (a part's name is hidden, as `part_path` makes it: a published file may have
      # ".part-" in its name, and it is no part)
      if (not entry.name.startswith(".") or PART not in entry.name
          or not entry.is_file(follow_symlinks=False)):
        continue
      with contextlib.suppress(OSError), open(entry.path, "rb") as handle:
        try:
          fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
          continue  # its writer is alive
        if not _is_stale(entry.name, handle):
          continue
        freed += os.fstat(handle.fileno()).st_size
        os.unlink(entry.path)
  return freed


def remove_others(folder: pathlib.Path, names) -> None:
  """Removes from `folder` (a version's copy in the making) what is neither one of `names`
  (its files, relative) nor a folder of them: files of an earlier content of the version
  (deleted and published again, or its manifest forged anew), where one stands in the
  way of the new content (a file where a folder goes, a folder where a file goes) or
  would be taken along. Before anything is written there; hidden names (live part files,
  locks) and links (never followed nor removed: `check_folder` refuses one in the way)
  are left."""
  _remove_others(folder, set(names), manifest_lib.folders_of(names), "")


def _remove_others(folder: pathlib.Path, names: set[str], folders: set[str],
                   prefix: str) -> None:
  with contextlib.suppress(FileNotFoundError), os.scandir(folder) as entries:
    for entry in entries:
      rel = prefix + entry.name
      if entry.name.startswith(".") or entry.is_symlink():
        continue
      if not entry.is_dir(follow_symlinks=False):
        if rel not in names:
          os.unlink(entry.path)
      elif rel in folders:
        _remove_others(pathlib.Path(entry.path), names, folders, rel + "/")
      else:
        shutil.rmtree(entry.path)


def part_reserved_bytes(name: str) -> int:
  """The size a live part file reserves (its shard's full size), from its name."""
  return int(name.split(PART, 1)[1].split("-", 1)[0])


class _Hashing:
  def __init__(self, handle):
    self.handle, self.sha, self.size = handle, hashlib.sha256(), 0

  def write(self, chunk: bytes) -> None:
    self.handle.write(chunk)
    self.sha.update(chunk)
    self.size += len(chunk)


def checked_download(bucket: bucket_lib.Bucket, rel: str, target: pathlib.Path, entry: dict,
                     *, part=None, retry_seconds: float = DEFAULT_RETRY_SECONDS, stats=None,
                     progress=None, dated: Callable[[], float] | None = None) -> None:
  """Downloads `rel` to `target` through a part file (`part`: (path, open locked handle)
  from `open_part`, or a new one beside `target`), verified against `entry` (size,
  sha256) before the rename. `dated`: gives the file's access and modification times,
  asked for and set once the bytes are checked, before the rename (so `target` never
  shows another; a file system that refuses them keeps the write's). Counts `downloads`,
  `bytes` and `damaged` in `stats`."""
  url = bucket.url_of(rel)
  with disk_full_is_one_line(target, f"downloading {url} ({entry['size']} bytes)"):
    part_file, handle = part or open_part(target.parent, target.name, entry["size"])
  try:
    for attempt in (1, 2):
      def copy():
        handle.seek(0)
        handle.truncate()
        out = _Hashing(handle)
        bucket.copy_to(rel, out, progress, size=entry["size"])
        handle.flush()
        return out
      try:
        with disk_full_is_one_line(target, f"downloading {url} ({entry['size']} bytes)"):
          out = Deadline(retry_seconds, stats).call("download", url, copy)
      except FileNotFoundError:
        raise versions.PublishError(
            f"{url} is listed in the version's manifest but missing from the bucket: the "
            "published copy is incomplete or was deleted; tell the publisher") from None
      if stats is not None:
        stats["downloads"] += 1
      if out.size == entry["size"] and out.sha.hexdigest() == entry["sha256"]:
        if dated is not None:
          with contextlib.suppress(OSError):
            os.utime(handle.fileno(), (dated(),) * 2)
        try:
          os.replace(part_file, target)   # (a rename: needs no space)
        except FileNotFoundError:
          raise versions.PublishError(
              f"the part file {part_file} of {url} was removed by another process (taken "
              "for a dead download's) before it was complete: retry") from None
        if stats is not None:
          stats["bytes"] += entry["size"]
        return
      if stats is not None:
        stats["damaged"] += 1
      logging.warning("%s does not match its manifest (size or SHA-256)%s", url,
                      "; fetching it again" if attempt == 1 else "")
    raise DamagedError(
        f"{url} does not match its manifest (size or SHA-256) after two downloads: the "
        "published copy is damaged; tell the publisher (nothing damaged was read)")
  except BaseException:
    # After a full disk, close() flushes the refused bytes again and its raw OSError would
    # replace the one-line DiskFullError (or any error): the part file is removed anyway.
    with contextlib.suppress(OSError):
      handle.close()
    raise
  finally:
    handle.close()  # (a no-op once closed above)
    with contextlib.suppress(FileNotFoundError):
      part_file.unlink()
