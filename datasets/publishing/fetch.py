"""Fetch a published version into the local cache: a whole, verified copy.

The cache is a TFDS data_dir per bucket URL, `<cache>/<scheme>/<bucket>/<prefix>`, under
`$IMAGESETS_CACHE` or `~/.cache/imagesets`; the streaming shard cache shares it.
"""

import os
import pathlib
import shutil
from typing import Callable

from imagesets.publishing import bucket as bucket_lib
from imagesets.publishing import file_locks
from imagesets.publishing import manifest as manifest_lib
from imagesets.publishing import progress_bars
from imagesets.publishing import versions

from imagesets.constants import CACHE_ENV, cache_root  # noqa: F401  (re-exported)


def cached_data_dir(url: str, cache_dir=None) -> pathlib.Path:
  """The local TFDS data_dir that mirrors a bucket URL: <cache>/<scheme>/<bucket>/<prefix>."""
  scheme, root = bucket_lib.split_url(url)
  return cache_root(cache_dir) / scheme / root.lstrip("/")


def local_copy_ok(version_dir: pathlib.Path, deep: bool) -> bool:
  """Whether a cached version is complete: sizes always, checksums if `deep`."""
  if not all((version_dir / name).exists() for name in (*versions.COMMIT_FILES, versions.MANIFEST)):
    return False
  manifest = manifest_lib.Manifest.from_bytes((version_dir / versions.MANIFEST).read_bytes(), str(version_dir))
  for name, entry in manifest.files.items():
    path = version_dir / name
    if not path.is_file() or path.stat().st_size != entry["size"]:
      return False
    if deep and bucket_lib.file_digests(path)[0] != entry["sha256"]:
      return False
  return True


def fetch(url: str, spec: str, *, cache_dir=None, verify: bool = False,
          progress: bool = True, log: Callable[[str], None] | None = None) -> str:
  """Syncs a published version into the local cache; returns the TFDS data_dir to load.

  The first call downloads every file and checks it against the manifest (size and
  SHA-256) before the version appears in the cache; later calls reuse the cache
  without contacting the bucket when config and version are given (versions are
  immutable). `verify=True` re-hashes a cached copy and repairs it if it was damaged.
  `log` is told which config and version a `spec` without them resolved to.
  """
  ref = versions.Ref.parse(spec)
  data_dir = cached_data_dir(url, cache_dir)
  if ref.config is not None and ref.version is not None and local_copy_ok(
      data_dir / ref.folder, deep=verify):
    return str(data_dir)
  bucket = bucket_lib.Bucket(url)
  bucket.check()
  resolved = versions.resolve_remote(ref, bucket)
  if log and resolved != ref:
    chose = " and ".join(what for what, given in (("default config", ref.config),
                                                  ("latest published version", ref.version))
                         if given is None and (what != "default config" or resolved.config))
    log(f"{spec}: {resolved} ({chose} in {url})")
  ref = resolved
  version_dir = data_dir / ref.folder
  # One fetcher per cached version on this machine (e.g. several training workers).
  with file_locks.exclusive(version_dir.parent / f".{ref.version}.lock"):
    if local_copy_ok(version_dir, deep=verify):
      return str(data_dir)
    manifest = manifest_lib.published(bucket, ref)
    _download(bucket, ref, manifest, version_dir, progress)
    metadata = versions.read_or_none(bucket, f"{ref.name}/{versions.CONFIG_METADATA}")
    if metadata is not None:
      write_atomically(data_dir / ref.name / versions.CONFIG_METADATA, metadata)
  return str(data_dir)


def _download(bucket, ref: versions.Ref, manifest: manifest_lib.Manifest, version_dir: pathlib.Path,
              progress: bool) -> None:
  """Downloads into a hidden staging folder, verifies, then renames it into place."""
  staging = version_dir.parent / f".incomplete-{ref.version}"
  staging.mkdir(parents=True, exist_ok=True)
  todo = [n for n, e in manifest.files.items() if not (
      (staging / n).is_file() and (staging / n).stat().st_size == e["size"]
      and bucket_lib.file_digests(staging / n)[0] == e["sha256"])]
  total = sum(manifest.files[n]["size"] for n in todo)
  with progress_bars.byte_bar(total, f"fetch {ref}", progress) as bar:
    for name in todo:
      target = staging / name
      target.parent.mkdir(parents=True, exist_ok=True)
      bucket.download(f"{ref.folder}/{name}", str(target), progress=bar.update)
      if bucket_lib.file_digests(target)[0] != manifest.files[name]["sha256"]:
        target.unlink()
        raise versions.PublishError(f"{bucket.url_of(ref.folder + '/' + name)} does not match its "
                           "manifest (SHA-256): the download or the published copy is "
                           "damaged; re-run, and tell the publisher if it persists")
  (staging / versions.MANIFEST).write_bytes(manifest.to_bytes())
  if version_dir.exists():  # a damaged copy found by verify=True
    shutil.rmtree(version_dir)
  os.rename(staging, version_dir)


def write_atomically(path: pathlib.Path, data: bytes) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(f".{path.name}.tmp")
  tmp.write_bytes(data)
  os.replace(tmp, path)
