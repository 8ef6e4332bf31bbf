"""List the versions published in a bucket, or prepared in a local data_dir (`imagesets list`)."""

import dataclasses
import datetime
import difflib
import json
import os
import pathlib

from imagesets import registry
from imagesets.storage import bucket as bucket_lib
from imagesets.storage import manifest as manifest_lib
from imagesets.storage import versions


@dataclasses.dataclass(frozen=True)
class Published:
  """A committed version in a bucket, as `list` shows it."""

  ref: versions.Ref
  # None: committed by another tool, nothing to verify against; or damaged (`damage`)
  manifest: manifest_lib.Manifest | None
  damage: str = ""   # why its manifest cannot be used (one line), "" when it can


def list_published(url: str) -> tuple[list[Published], list[versions.Ref]]:
  """(committed versions, unfinished uploads) in a bucket URL, sorted by name. Names and
  manifests are the bucket's, untrusted: shown escaped (the command line's part), and a
  damaged or forged manifest is its version's `damage`, the others still listed."""
  bucket = bucket_lib.Bucket(url)
  bucket.check()
  published, unfinished = [], []
  for ref, names in sorted(versions.remote_refs(bucket.list_files()).items(),
                           key=lambda item: versions.sort_key(item[0])):
    if versions.MARKER not in names:
      unfinished.append(ref)
    elif versions.MANIFEST not in names:
      published.append(Published(ref, None))
    else:
      published.append(_published(bucket, ref, names))
  return published, unfinished


def _published(bucket, ref: versions.Ref, names: set[str]) -> Published:
  try:
    return Published(ref, manifest_lib.published(bucket, ref, names))
  except (versions.PublishError, bucket_lib.NotAnObjectError) as error:
    return Published(ref, None, damage=str(error))


@dataclasses.dataclass(frozen=True)
class Built:
  """A prepared version in a local TFDS data_dir, as `list` shows it."""

  ref: versions.Ref
  num_bytes: int
  splits: dict[str, int]
  built_at: str    # ISO time of its dataset_info.json
  ours: bool       # built by imagesets (a builder of this package or `imagesets build`)


def _is_ours(info: dict, metadata: dict) -> bool:
  # Named builds record their content fingerprint; our builders' module paths end in
  # <name>/<name>_dataset_builder (tfds build by path or --imports imagesets).
  module = info.get("moduleName", "").split(".")
  return "content_fingerprint" in metadata or (
      len(module) >= 2 and module[-2] in registry.NAMES
      and module[-1] == f"{module[-2]}_dataset_builder")


def list_local(data_dir: str) -> list[Built]:
  """The complete prepared versions in a local TFDS data_dir, sorted by name."""
  root = pathlib.Path(data_dir).expanduser()
  found = []
  for ref in versions.local_refs(root):
    version_dir = root / ref.folder
    info_path = version_dir / versions.DATASET_INFO
    try:
      info = json.loads(info_path.read_text())
      metadata_path = version_dir / "metadata.json"
      metadata = json.loads(metadata_path.read_text()) if metadata_path.exists() else {}
    except ValueError:
      continue
    built_at = datetime.datetime.fromtimestamp(info_path.stat().st_mtime, datetime.timezone.utc)
    found.append(Built(
        ref, sum(p.stat().st_size for p in version_dir.iterdir() if p.is_file()),
        versions.split_counts(info), built_at.isoformat(), _is_ours(info, metadata)))
  return found  # (in local_refs' order)


def is_local_data_dir(url: str) -> bool:
  """`url` is a local TFDS data_dir with prepared versions, not a bucket we published to
  (no version in it has our manifest): `imagesets list` shows it as local builds."""
  if "://" in url or not pathlib.Path(url).expanduser().is_dir():
    return False
  root = pathlib.Path(url).expanduser()
  published = [*root.glob(f"*/*/{versions.MANIFEST}"), *root.glob(f"*/*/*/{versions.MANIFEST}")]
  return not published and bool(list_local(url))


def missing(url: str, fix: str) -> str | None:
  """One line if `url`, a local folder or a bucket prefix, does not exist (a bucket prefix
  with nothing under it), naming the closest folder or prefix beside it and `fix`; None
  for one that exists, empty or not (a bucket itself: `Bucket.check`'s errors)."""
  bucket = bucket_lib.Bucket(url)
  if bucket.is_local:
    if os.path.isdir(bucket.root):
      return None
    if os.path.exists(bucket.root):
      raise bucket_lib.URLError(f"{url} is a file, not a folder")
    parent = os.path.dirname(bucket.root)
    beside = sorted(os.listdir(parent)) if os.path.isdir(parent) else []
  else:
    bucket.check()
    if "/" not in bucket.root or bucket.list_files():
      return None
    parent = bucket.root.rsplit("/", 1)[0]
    try:
      beside = [path.rstrip("/").rsplit("/", 1)[-1]
                for path in bucket.fs.ls(parent, detail=False)]
    except Exception:  # pylint: disable=broad-except  (only a hint)
      beside = []
  close = difflib.get_close_matches(bucket.root.rsplit("/", 1)[-1], beside, n=1, cutoff=0.6)
  base = url.rstrip("/")
  meant = "" if not close else (
      f" (did you mean {os.path.join(os.path.dirname(base), close[0])}?)" if "://" not in url
      else f" (did you mean {base.rsplit('/', 1)[0]}/{close[0]}?)")
  return f"{url} does not exist{meant}; {fix}"
