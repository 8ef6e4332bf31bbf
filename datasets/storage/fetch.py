"""Fetch a published version into the local cache: a whole, verified copy.

The cache is a TFDS data_dir per bucket, `<cache>/<scheme>[@<endpoint>]/<bucket>/<prefix>`
(the endpoint only when one is configured, e.g. AWS_ENDPOINT_URL: one bucket name on two
servers is two buckets), under `$IMAGESETS_CACHE` or `~/.cache/imagesets`. The read side's
shard cache (`reading.shard_cache`) keeps each streamed version's metadata beside it and
its shards by SHA-256 in `<cache>/shards/`. Both download through `transfer`.
"""

import os
import pathlib
import shutil
from typing import Callable

from imagesets.storage import bucket as bucket_lib
from imagesets.storage import file_locks
from imagesets.storage import manifest as manifest_lib
from imagesets.console import progress_bars
from imagesets.storage import transfer
from imagesets.storage import versions

from imagesets.constants import CACHE_ENV, cache_root  # noqa: F401  (re-exported)
from imagesets.storage import atomic_files



def cached_data_dir(url: str, cache_dir=None) -> pathlib.Path:
  """The local TFDS data_dir that mirrors a bucket URL:
  <cache>/<scheme>[@<endpoint>]/<bucket>/<prefix>."""
  bucket = bucket_lib.Bucket(url)
  endpoint = bucket.endpoint_id()
  return (cache_root(cache_dir) / (f"{bucket.scheme}@{endpoint}" if endpoint else bucket.scheme)
          / bucket.root.lstrip("/"))


def cached_manifest(data_dir: pathlib.Path, ref: versions.Ref) -> pathlib.Path | None:
  """The manifest of a pinned version fetched or streamed before into `data_dir`."""
  for folder in (data_dir / ref.folder, data_dir / ref.name / ref.config / f".stream-{ref.version}"):
    if (folder / versions.MANIFEST).is_file() and (folder / versions.MARKER).is_file():
      return folder / versions.MANIFEST
  return None


def local_copy_ok(version_dir: pathlib.Path, deep: bool,
                  manifest: manifest_lib.Manifest | None = None) -> bool:
  """Whether a cached version is complete (and, given `manifest`, the same content):
  sizes always, checksums if `deep`; its manifest lists every shard its dataset_info.json
  names. False, never an error, for a copy that is damaged or going away (a fetch
  replacing it holds the version's lock, a reader may not): fetched again."""
  try:
    if not all((version_dir / name).exists()
               for name in (*versions.COMMIT_FILES, versions.MANIFEST)):
      return False
    local = manifest_lib.Manifest.from_bytes((version_dir / versions.MANIFEST).read_bytes(),
                                             str(version_dir))
    if manifest is not None and local.content() != manifest.content():
      return False  # deleted and published again with other content
    # (a copy cached before fetch checked this: fetched again, and then refused)
    local.check_every_shard_listed(version_dir / versions.DATASET_INFO, str(version_dir))
    for name, entry in local.files.items():
      path = version_dir / name
      if not path.is_file() or path.stat().st_size != entry["size"]:
        return False
      if deep and bucket_lib.file_digests(path)[0] != entry["sha256"]:
        return False
  except (OSError, versions.PublishError):
    return False
  return True


def fetch(url: str, spec: str, *, cache_dir=None, verify: bool = False,
          progress: bool = True, log: Callable[[str], None] | None = None) -> str:
  """Syncs a published version into the local cache; returns the TFDS data_dir to load.

  The first call downloads every file (but those another version of the dataset fetched
  here holds byte for byte: linked from it) and checks it against the manifest (size and
  SHA-256) before the version appears in the cache. Later calls ask the bucket for the
  version's manifest and download nothing when the cached copy has the same content; when
  the bucket cannot be reached, a pinned version (config and version given) cached before
  is used as it is. `verify=True` re-hashes a cached copy and repairs it if it was
  damaged. `log` is told which config and version a `spec` without them resolved to.
  """
  bucket = bucket_lib.Bucket(url)
  data_dir = cached_data_dir(url, cache_dir)
  # retry_seconds=0: the storage clients' own bounded retries only (a CLI call fails fast).
  ref, manifest = transfer.open_version(
      bucket, spec, lambda r: cached_manifest(data_dir, r) if (data_dir / r.folder).is_dir()
      else None, retry_seconds=0, log=log)
  manifest.check_loadable(bucket.url_of(ref.folder))
  version_dir = data_dir / ref.folder
  root = cache_root(cache_dir)
  # Every folder written below is checked before anything is (no symlink followed out).
  config_dir = (data_dir / ref.name / versions.CONFIG_METADATA).parent
  transfer.own_folder(config_dir, root)
  # One fetcher per cached version on this machine (e.g. several training workers).
  with file_locks.exclusive(transfer.own_folder(version_dir.parent, root)
                            / f".{ref.version}.lock"):
    transfer.check_folder(version_dir, root)
    if local_copy_ok(version_dir, deep=verify, manifest=manifest):
      _remove_staging(version_dir)
      return str(data_dir)
    _download(bucket, ref, manifest, version_dir, progress, root)
    metadata = versions.config_metadata(bucket, ref.name)
    if metadata is not None:
      transfer.write_atomically(config_dir / pathlib.Path(versions.CONFIG_METADATA).name,
                                metadata)
  return str(data_dir)


def _staging(version_dir: pathlib.Path) -> pathlib.Path:
  """Where a version is downloaded before it is renamed into place (kept by a killed
  fetch, for the next one to resume)."""
  return version_dir.parent / f".incomplete-{version_dir.name}"


def _remove_staging(version_dir: pathlib.Path) -> None:
  """The staging folder a killed fetch left beside a copy found complete (e.g. one of
  `verify=True` repairing it), which no later fetch would resume: removed, not kept for
  ever. Under the version's lock (no fetcher writes it); a link there is left."""
  staging = _staging(version_dir)
  if staging.is_dir() and not staging.is_symlink():
    shutil.rmtree(staging, ignore_errors=True)


def _fetched_elsewhere(version_dir: pathlib.Path, wanted: set[tuple[int, str]]
                       ) -> dict[tuple[int, str], pathlib.Path]:
  """{(size, sha256): a file of another version of the dataset fetched beside this one
  that its manifest says holds it}, for the content in `wanted` (a version built on
  another shares most shards with it). Only complete copies count; names in their
  manifests are checked before they touch a path; the files are checked when copied."""
  found = {}
  folder = version_dir.parent
  for other in sorted(folder.iterdir()) if folder.is_dir() else ():
    if other == version_dir or other.name.startswith(".") or other.is_symlink():
      continue
    try:
      if not local_copy_ok(other, deep=False):
        continue
      local = manifest_lib.Manifest.from_bytes((other / versions.MANIFEST).read_bytes(),
                                               str(other))
    except (OSError, RecursionError, versions.PublishError):
      continue  # (not a version, or one damaged: downloaded instead)
    inside = other.resolve()
    for name, content in local.content().items():
      if content in wanted and (other / name).resolve().is_relative_to(inside):
        found.setdefault(content, other / name)  # (no link in its path leads out)
  return found


def _copied_from_elsewhere(source: pathlib.Path, target: pathlib.Path, entry: dict) -> bool:
  """`source` (another cached version's file) at `target` if it holds `entry`'s bytes:
  linked (or copied), then the bytes at `target` checked (what was linked, whatever
  happened to `source` meanwhile); else nothing left at `target`."""
  try:
    if source.is_symlink() or source.stat().st_size != entry["size"]:
      return False
    target.unlink(missing_ok=True)  # (a part of a killed fetch: never written through)
    atomic_files.link(source, target, exclusive=True)
    if bucket_lib.file_digests(target)[0] == entry["sha256"]:
      return True
    target.unlink()
  except OSError:
    target.unlink(missing_ok=True)
  return False


def _download(bucket, ref: versions.Ref, manifest: manifest_lib.Manifest, version_dir: pathlib.Path,
              progress: bool, root: pathlib.Path) -> None:
  """Downloads into a hidden staging folder (files verified there are kept: a killed fetch
  resumes), then renames it into place. A file another fetched version of the dataset holds
  byte for byte is linked (or copied) from it instead of downloaded."""
  staging = transfer.own_folder(_staging(version_dir), root)
  transfer.remove_stale_parts(staging, recursive=True)
  transfer.remove_others(staging, manifest.files)  # (a killed fetch of an earlier content's)
  todo = [n for n, e in manifest.files.items() if not (
      (staging / n).is_file() and (staging / n).stat().st_size == e["size"]
      and bucket_lib.file_digests(staging / n)[0] == e["sha256"])]
  info = versions.DATASET_INFO  # (first: the shards it names are checked before any is fetched)
  if info in todo:
    transfer.checked_download(bucket, f"{ref.folder}/{info}", staging / info,
                              manifest.files[info], retry_seconds=0)
    todo.remove(info)
  manifest.check_every_shard_listed(staging / info, bucket.url_of(ref.folder))
  content = manifest.content()
  elsewhere = _fetched_elsewhere(version_dir, {content[n] for n in todo})
  copied = []
  for name in todo:
    if content[name] in elsewhere:
      transfer.own_folder((staging / name).parent, root)
      if _copied_from_elsewhere(elsewhere[content[name]], staging / name, manifest.files[name]):
        copied.append(name)
  todo = [n for n in todo if n not in copied]
  total = sum(manifest.files[n]["size"] for n in todo)
  with progress_bars.byte_bar(total, f"fetch {ref}", progress) as bar:
    for name in todo:  # names were checked when the manifest was read
      target = staging / name
      transfer.own_folder(target.parent, root)  # a nested one: never a planted link
      transfer.checked_download(bucket, f"{ref.folder}/{name}", target, manifest.files[name],
                                retry_seconds=0, progress=bar.update)
  transfer.write_atomically(staging / versions.MANIFEST, manifest.to_bytes())
  if version_dir.exists():  # a damaged copy found by verify=True, or an older content
    shutil.rmtree(version_dir)
  os.rename(staging, version_dir)
