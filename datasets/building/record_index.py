"""What every shard of a version holds, beside it: the index a later version is built on.

`INDEX_FOLDER/<shard file name>.json` per shard, written by every local build: the shard's
split, its SHA-256 and, in the shard's order, each record's key (a class-folder photo's relative path),
its size in bytes and its image's fingerprint (`image_hashes.Fingerprint.to_json`, or null
when the build fingerprinted nothing). A version built on this one (`incremental`) reads it
to keep unchanged shards byte for byte, to rewrite only the shards of removed, edited or
relabelled photos, and to check new photos against every old one without decoding them.

One file per shard, not one per version: a shard kept by the next version keeps an index
file of the same bytes (the file names no other shard), so publishing that version copies
it like the shard; only the new shards' index files are new bytes.

Plain JSON (sorted keys, no compression): the same records give the same bytes on every
machine. Files read back are checked like untrusted input (`read`): an index is only a
plan, and a wrong one makes a build stop and say so, never write a wrong version.
"""

import dataclasses
import functools
import hashlib
import itertools
import json
import os
import pathlib
import re
from typing import Callable

from imagesets.storage import atomic_files
from imagesets.storage import tfrecord_files
import imagesets.tfds_internals as tfds_internals
from imagesets.analysis import image_hashes
from imagesets.constants import RECORD_INDEX_FOLDER

INDEX_FOLDER = RECORD_INDEX_FOLDER
READABLE_FORMATS = ("tfrecord", "array_record")  # whose records `record_reader` reads
# 3: fingerprints hold every measure of `image_quality.FIELDS` (2 had five of them: a base
# written so is built on in full once); 2: the shard's SHA-256 (1 had none)
FORMAT = 3
_MAX_BYTES = 256 << 20  # an index file larger than this is not one of ours
_SHARD_NAME = re.compile(r"[^/\\\0]+-\d{5}-of-\d{5}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class RecordIndexError(ValueError):
  """An index file that is missing, unreadable or not as a build writes it."""


@dataclasses.dataclass(frozen=True)
class ShardIndex:
  sha256: str                                   # of the shard file's bytes
  records: list[tuple[str, int, "image_hashes.Fingerprint | None"]]  # (key, size, fingerprint)
  digest: str = ""                              # of the index file's bytes, as read


def path_of(version_dir, shard_name: str) -> pathlib.Path:
  return pathlib.Path(version_dir) / INDEX_FOLDER / f"{shard_name}.json"


def is_sha256(digest) -> bool:
  return isinstance(digest, str) and _SHA256.fullmatch(digest) is not None


def sha256_of(path) -> str:
  with open(path, "rb") as shard:
    return hashlib.file_digest(shard, "sha256").hexdigest()


def example_fields(record: bytes) -> tuple[str | None, int | None, bytes]:
  """(file name, label id, image bytes) of an example's serialized record (None where the
  record has not exactly one: a detection or multi-label example has no "label")."""
  features = tfds_internals.Example.FromString(record).features.feature
  names, labels = features["file_name"].bytes_list.value, features["label"].int64_list.value
  images = features["image"].bytes_list.value
  return (names[0].decode("utf-8", "surrogateescape") if len(names) == 1 else None,
          labels[0] if len(labels) == 1 else None, images[0] if len(images) == 1 else b"")


def example_bytes(record: bytes, key: str) -> bytes | None:
  """The one bytes value of feature `key` of an example's serialized record (an encoded
  image or mask); None where it has not exactly one."""
  values = tfds_internals.Example.FromString(record).features.feature[key].bytes_list.value
  return values[0] if len(values) == 1 else None


def example_objects(record: bytes) -> list[tuple[tuple[float, ...], int]]:
  """[(bbox, label id)] of a detection example's serialized record (TFDS stores its
  `objects` sequence as flat lists: "objects/bbox" 4 floats an object, "objects/label")."""
  features = tfds_internals.Example.FromString(record).features.feature
  flat = list(features["objects/bbox"].float_list.value)
  labels = list(features["objects/label"].int64_list.value)
  if len(flat) != 4 * len(labels):
    raise RecordIndexError(f"a record with {len(labels)} object labels and {len(flat)} box "
                           "numbers (not 4 each)")
  return [(tuple(flat[4 * i:4 * i + 4]), label) for i, label in enumerate(labels)]


def write(version_dir, shard_name: str, split: str, records: list[list],
          same_as: pathlib.Path | None = None, same_digest: str = "") -> str | None:
  """Writes the index of one shard (which is written): `records` are [key, size,
  fingerprint json, a `Fingerprint` (a base's record, as `read` gives it) or None], and
  the shard's SHA-256 goes with them; returns that SHA-256. `same_as`: an index
  file of this very shard (a base's shard kept whole), linked or copied instead (the same
  bytes; returns None), whose bytes must still have the SHA-256 `same_digest` they were
  read with (`ShardIndex.digest`): an index changed since is not taken."""
  path = path_of(version_dir, shard_name)
  path.parent.mkdir(exist_ok=True)
  if same_as is not None:
    atomic_files.link(same_as, path, exclusive=True)
    if hashlib.sha256(_read_regular_file(path)).hexdigest() != same_digest:
      path.unlink()
      raise RecordIndexError(f"{same_as} changed during the build (its SHA-256 is not that "
                             "of the index the build planned from)")
    return None
  rows = [[key, size, f.to_json() if isinstance(f, image_hashes.Fingerprint) else f]
          for key, size, f in records]
  digest = sha256_of(pathlib.Path(version_dir) / shard_name)
  path.write_text(json.dumps({"format": FORMAT, "split": split, "records": rows,
                              "sha256": digest}, sort_keys=True, separators=(",", ":")))
  return digest


def _read_regular_file(path: pathlib.Path) -> bytes:
  """The bytes of `path` if it is a regular file (no symlink) of at most _MAX_BYTES."""
  try:
    return atomic_files.read_back(path, _MAX_BYTES)
  except atomic_files.NotAFileOfOurs as why:
    raise RecordIndexError(f"{path}: not a file an index is ({why.size} bytes)"
                           if why.size is not None else
                           f"{path}: larger than any index a build writes") from None


def read(version_dir, shard_name: str, split: str) -> ShardIndex:
  """The index of one shard, checked like untrusted input."""
  if not _SHARD_NAME.fullmatch(shard_name):
    raise RecordIndexError(f"{shard_name!r} is not a shard file name")
  path = path_of(version_dir, shard_name)
  try:
    data = _read_regular_file(path)
    raw = json.loads(data)
  except FileNotFoundError:
    raise RecordIndexError(f"{path} is missing") from None
  except OSError as why:  # (a symlink: ELOOP)
    raise RecordIndexError(f"{path}: {why.strerror or why}") from None
  except (ValueError, RecursionError) as why:
    raise RecordIndexError(f"{path}: not JSON ({why})") from None
  if not (isinstance(raw, dict) and raw.get("format") == FORMAT and raw.get("split") == split
          and isinstance(raw.get("records"), list) and is_sha256(raw.get("sha256"))):
    written = raw.get("format") if isinstance(raw, dict) else None
    other = type(written) is int and written != FORMAT  # pylint: disable=unidiomatic-typecheck
    raise RecordIndexError(
        f"{path}: written in index format {written} by another imagesets (this one reads "
        f"format {FORMAT})" if other else
        f"{path}: not the index of a {split!r} shard in format {FORMAT}")
  records = []
  for row in raw["records"]:
    if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str) and row[0]
            and type(row[1]) is int and row[1] > 0  # pylint: disable=unidiomatic-typecheck
            and (row[2] is None or isinstance(row[2], list))):
      raise RecordIndexError(f"{path}: a record row is not [key, size, fingerprint]: {row!r:.200}")
    fingerprint = None
    if row[2] is not None:
      try:
        fingerprint = image_hashes.Fingerprint.from_json(row[2])
      except (ValueError, TypeError, IndexError, AttributeError):
        raise RecordIndexError(f"{path}: a fingerprint is not one a build writes: "
                               f"{row[2]!r:.200}") from None
    records.append((row[0], row[1], fingerprint))
  return ShardIndex(raw["sha256"], records, hashlib.sha256(data).hexdigest())


def offsets(sizes: list[int]) -> list[int]:
  """Where each record of a TFRecord shard starts, given its index's sizes, in order (one
  offset a record: none for an empty shard)."""
  return list(itertools.accumulate([size + tfrecord_files.FRAMING for size in sizes[:-1]],
                                   initial=0)) if sizes else []


def record_reader(version_dir, shard_name: str, file_format: str, position: int, count: int,
                  size: int, offset: int) -> Callable[[], bytes]:
  """A function that reads, when called, record `position` of the `count` of a shard this
  build wrote, of `size` bytes at `offset` (`offsets`; its index's sizes locate it), and
  no other."""
  path = pathlib.Path(version_dir) / shard_name
  if file_format not in READABLE_FORMATS:
    raise ValueError(f"{path}: records of {file_format} shards are not read here (only "
                     f"{', '.join(READABLE_FORMATS)})")
  if file_format == "array_record":
    return functools.partial(_array_record_at, path, position, size, count)
  return functools.partial(_tfrecord_at, path, offset, size)


def _tfrecord_at(path: pathlib.Path, offset: int, size: int) -> bytes:
  with open(path, "rb") as shard:
    shard.seek(offset)
    header = shard.read(tfrecord_files.HEADER.size)
    data = shard.read(size)
  if (len(header) != tfrecord_files.HEADER.size
      or tfrecord_files.HEADER.unpack(header)[0] != size or len(data) != size):
    raise RecordIndexError(f"{path}: no record of {size} bytes at {offset}, as its index says")
  return data


def array_record_reader(path):
  """An ArrayRecord file's reader (the module is there: an array_record build wrote it)."""
  from array_record.python import array_record_module
  return array_record_module.ArrayRecordReader(os.fspath(path))


def _array_record_at(path: pathlib.Path, position: int, size: int, count: int) -> bytes:
  reader = array_record_reader(path)
  try:
    data = reader.read([position])[0] if reader.num_records() == count else None
  finally:
    reader.close()
  if data is None or len(data) != size:
    raise RecordIndexError(f"{path}: record {position} is not the {size} bytes its index says")
  return data
