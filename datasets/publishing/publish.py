"""Publish prepared TFDS versions to a team bucket, list them, and fetch them back.

Layout (the bucket URL is a TFDS data_dir; docs/publishing.md has the whole design):

  URL/<name>/.config/metadata.json                default config, for tfds.load('<name>')
  URL/<name>/<config>/<version>/<shards, ...>     the files of the prepared version
  URL/<name>/<config>/<version>/imagesets-manifest.json   size, sha256, md5 of each file
  URL/<name>/<config>/<version>/dataset_info.json
  URL/<name>/<config>/<version>/features.json     written last: the commit marker

A version is published when its `features.json` exists — the file without which TFDS
itself finds no version — and it is written only after every other object was uploaded
and verified. A published version is never changed.
"""

import contextlib
import dataclasses
import datetime
import fcntl
import json
import os
import pathlib
import re
import shutil
import sys
import tempfile
from typing import Callable

from imagesets.publishing import bucket as bucket_lib

MANIFEST = "imagesets-manifest.json"
# TFDS lists versions by dataset_info.json but loads one only if features.json exists too
# (read_only_builder), so writing dataset_info.json, then features.json, last of all keeps
# every unfinished upload invisible to stock TFDS as well as to us.
MARKER = "features.json"
DATASET_INFO = "dataset_info.json"
COMMIT_FILES = (DATASET_INFO, MARKER)  # uploaded in this order, after everything else
CONFIG_METADATA = ".config/metadata.json"
MANIFEST_FORMAT = 1
CACHE_ENV = "IMAGESETS_CACHE"

_SPEC = re.compile(r"^(?P<name>[a-z0-9_]+)(?:/(?P<config>[\w.-]+))?(?::(?P<version>\d+\.\d+\.\d+))?$")
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


class PublishError(RuntimeError):
  """Publishing, listing or fetching was refused or failed; the message says why."""


@dataclasses.dataclass(frozen=True)
class Ref:
  """A dataset version: `name[/config][:version]`; config and version may be unknown."""

  name: str
  config: str | None = None
  version: str | None = None

  @classmethod
  def parse(cls, spec: str) -> "Ref":
    match = _SPEC.match(spec.strip())
    if not match:
      raise PublishError(f"{spec!r} is not NAME[/CONFIG][:VERSION] (e.g. flowers:1.0.0, "
                         "synthetic_images/tiny:1.0.0)")
    return cls(**match.groupdict())

  @property
  def folder(self) -> str:
    """Path of the version folder relative to a data_dir."""
    return "/".join(p for p in (self.name, self.config, self.version) if p)

  def __str__(self):
    text = f"{self.name}/{self.config}" if self.config else self.name
    return f"{text}:{self.version}" if self.version else text


@dataclasses.dataclass
class Manifest:
  """What a published version contains; `files` maps file name -> size, sha256, md5."""

  dataset: str
  files: dict[str, dict]
  splits: dict[str, int]
  published_at: str = ""
  format: int = MANIFEST_FORMAT

  @property
  def num_bytes(self) -> int:
    return sum(f["size"] for f in self.files.values())

  def content(self) -> dict[str, tuple[int, str]]:
    """The identity of the version's content: equal content means an identical version."""
    return {name: (f["size"], f["sha256"]) for name, f in self.files.items()}

  def to_bytes(self) -> bytes:
    return json.dumps(dataclasses.asdict(self), indent=1).encode()

  @classmethod
  def from_bytes(cls, data: bytes, where: str) -> "Manifest":
    try:
      raw = json.loads(data)
      return cls(**{f.name: raw[f.name] for f in dataclasses.fields(cls) if f.name in raw})
    except (ValueError, TypeError, KeyError) as exc:
      raise PublishError(f"{where}: unreadable manifest ({exc})") from None


@dataclasses.dataclass(frozen=True)
class Published:
  """A committed version in a bucket, as `list` shows it."""

  ref: Ref
  manifest: Manifest | None   # None: committed by another tool, nothing to verify against


@dataclasses.dataclass(frozen=True)
class PublishResult:
  ref: Ref
  url: str
  status: str          # "published" or "unchanged"
  uploaded: int = 0    # objects uploaded in this run
  reused: int = 0      # objects found already uploaded and verified (resumed run)
  num_bytes: int = 0   # bytes uploaded in this run


# ---------------------------------------------------------------- resolving names

def _versions_in(names) -> list[str]:
  return sorted((n for n in names if _VERSION.match(n)),
                key=lambda v: tuple(int(x) for x in v.split(".")))


def _default_config(metadata: bytes | None) -> str | None:
  if metadata is None:
    return None
  try:
    return json.loads(metadata).get("default_config_name")
  except ValueError:
    return None


def resolve_local(ref: Ref, data_dir: pathlib.Path) -> Ref:
  """Fills in the default config and the latest prepared version from a local data_dir."""
  dataset_dir = data_dir / ref.name
  if not dataset_dir.is_dir():
    raise PublishError(f"{dataset_dir} does not exist: build {ref.name} into {data_dir} first "
                       f"(tfds build ... --data_dir {data_dir})")
  config = ref.config
  if config is None:
    metadata = dataset_dir / CONFIG_METADATA
    config = _default_config(metadata.read_bytes() if metadata.exists() else None)
  config_dir = dataset_dir / config if config else dataset_dir
  version = ref.version
  if version is None:
    prepared = [p.parent.name for p in config_dir.glob(f"*/{DATASET_INFO}")]
    if not _versions_in(prepared):
      raise PublishError(f"no prepared version of {Ref(ref.name, config)} in {config_dir}")
    version = _versions_in(prepared)[-1]
  return Ref(ref.name, config, version)


def _remote_refs(files: dict[str, int]) -> dict[Ref, set[str]]:
  """{version: names of the files in its folder} for every version folder in a listing."""
  found: dict[Ref, set[str]] = {}
  for path in files:
    parts = path.split("/")
    if any(p.startswith(".") for p in parts[:-1]) or len(parts) not in (3, 4):
      continue
    *head, version, file_name = parts
    if not _VERSION.match(version):
      continue
    ref = Ref(head[0], head[1] if len(head) == 2 else None, version)
    found.setdefault(ref, set()).add(file_name)
  return found


def _files_in(bucket: bucket_lib.Bucket, folder: str) -> dict[str, int]:
  """{file name: size} of the objects directly in a folder of the bucket."""
  return {path[len(folder) + 1:]: size for path, size in bucket.list_files(folder).items()
          if path.startswith(folder + "/") and "/" not in path[len(folder) + 1:]}


def _read_or_none(bucket: bucket_lib.Bucket, rel: str) -> bytes | None:
  try:
    return bucket.read_bytes(rel)
  except FileNotFoundError:
    return None


def resolve_remote(ref: Ref, bucket: bucket_lib.Bucket) -> Ref:
  """Fills in the default config and the latest published version from a bucket."""
  if ref.config is not None and ref.version is not None:
    return ref
  config = ref.config
  if config is None:
    config = _default_config(_read_or_none(bucket, f"{ref.name}/{CONFIG_METADATA}"))
  if ref.version is not None:
    return Ref(ref.name, config, ref.version)
  prefix = "/".join(p for p in (ref.name, config) if p)
  committed = [r.version for r, names in _remote_refs(bucket.list_files(prefix)).items()
               if MARKER in names and MANIFEST in names and r.name == ref.name
               and r.config == config]
  if not committed:
    raise PublishError(f"no published version of {Ref(ref.name, config)} in {bucket.url}")
  return Ref(ref.name, config, _versions_in(committed)[-1])


# ---------------------------------------------------------------- publishing

def _entry(path: pathlib.Path) -> dict:
  sha256, md5 = bucket_lib.file_digests(path)
  return {"size": path.stat().st_size, "sha256": sha256, "md5": md5.hex()}


def _describe_local(ref: Ref, version_dir: pathlib.Path) -> Manifest:
  """Checks that a local version is complete and hashes every file of it."""
  import tensorflow_datasets as tfds

  missing = [name for name in COMMIT_FILES if not (version_dir / name).exists()]
  if missing:
    raise PublishError(f"{version_dir} is not a prepared TFDS version (missing "
                       f"{', '.join(missing)}): build it first")
  info = tfds.builder_from_directory(str(version_dir)).info
  splits = {name: split.num_examples for name, split in info.splits.items()}
  missing = [str(f) for split in info.splits.values() for f in split.filenames
             if not (version_dir / f).exists()]
  if missing:
    raise PublishError(f"{version_dir} is incomplete: {len(missing)} shard(s) missing, "
                       f"e.g. {missing[0]}; rebuild it")
  files = {}
  for path in sorted(version_dir.rglob("*")):
    rel = path.relative_to(version_dir).as_posix()
    if not path.is_file() or rel == MANIFEST or any(p.startswith(".") for p in rel.split("/")):
      continue
    files[rel] = _entry(path)
  return Manifest(dataset=str(ref), files=files, splits=splits)


def _verified(bucket: bucket_lib.Bucket, rel: str, entry: dict, local_path) -> bool:
  """Whether the object at `rel` has the expected size and content.

  Uses the checksum the store computed from the bytes it received when it gives one we
  can compute too (GCS MD5; S3 ETag: MD5 for single-part uploads, MD5 of the part MD5s
  for multipart ones), else reads the object back and compares SHA-256.
  """
  try:
    info = bucket.info(rel)
  except FileNotFoundError:
    return False
  if info.size != entry["size"]:
    return False
  if info.md5 is not None and info.md5.hex() == entry["md5"]:
    return True
  if info.multipart_etag and bucket_lib.s3_multipart_etag(local_path) == info.multipart_etag:
    return True
  return bucket.sha256(rel) == entry["sha256"]


def _progress_bar(total: int, desc: str, enabled: bool):
  from tqdm import tqdm
  return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
              disable=not enabled, file=sys.stderr, dynamic_ncols=True)


def _differences(old: Manifest, new: Manifest, limit=5) -> str:
  a, b = old.content(), new.content()
  names = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
  more = f" and {len(names) - limit} more" if len(names) > limit else ""
  shown = ", ".join(names[:limit]) + more
  return f"{len(names)} file(s) differ: {shown}"


def _publish_config_metadata(bucket, ref: Ref, data_dir: pathlib.Path) -> None:
  """Uploads <name>/.config/metadata.json, which TFDS needs to resolve tfds.load('<name>')."""
  local = data_dir / ref.name / CONFIG_METADATA
  if not local.exists():
    return
  rel = f"{ref.name}/{CONFIG_METADATA}"
  remote = _read_or_none(bucket, rel)
  if remote is None:
    bucket.upload(str(local), rel)
    if bucket.read_bytes(rel) != local.read_bytes():
      raise PublishError(f"{bucket.url_of(rel)} differs from {local} after upload; re-run")
  elif _default_config(remote) != _default_config(local.read_bytes()):
    raise PublishError(
        f"{bucket.url_of(rel)} names default config {_default_config(remote)!r} but {local} "
        f"names {_default_config(local.read_bytes())!r}; refusing to change what "
        f"tfds.load('{ref.name}') resolves to for everyone")


def publish(spec: str, data_dir, url: str, *, progress: bool = True,
            log: Callable[[str], None] = lambda message: None) -> PublishResult:
  """Publishes one prepared version from a local TFDS data_dir to a bucket URL.

  Idempotent and resumable: objects already uploaded and verified by an interrupted
  run are kept; an identical published version is a no-op; a different one is refused.
  """
  data_dir = pathlib.Path(data_dir).expanduser()
  ref = resolve_local(Ref.parse(spec), data_dir)
  version_dir = data_dir / ref.folder
  local = _describe_local(ref, version_dir)
  bucket = bucket_lib.Bucket(url)
  bucket.check()

  remote_files = _files_in(bucket, ref.folder)
  if MARKER in remote_files:
    manifest_bytes = _read_or_none(bucket, f"{ref.folder}/{MANIFEST}")
    if manifest_bytes is None:
      raise PublishError(f"{ref} already exists at {bucket.url_of(ref.folder)} (not published "
                         "by imagesets: no manifest); refusing to change it")
    published = Manifest.from_bytes(manifest_bytes, bucket.url_of(ref.folder))
    if published.content() != local.content():
      raise PublishError(
          f"{ref} is already published at {bucket.url_of(ref.folder)} with different "
          f"content ({_differences(published, local)}); published versions are immutable: "
          "bump the version to publish new data")
    _publish_config_metadata(bucket, ref, data_dir)
    log(f"{ref} is already published at {bucket.url_of(ref.folder)} with identical content; "
        "nothing to do")
    return PublishResult(ref, bucket.url_of(ref.folder), "unchanged")

  _publish_config_metadata(bucket, ref, data_dir)
  # Leftovers of an interrupted run of other content would sit next to the new files.
  stale = [f"{ref.folder}/{name}" for name in remote_files
           if name not in local.files and name != MANIFEST]
  bucket.delete(stale)

  local.published_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
  data_files = [n for n in local.files if n not in COMMIT_FILES]
  reused = [n for n in data_files if n in remote_files and _verified(
      bucket, f"{ref.folder}/{n}", local.files[n], version_dir / n)]
  to_upload = [n for n in data_files if n not in reused]
  total = sum(local.files[n]["size"] for n in to_upload + list(COMMIT_FILES))
  with tempfile.TemporaryDirectory() as tmp:
    manifest_path = pathlib.Path(tmp) / MANIFEST
    manifest_path.write_bytes(local.to_bytes())
    manifest_entry = _entry(manifest_path)
    total += manifest_entry["size"]
    sources = {**{n: version_dir / n for n in local.files}, MANIFEST: manifest_path}
    entries = {**local.files, MANIFEST: manifest_entry}
    with _progress_bar(total, f"publish {ref}", progress) as bar:
      for name in to_upload + [MANIFEST, *COMMIT_FILES]:
        rel = f"{ref.folder}/{name}"
        bucket.upload(str(sources[name]), rel, progress=bar.update)
        if not _verified(bucket, rel, entries[name], sources[name]):
          raise PublishError(f"{bucket.url_of(rel)} does not match {sources[name]} after "
                             "upload (size or checksum); re-run to upload it again")
  log(f"published {ref} to {bucket.url_of(ref.folder)}: {len(to_upload) + 3} object(s) "
      f"uploaded and verified, {len(reused)} reused from an interrupted run")
  return PublishResult(ref, bucket.url_of(ref.folder), "published",
                       uploaded=len(to_upload) + 3, reused=len(reused), num_bytes=total)


# ---------------------------------------------------------------- listing

def list_published(url: str) -> tuple[list[Published], list[Ref]]:
  """(committed versions, unfinished uploads) in a bucket URL, sorted by name."""
  bucket = bucket_lib.Bucket(url)
  bucket.check()
  published, unfinished = [], []
  for ref, names in sorted(_remote_refs(bucket.list_files()).items(),
                           key=lambda item: (item[0].name, item[0].config or "",
                                             tuple(int(x) for x in item[0].version.split(".")))):
    if MARKER not in names:
      unfinished.append(ref)
      continue
    manifest = None
    if MANIFEST in names:
      manifest = Manifest.from_bytes(bucket.read_bytes(f"{ref.folder}/{MANIFEST}"),
                                     bucket.url_of(ref.folder))
    published.append(Published(ref, manifest))
  return published, unfinished


# ---------------------------------------------------------------- fetching

def cache_root(cache_dir=None) -> pathlib.Path:
  if cache_dir is None:
    cache_dir = os.environ.get(CACHE_ENV) or "~/.cache/imagesets"
  return pathlib.Path(cache_dir).expanduser()


def cached_data_dir(url: str, cache_dir=None) -> pathlib.Path:
  """The local TFDS data_dir that mirrors a bucket URL: <cache>/<scheme>/<bucket>/<prefix>."""
  scheme, root = bucket_lib.split_url(url)
  return cache_root(cache_dir) / scheme / root.lstrip("/")


def _local_copy_ok(version_dir: pathlib.Path, deep: bool) -> bool:
  """Whether a cached version is complete: sizes always, checksums if `deep`."""
  if not all((version_dir / name).exists() for name in (*COMMIT_FILES, MANIFEST)):
    return False
  manifest = Manifest.from_bytes((version_dir / MANIFEST).read_bytes(), str(version_dir))
  for name, entry in manifest.files.items():
    path = version_dir / name
    if not path.is_file() or path.stat().st_size != entry["size"]:
      return False
    if deep and bucket_lib.file_digests(path)[0] != entry["sha256"]:
      return False
  return True


@contextlib.contextmanager
def _locked(path: pathlib.Path):
  """One fetcher per cached version on this machine (e.g. several training workers)."""
  path.parent.mkdir(parents=True, exist_ok=True)
  with open(path, "w") as handle:
    fcntl.flock(handle, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(handle, fcntl.LOCK_UN)


def fetch(url: str, spec: str, *, cache_dir=None, verify: bool = False,
          progress: bool = True) -> str:
  """Syncs a published version into the local cache; returns the TFDS data_dir to load.

  The first call downloads every file and checks it against the manifest (size and
  SHA-256) before the version appears in the cache; later calls reuse the cache
  without contacting the bucket when config and version are given (versions are
  immutable). `verify=True` re-hashes a cached copy and repairs it if it was damaged.
  """
  ref = Ref.parse(spec)
  data_dir = cached_data_dir(url, cache_dir)
  if ref.config is not None and ref.version is not None and _local_copy_ok(
      data_dir / ref.folder, deep=verify):
    return str(data_dir)
  bucket = bucket_lib.Bucket(url)
  bucket.check()
  ref = resolve_remote(ref, bucket)
  version_dir = data_dir / ref.folder
  with _locked(version_dir.parent / f".{ref.version}.lock"):
    if _local_copy_ok(version_dir, deep=verify):
      return str(data_dir)
    manifest = _published_manifest(bucket, ref)
    _download(bucket, ref, manifest, version_dir, progress)
    metadata = _read_or_none(bucket, f"{ref.name}/{CONFIG_METADATA}")
    if metadata is not None:
      _write_atomically(data_dir / ref.name / CONFIG_METADATA, metadata)
  return str(data_dir)


def _published_manifest(bucket, ref: Ref) -> Manifest:
  names = set(_files_in(bucket, ref.folder))
  if MARKER not in names:
    raise PublishError(f"{ref} is not published at {bucket.url}"
                       + (" (an upload is unfinished: re-run publish)" if names else ""))
  if MANIFEST not in names:
    raise PublishError(f"{ref} at {bucket.url_of(ref.folder)} was not published by imagesets "
                       "(no manifest to verify against); load it with tfds directly")
  return Manifest.from_bytes(bucket.read_bytes(f"{ref.folder}/{MANIFEST}"),
                             bucket.url_of(ref.folder))


def _download(bucket, ref: Ref, manifest: Manifest, version_dir: pathlib.Path,
              progress: bool) -> None:
  """Downloads into a hidden staging folder, verifies, then renames it into place."""
  staging = version_dir.parent / f".incomplete-{ref.version}"
  staging.mkdir(parents=True, exist_ok=True)
  todo = [n for n, e in manifest.files.items() if not (
      (staging / n).is_file() and (staging / n).stat().st_size == e["size"]
      and bucket_lib.file_digests(staging / n)[0] == e["sha256"])]
  total = sum(manifest.files[n]["size"] for n in todo)
  with _progress_bar(total, f"fetch {ref}", progress) as bar:
    for name in todo:
      target = staging / name
      target.parent.mkdir(parents=True, exist_ok=True)
      bucket.download(f"{ref.folder}/{name}", str(target), progress=bar.update)
      if bucket_lib.file_digests(target)[0] != manifest.files[name]["sha256"]:
        target.unlink()
        raise PublishError(f"{bucket.url_of(ref.folder + '/' + name)} does not match its "
                           "manifest (SHA-256): the download or the published copy is "
                           "damaged; re-run, and tell the publisher if it persists")
  (staging / MANIFEST).write_bytes(manifest.to_bytes())
  if version_dir.exists():  # a damaged copy found by verify=True
    shutil.rmtree(version_dir)
  os.rename(staging, version_dir)


def _write_atomically(path: pathlib.Path, data: bytes) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(f".{path.name}.tmp")
  tmp.write_bytes(data)
  os.replace(tmp, path)


# ---------------------------------------------------------------- training entry points

def tensorflow_can_read(url: str) -> bool:
  """Whether TensorFlow's own file system (which TFDS reads shards with) has the scheme."""
  scheme, _ = bucket_lib.split_url(url)
  if scheme == "file":
    return True
  import tensorflow as tf
  return scheme in tf.io.gfile.get_registered_schemes()


def stream(url: str, spec: str) -> str:
  """Checks that a version is published and returns `url` itself as the data_dir.

  TFDS then reads the shards straight from the bucket (gs:// and paths; TensorFlow has
  no s3:// file system, so use `fetch` there).
  """
  if not tensorflow_can_read(url):
    raise PublishError(f"TensorFlow cannot read {url.split('://')[0]}:// URLs; use fetch "
                       "(a verified local copy) instead of streaming")
  bucket = bucket_lib.Bucket(url)
  bucket.check()
  _published_manifest(bucket, resolve_remote(Ref.parse(spec), bucket))
  return bucket.url


def resolve_data_dir(data_dir: str | None, name: str, *, stream_from_bucket: bool = False,
                     cache_dir=None) -> str | None:
  """What input pipelines call on their `data_dir`: bucket URLs become loadable data_dirs.

  A local path (or None) is returned unchanged. For `s3://` / `gs://` URLs the version
  `name` is fetched into the local cache, or streamed when asked and TensorFlow can read
  the scheme.
  """
  if data_dir is None or bucket_lib.split_url(str(data_dir))[0] == "file":
    return data_dir
  if stream_from_bucket:
    return stream(str(data_dir), name)
  return fetch(str(data_dir), name, cache_dir=cache_dir)
