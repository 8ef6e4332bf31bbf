"""A version's manifest: the size, SHA-256 and MD5 of every file, checked on every copy.

Written by `publish` before the commit marker; read by `fetch`, `list` and the streaming
shard cache, which check every byte they copy against it.
"""

import dataclasses
import json
import pathlib
import re
import unicodedata

from imagesets.storage import bucket as bucket_lib
from imagesets.storage import versions

MANIFEST_FORMAT = 1
_SHA256 = re.compile(r"[0-9a-f]{64}")
# More than any manifest holds, so that a larger object is refused unread: a file's entry
# takes about 160 bytes besides its name (at most 1024 characters: `check_name`), so
# 100,000 files of the longest names make ~119 MB (of 60-character names, ~22 MB).
MAX_BYTES = 128 << 20


def check_name(name, where: str) -> str:
  """`name` if it is a safe relative file name inside a version folder; else PublishError.

  Everything in a manifest comes from the bucket, which anyone with write access controls:
  a name such as `../../.bashrc` or `/home/u/.bashrc` must never reach a path join."""
  if not (isinstance(name, str) and name and len(name) <= 1024 and all(
      versions.is_plain_part(part) for part in name.split("/"))):
    raise versions.PublishError(
        f"{where}: the manifest names the file {name!r}, which is not a plain relative file "
        "name (absolute, '..', empty or hidden parts): refused, nothing was written; the "
        "published manifest is damaged or forged, tell the publisher")
  return name


def _is_count(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_entry(name: str, entry, where: str) -> None:
  if not (isinstance(entry, dict) and _is_count(entry.get("size"))
          and isinstance(entry.get("sha256"), str) and _SHA256.fullmatch(entry["sha256"])
          and isinstance(entry.get("md5", ""), str)):
    raise versions.PublishError(f"{where}: the manifest entry of {name!r} is no valid size "
                                "and SHA-256 (and MD5): refused; tell the publisher")


def _damaged(where: str, why: str) -> versions.PublishError:
  return versions.PublishError(f"{where}: the manifest {why}: refused; it is damaged or "
                               "forged, tell the publisher")


def _check_fields(raw, where: str) -> None:
  """Each field of a manifest read from a bucket is of its type before any is used (a
  forged one fails here in one line, not later as an AttributeError, in another command)."""
  if not isinstance(raw, dict):
    raise _damaged(where, f"is a JSON {type(raw).__name__}, not an object")
  splits = raw.get("splits")
  wrong = [field for field, right in (
      ("dataset", isinstance(raw.get("dataset"), str)),
      ("files", isinstance(raw.get("files"), dict)),
      ("splits", isinstance(splits, dict) and all(map(_is_count, splits.values()))),
      ("published_at", isinstance(raw.get("published_at", ""), str)),
      ("format", _is_count(raw.get("format", MANIFEST_FORMAT)))) if not right]
  if wrong:
    raise _damaged(where, f"has no valid {', '.join(wrong)}")


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

  def check_loadable(self, where: str) -> None:
    """PublishError unless this manifest lists the commit files: without them the version
    is none TFDS can load (fetched, it would be fetched again at every call)."""
    unloadable = [name for name in versions.COMMIT_FILES if name not in self.files]
    if unloadable:
      raise versions.PublishError(
          f"{where}: its manifest lists no {' nor '.join(unloadable)}: not a version TFDS "
          "can load, nothing fetched; it is damaged or forged, tell the publisher")

  def check_every_shard_listed(self, dataset_info: pathlib.Path, where: str) -> set[str]:
    """The shard files the version's `dataset_info` (downloaded, checked against this
    manifest) names, whatever their names' pattern; PublishError unless this manifest is
    loadable (`check_loadable`) and lists every one: a version fetched without one would
    be taken for complete and fail in training, at every load. Its splits are untrusted:
    any malformed one refuses."""
    self.check_loadable(where)
    try:
      info = json.loads(dataset_info.read_bytes())
      # (the names one at a time, only listed ones kept: a forged file may name millions)
      shards, first, more = set(), None, 0
      for _, name in versions.shard_names(info):
        if name in self.files:
          shards.add(name)
        elif first is None:
          first = name
        else:
          more += 1
    except (OSError, ValueError, RecursionError, TypeError, KeyError, AttributeError) as why:
      raise _damaged(where, f"comes with a {versions.DATASET_INFO} that names no readable "
                     f"splits ({type(why).__name__})") from None
    if first is not None:
      raise _damaged(where, f"lists no {first!r:.300}" + (
          f" (nor {more} more shard(s))" if more else "")
          + f", which its {versions.DATASET_INFO} names")
    return shards

  def to_bytes(self) -> bytes:
    return json.dumps(dataclasses.asdict(self), indent=1).encode()

  @classmethod
  def from_bytes(cls, data: bytes, where: str) -> "Manifest":
    """The manifest in `data`, read as untrusted: the type of every field, and each file's
    name, size and SHA-256, checked before any is used; else one PublishError line."""
    try:
      raw = json.loads(data)
    except (ValueError, RecursionError) as exc:  # (Recursion: nested deeper than it parses)
      raise _damaged(where, f"is unreadable ({type(exc).__name__}: {str(exc)[:120]})") from None
    _check_fields(raw, where)
    for name, file_entry in raw["files"].items():  # before any name can touch a path
      check_name(name, where)
      _check_entry(name, file_entry, where)
    folders = folders_of(raw["files"])
    both = sorted(folders & raw["files"].keys())
    if both:  # (a file "a" and "a/b": no folder holds both)
      raise _damaged(where, f"names {both[0]!r} as a file and as a folder of others")
    clash = case_clash(raw["files"], folders)
    if clash:
      raise _damaged(where, f"names {clash}")
    return cls(**{f.name: raw[f.name] for f in dataclasses.fields(cls) if f.name in raw})


def case_clash(names, folders: set[str] | None = None) -> str | None:
  """Two of the files `names` that a file system blind to case (macOS's and Windows'
  defaults; macOS's to Unicode normalisation too) holds as one file, or a file and a folder
  it holds as one, in words; else None. Fetched there, the second would overwrite the
  first and the copy never check. `folders`: `folders_of(names)`, when made already."""
  seen = {}
  for name in sorted(names):
    other = seen.setdefault(_folded(name), name)
    if other != name:
      return f"{other!r:.300} and {name!r:.300}, one file where case is not told apart"
  folders = {_folded(folder): folder for folder in
             sorted(folders_of(names) if folders is None else folders)}
  for folded, name in seen.items():
    if folded in folders:
      return (f"{name!r:.300} and {folders[folded]!r:.300}/..., a file and a folder where "
              "case is not told apart")
  return None


def folders_of(names) -> set[str]:
  """The folders that hold the files `names` (relative, "/"-separated), each once: "a" and
  "a/b" of "a/b/c"."""
  folders = set()
  for name in names:
    at = name.rfind("/")
    while at > 0 and name[:at] not in folders:   # (a folder there holds its parents too)
      folders.add(name[:at])
      at = name.rfind("/", 0, at)
  return folders


def _folded(name: str) -> str:
  # (lower, not casefold: neither file system folds "ß" to "ss")
  return name.lower() if name.isascii() else unicodedata.normalize("NFC", name).lower()


def entry(path: pathlib.Path) -> dict:
  sha256, md5 = bucket_lib.file_digests(path)
  return {"size": path.stat().st_size, "sha256": sha256, "md5": md5.hex()}


def describe_local(ref: versions.Ref, version_dir: pathlib.Path) -> Manifest:
  """Checks that a local version is complete and hashes every file of it."""
  missing = [name for name in versions.COMMIT_FILES if not (version_dir / name).exists()]
  if missing:
    raise versions.PublishError(f"{version_dir} is not a prepared TFDS version (missing "
                       f"{', '.join(missing)}): build it first")
  info = json.loads((version_dir / versions.DATASET_INFO).read_text())
  splits = versions.split_counts(info)
  missing = [name for names in versions.split_files(info).values() for name in names
             if not (version_dir / name).exists()]
  if missing:
    raise versions.PublishError(f"{version_dir} is incomplete: {len(missing)} shard(s) missing, "
                       f"e.g. {missing[0]}; rebuild it")
  files = {}
  for path in sorted(version_dir.rglob("*")):
    rel = path.relative_to(version_dir).as_posix()
    if not path.is_file() or rel == versions.MANIFEST or any(p.startswith(".") for p in rel.split("/")):
      continue
    files[rel] = entry(path)
  clash = case_clash(files)
  if clash:
    raise versions.PublishError(f"{version_dir} holds {clash} (macOS, Windows): a copy "
                                "fetched there would never be whole; rename one, then publish")
  return Manifest(dataset=str(ref), files=files, splits=splits)


def published(bucket, ref: versions.Ref, names: set[str] | None = None) -> "Manifest":
  """The manifest of a committed version; PublishError if it is not committed or has none.
  `names`: the files of its folder when the caller has listed them already (else listed)."""
  names = set(versions.files_in(bucket, ref.folder)) if names is None else names
  if versions.MARKER not in names:
    raise versions.DatasetNotPreparedError(
        versions.not_found(ref, bucket=bucket)
        + ("; an upload of it is unfinished: re-run publish" if names else ""))
  if versions.MANIFEST not in names:
    raise versions.PublishError(f"{ref} at {bucket.url_of(ref.folder)} was not published by imagesets "
                       "(no manifest to verify against); load it with tfds directly")
  return Manifest.from_bytes(bucket.read_bytes(f"{ref.folder}/{versions.MANIFEST}", MAX_BYTES),
                             bucket.url_of(ref.folder))
