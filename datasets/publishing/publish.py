"""Publish a prepared TFDS version from a local data_dir to a team bucket.

First the version is claimed: `versions.CLAIM`, naming the content, written with the
store's conditional write (`Bucket.create`), so of two builds published under one version
number at once exactly one uploads anything; the other is refused in one line, and the
same build re-run resumes its own claim. Then every data file is uploaded and verified
(one that another committed version of the dataset holds byte for byte, by its manifest,
is copied server-side from it instead and verified the same way: uploads are proportional
to the change), then the manifest, `dataset_info.json` and last `features.json`, the
commit marker (`versions`): a reader never sees a half-published version, nor objects of
two builds. A killed publish is resumed by running it again; a published version is never
changed.
"""

import dataclasses
import datetime
import hashlib
import json
import os
import pathlib
import socket
import tempfile
from typing import Callable

from imagesets.storage import bucket as bucket_lib
from imagesets.storage import manifest as manifest_lib
from imagesets.console import progress_bars
from imagesets.storage import versions


@dataclasses.dataclass(frozen=True)
class PublishResult:
  ref: versions.Ref
  url: str
  status: str          # "published" or "unchanged"
  uploaded: int = 0    # objects uploaded in this run
  reused: int = 0      # objects found already uploaded and verified (resumed run)
  num_bytes: int = 0   # bytes uploaded in this run (copies not counted: none passed here)
  copied: int = 0      # objects copied server-side from other versions, and verified


def _verified(bucket: bucket_lib.Bucket, rel: str, entry: dict, local_path) -> bool:
  """Whether the object at `rel` has the expected size and content.

  Uses the checksum the store computed from the bytes it received when it gives one we
  can compute too (GCS MD5; S3 ETag: MD5 for single-part uploads, MD5 of the part MD5s
  for multipart ones), else reads the object back and compares SHA-256. In a folder
  bucket, what is not a regular file (a link, even to the right bytes; a FIFO) is not: the
  readers refuse it.
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
  try:
    return bucket.sha256(rel) == entry["sha256"]
  except bucket_lib.NotAnObjectError:  # (what readers refuse: uploaded again, replacing it)
    return False


def _other_versions(bucket, ref: versions.Ref) -> tuple[dict[versions.Ref, set[str]],
                                                        dict[str, int]]:
  """({version: its file names} of the other committed versions with a manifest of `ref`'s
  dataset and config, newest first; {rel: size} of their objects), from one listing."""
  listed = bucket.list_files(ref.folder.rsplit("/", 1)[0])
  # A source is `<other.folder>/<name>`, no part of it unchecked: name and config are ref's,
  # remote_refs keeps versions matching X.Y.Z, and the manifest's names pass check_name.
  found = {other: names for other, names in versions.remote_refs(listed).items()
           if (other.name, other.config) == (ref.name, ref.config) and other != ref
           and {versions.MARKER, versions.MANIFEST} <= names}
  return dict(sorted(found.items(), key=lambda item: versions.sort_key(item[0]),
                     reverse=True)), listed


def _source_manifest(bucket, other: versions.Ref, names: set[str],
                     log) -> manifest_lib.Manifest | None:
  """`other`'s manifest, or None (said in `log`) where it cannot be read or is forged: every
  name in it was checked (`Manifest.from_bytes`) before any is joined to a path."""
  try:
    return manifest_lib.published(bucket, other, names)
  except (versions.PublishError, bucket_lib.BucketError, FileNotFoundError) as error:
    log(f"not copying from {other}: {error}")
    return None


def _copy_sources(bucket, ref: versions.Ref, wanted: set[tuple[int, str]],
                  log) -> dict[tuple[int, str], str]:
  """{(size, sha256): rel of an object that another committed version's manifest says holds
  it}, for what of `wanted` has one. Manifests are read newest version first, each at most
  once, and none once everything wanted has a source; an object counts only where the
  listing shows it with that size. The bucket's word is no proof: copies are verified."""
  found: dict[tuple[int, str], str] = {}
  others, listed = _other_versions(bucket, ref)
  for other, names in others.items():
    if wanted <= found.keys():
      break
    manifest = _source_manifest(bucket, other, names, log)
    for name, content in (manifest.content() if manifest else {}).items():
      rel = f"{other.folder}/{name}"
      if content in wanted and listed.get(rel) == content[0]:
        found.setdefault(content, rel)
  return found


def _copied(bucket, source: str, rel: str, entry: dict, local_path, log) -> bool:
  """Whether `source` was copied to `rel` server-side and verified like an upload; False
  (said in `log`) leaves `rel` to the upload, which replaces whatever the copy left."""
  try:
    bucket.copy(source, rel)
  except (bucket_lib.BucketError, FileNotFoundError) as error:
    log(f"could not copy {bucket.url_of(source)} to {bucket.url_of(rel)} ({error}); "
        "uploading it")
    return False
  if _verified(bucket, rel, entry, local_path):
    return True
  log(f"{bucket.url_of(rel)}, copied from {bucket.url_of(source)}, does not match "
      f"{local_path}; uploading it")
  return False


def _copy_from_other_versions(bucket, ref: versions.Ref, local: manifest_lib.Manifest,
                              names: list[str], version_dir: pathlib.Path, log) -> list[str]:
  """Those of `names` (data files still to upload) copied server-side from another
  committed version of the dataset holding the same size and SHA-256, and verified."""
  if not names:
    return []  # (a resumed run with everything verified: not even a listing)
  content = local.content()
  sources = _copy_sources(bucket, ref, {content[name] for name in names}, log)
  return [name for name in names if content[name] in sources and _copied(
      bucket, sources[content[name]], f"{ref.folder}/{name}", local.files[name],
      version_dir / name, log)]


def _differences(old: manifest_lib.Manifest, new: manifest_lib.Manifest, limit=5) -> str:
  a, b = old.content(), new.content()
  names = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
  more = f" and {len(names) - limit} more" if len(names) > limit else ""
  shown = ", ".join(names[:limit]) + more
  return f"{len(names)} file(s) differ: {shown}"


def _publish_config_metadata(bucket, ref: versions.Ref, data_dir: pathlib.Path) -> None:
  """Uploads <name>/.config/metadata.json, which TFDS needs to resolve tfds.load('<name>')."""
  local = data_dir / ref.name / versions.CONFIG_METADATA
  if not local.exists():
    return
  rel = f"{ref.name}/{versions.CONFIG_METADATA}"
  remote = versions.config_metadata(bucket, ref.name)
  if remote is None:
    bucket.upload(str(local), rel)
    if bucket.read_bytes(rel) != local.read_bytes():
      raise versions.PublishError(f"{bucket.url_of(rel)} differs from {local} after upload; re-run")
  elif versions.default_config(remote) != versions.default_config(local.read_bytes()):
    raise versions.PublishError(
        f"{bucket.url_of(rel)} names default config {versions.default_config(remote)!r} but {local} "
        f"names {versions.default_config(local.read_bytes())!r}; refusing to change what "
        f"tfds.load('{ref.name}') resolves to for everyone")


def _refuse_other_content(bucket, ref: versions.Ref, local: manifest_lib.Manifest) -> None:
  """The version is committed: identical content is a no-op (returns), other is refused."""
  manifest_bytes = versions.read_or_none(bucket, f"{ref.folder}/{versions.MANIFEST}",
                                         manifest_lib.MAX_BYTES)
  if manifest_bytes is None:
    raise versions.PublishError(f"{ref} already exists at {bucket.url_of(ref.folder)} (not published "
                       "by imagesets: no manifest); refusing to change it")
  published = manifest_lib.Manifest.from_bytes(manifest_bytes, bucket.url_of(ref.folder))
  if published.content() != local.content():
    raise versions.PublishError(
        f"{ref} is already published at {bucket.url_of(ref.folder)} with different "
        f"content ({_differences(published, local)}); published versions are immutable: "
        "bump the version to publish new data")


def _content_digest(local: manifest_lib.Manifest) -> str:
  return hashlib.sha256(json.dumps(local.content(), sort_keys=True).encode()).hexdigest()


_MAX_CLAIM = 4096  # bytes: a claim is a line of JSON; anything larger is not one of ours


def _held_claim(bucket, rel: str) -> dict:
  """The claim at `rel` as a dict ({} when absent, too large or not ours: untrusted). Read
  bounded, as one object (a size asked first may change before the read; in a folder, a
  link to /dev/zero or a FIFO sizes 0 and never ends): a larger one, or none a reader
  takes (`Bucket.read_bytes`), is not ours."""
  try:
    claim = json.loads(bucket.read_bytes(rel, _MAX_CLAIM))
  except (FileNotFoundError, ValueError, RecursionError, bucket_lib.NotAnObjectError):
    return {}
  return claim if isinstance(claim, dict) else {}


def _shown(value) -> str:
  """A claim's field for a message: printable characters only, short."""
  return "".join(c if c.isprintable() else "?" for c in str(value))[:80]


def _claim(bucket, ref: versions.Ref, local: manifest_lib.Manifest) -> None:
  """Claims the version for this content before anything is uploaded (see the module)."""
  rel = f"{ref.folder}/{versions.CLAIM}"
  digest = _content_digest(local)
  now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
  mine = json.dumps({"content": digest, "by": f"{socket.gethostname()} pid {os.getpid()}",
                     "at": now}).encode()
  if bucket.create(rel, mine):
    return
  claim = _held_claim(bucket, rel)
  if claim.get("content") == digest:
    return  # the same content: this build (or an identical one) resumes
  if versions.MARKER in versions.files_in(bucket, ref.folder):  # committed meanwhile
    _refuse_other_content(bucket, ref, local)
    return
  _refuse_claimed(bucket, ref, rel, claim)


def _refuse_claimed(bucket, ref: versions.Ref, rel: str, claim: dict) -> None:
  who = (f" (claimed {_shown(claim.get('at'))} by {_shown(claim.get('by'))})"
         if claim.get("at") and claim.get("by") else "")
  raise versions.PublishError(
      f"{ref} is being published to {bucket.url_of(ref.folder)} by another build with other "
      f"content{who}; one version number holds one build: bump the version, or, if that "
      f"publish died and its build is to be dropped, delete {bucket.url_of(rel)} and re-run")


def _still_claimed(bucket, ref: versions.Ref, local: manifest_lib.Manifest) -> None:
  """Before the commit: the claim is still this content's (a store that ignored the
  condition, or a claim deleted by hand while this publish ran, is caught here)."""
  rel = f"{ref.folder}/{versions.CLAIM}"
  claim = _held_claim(bucket, rel)
  if claim.get("content") != _content_digest(local):
    _refuse_claimed(bucket, ref, rel, claim)


def _files_of_the_version(bucket, ref: versions.Ref, local: manifest_lib.Manifest
                          ) -> dict[str, int]:
  """{name: size} of the version's objects in the bucket: those directly in its folder, and
  nested ones under a subfolder the local version has (`record_index/`), as its manifest
  names them. Other nested folders are not the version's: a config named like a version
  (`<name>/1.0.0/1.0.0/`, config "1.0.0") sits inside the unconfigured version's folder."""
  own = {name.split("/")[0] for name in local.files if "/" in name}
  return {name: size for name, size in versions.files_under(bucket, ref.folder).items()
          if "/" not in name or name.split("/")[0] in own}


def publish(spec: str, data_dir, url: str, *, progress: bool = True,
            log: Callable[[str], None] = lambda message: None) -> PublishResult:
  """Publishes one prepared version from a local TFDS data_dir to a bucket URL.

  Idempotent and resumable: objects already uploaded and verified by an interrupted
  run are kept; an identical published version is a no-op; a different one is refused.
  A data file that another committed version of the dataset holds (same size and SHA-256,
  under any name) is copied server-side rather than uploaded, then verified as an upload.
  """
  data_dir = pathlib.Path(data_dir).expanduser()
  ref = versions.resolve_local(versions.Ref.parse(spec), data_dir)
  version_dir = data_dir / ref.folder
  local = manifest_lib.describe_local(ref, version_dir)
  bucket = bucket_lib.Bucket(url)
  bucket.check()

  remote_files = _files_of_the_version(bucket, ref, local)
  if versions.MARKER not in remote_files:
    _claim(bucket, ref, local)
    remote_files = _files_of_the_version(bucket, ref, local)  # (what is there once claimed)
  if versions.MARKER in remote_files:
    _refuse_other_content(bucket, ref, local)
    _publish_config_metadata(bucket, ref, data_dir)
    log(f"{ref} is already published at {bucket.url_of(ref.folder)} with identical content; "
        "nothing to do")
    return PublishResult(ref, bucket.url_of(ref.folder), "unchanged")

  _publish_config_metadata(bucket, ref, data_dir)
  # Leftovers of an interrupted run of other content (before claims) would sit next to the
  # new files.
  # Hidden names are never a version's files (`describe_local` skips them): the claim, and
  # another publisher's temporary files of a folder bucket, stay.
  stale = [f"{ref.folder}/{name}" for name in remote_files
           if name not in local.files and name != versions.MANIFEST
           and not any(part.startswith(".") for part in name.split("/"))]
  bucket.delete(stale)

  local.published_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
  data_files = [n for n in local.files if n not in versions.COMMIT_FILES]
  reused = [n for n in data_files if n in remote_files and _verified(
      bucket, f"{ref.folder}/{n}", local.files[n], version_dir / n)]
  to_upload = [n for n in data_files if n not in reused]
  copied = _copy_from_other_versions(bucket, ref, local, to_upload, version_dir, log)
  to_upload = [n for n in to_upload if n not in copied]
  total = sum(local.files[n]["size"] for n in to_upload + list(versions.COMMIT_FILES))
  with tempfile.TemporaryDirectory() as tmp:
    manifest_path = pathlib.Path(tmp) / versions.MANIFEST
    manifest_path.write_bytes(local.to_bytes())
    manifest_entry = manifest_lib.entry(manifest_path)
    total += manifest_entry["size"]
    sources = {**{n: version_dir / n for n in local.files}, versions.MANIFEST: manifest_path}
    entries = {**local.files, versions.MANIFEST: manifest_entry}
    with progress_bars.byte_bar(total, f"publish {ref}", progress) as bar:
      for name in to_upload + [versions.MANIFEST, *versions.COMMIT_FILES]:
        if name == versions.MANIFEST:
          _still_claimed(bucket, ref, local)
        rel = f"{ref.folder}/{name}"
        bucket.upload(str(sources[name]), rel, progress=bar.update)
        if not _verified(bucket, rel, entries[name], sources[name]):
          raise versions.PublishError(f"{bucket.url_of(rel)} does not match {sources[name]} after "
                             "upload (size or checksum); re-run to upload it again")
  log(f"published {ref} to {bucket.url_of(ref.folder)}: {len(to_upload) + 3} object(s) "
      f"uploaded and verified, {len(copied)} copied server-side from other versions, "
      f"{len(reused)} reused from an interrupted run")
  return PublishResult(ref, bucket.url_of(ref.folder), "published",
                       uploaded=len(to_upload) + 3, reused=len(reused), num_bytes=total,
                       copied=len(copied))
