"""The pictures of a name's last page, by what they show: a version built on another pictures
the examples the two share without decoding them again.

A picture is a function of the example's image bytes, boxes and mask, and of how pictures
are drawn (`report_page`'s sizes, `DRAWING`, the versions of Pillow and simplejpeg): its
key is a SHA-256 of all of them, so a picture is reused only for the very same input.
An example whose record the build knows by its place (`version_examples.Located.record`:
its shard's SHA-256, its position there and its index row; a shard the next version keeps
whole keeps them all) is also found by that (`record_key`), without reading it: such an
entry was made from a read that checked that row against the record. An example's bytes
are read only when that finds nothing.
Only a build on another version reads the cache (`reuse`); every build writes it: a JSON
file beside a name's versions (`FILE`: {"pictures": key -> picture, "records": record
key -> key}), rewritten after each page with the pictures that page holds (bounded as the
page is). One that is not a regular file of at most `_MAX_BYTES` of JSON, or an entry
that is not a JPEG data URI under a SHA-256 key (or a SHA-256 under one), is ignored (the
picture is made again). Local data dirs only.
"""

import hashlib
import json
import logging
import pathlib
import re
import threading
from typing import Callable

import PIL
import simplejpeg

from imagesets.storage import atomic_files
from imagesets.reports import report_page

FILE = ".page_pictures.json"
DRAWING = 1  # raise when `report_page.thumbnail` draws otherwise: old pictures are not reused
_DRAWN_BY = (DRAWING, PIL.__version__, simplejpeg.__version__)
_MAX_BYTES = 64 * 2**20  # a page holds a few thousand pictures of a few KB
_KEY = re.compile(r"[0-9a-f]{64}")
_URI = re.compile(r"data:image/jpeg;base64,[A-Za-z0-9+/]*={0,2}")


def beside(version_dir) -> pathlib.Path | None:
  """The cache of the versions beside `version_dir` (also TFDS's unfinished folder of one);
  None in a bucket."""
  return None if "://" in str(version_dir) else pathlib.Path(version_dir).parent / FILE


def record_key(record: str) -> str:
  """The key of the picture of the record `record` names (`Located.record`)."""
  return hashlib.sha256(repr((_DRAWN_BY, report_page.THUMBNAIL, report_page.THUMBNAIL_QUALITY,
                              "record", record)).encode()).hexdigest()


def key(image: bytes, boxes, mask: bytes | None) -> str:
  digest = hashlib.sha256(repr((_DRAWN_BY, report_page.THUMBNAIL, report_page.THUMBNAIL_QUALITY,
                                len(image), boxes, mask is not None and len(mask))).encode())
  digest.update(image)
  digest.update(mask or b"")
  return digest.hexdigest()


class Cache:
  """`picture(example)`: the page picture of an example (`report_page.thumbnail`), from the
  cache at `path` when `reuse` and it holds one for the same input; `save()` writes the
  pictures asked for since. Thread-safe (pictures are made on threads)."""

  def __init__(self, path: pathlib.Path | None, *, reuse: bool = True,
               make: Callable[[bytes, tuple, bytes | None], str | None] | None = None):
    self.path, self._make = path, make or report_page.thumbnail
    self._old, self._old_records = _read(path) if path is not None and reuse else ({}, {})
    self._used: dict[str, str] = {}
    self._used_records: dict[str, str] = {}
    self._lock = threading.Lock()
    self.reused = 0

  def picture(self, example) -> str | None:
    record = getattr(example, "record", None)
    by_record = record_key(record) if record is not None else None
    found = self._old_records.get(by_record) if by_record is not None else None
    uri = self._old.get(found) if found is not None else None
    reused = uri is not None
    if not reused:  # (read: the picture of the same bytes, else made)
      image, boxes, mask = example.image, example.boxes, example.mask
      found = key(image, boxes, mask)
      uri = self._old.get(found)
      reused = uri is not None
      if not reused:
        uri = self._make(image, boxes, mask)
    if uri is not None:
      with self._lock:
        self.reused += reused
        self._used[found] = uri
        if by_record is not None:
          self._used_records[by_record] = found
    return uri

  def save(self) -> None:
    if self.path is None:
      return
    try:
      atomic_files.write(self.path, json.dumps(
          {"pictures": self._used, "records": self._used_records}, sort_keys=True,
          separators=(",", ":")).encode())
    except OSError as why:  # (a cache: the page is written whatever happens to it)
      logging.warning("%s: not written (%s): the next page makes its pictures again",
                      self.path, why)


def _read(path: pathlib.Path) -> tuple[dict[str, str], dict[str, str]]:
  """(key -> picture, record key -> key) of the cache at `path`: what is as `save` writes
  it; an older cache's flat key -> picture is pictures only."""
  try:  # (NotAFileOfOurs is a ValueError)
    stored = json.loads(atomic_files.read_back(path, _MAX_BYTES))
  except (OSError, ValueError, RecursionError):
    return {}, {}
  if not isinstance(stored, dict):
    return {}, {}
  pictures, records = ((stored.get("pictures"), stored.get("records"))
                       if "pictures" in stored else (stored, {}))
  if not (isinstance(pictures, dict) and isinstance(records, dict)):
    return {}, {}
  return ({k: v for k, v in pictures.items() if _is_key(k) and isinstance(v, str)
           and _URI.fullmatch(v)},
          {k: v for k, v in records.items() if _is_key(k) and _is_key(v)})


def _is_key(value) -> bool:
  return isinstance(value, str) and _KEY.fullmatch(value) is not None
