"""One storage interface for team buckets: `s3://`, `gs://` and plain local paths.

Everything goes through fsspec (s3fs, gcsfs, the local file system), so publishing,
listing and fetching run the same code against AWS, GCS, an emulator in the tests or
an NFS folder. Credentials come from each cloud's standard chain (AWS: env vars,
`AWS_PROFILE`, `~/.aws/*`, instance roles, `AWS_ENDPOINT_URL`; GCS: application
default credentials, `STORAGE_EMULATOR_HOST`) and are never printed.

Storage failures become one `BucketError` with a one-line message. Timeouts and retry
counts are bounded, so an unreachable endpoint or denied credentials fail within
seconds instead of after the clients' minute-long default backoff.
"""

import base64
import binascii
import contextlib
import dataclasses
import errno
import functools
import hashlib
import os
import re
import tempfile
import time
import urllib.parse
from typing import Callable, Iterable, Iterator

import fsspec
from fsspec import asyn

from imagesets.storage import atomic_files

CONNECT_TIMEOUT = 3   # seconds to open a connection
READ_TIMEOUT = 60     # seconds without a byte on an open connection
ATTEMPTS = 3          # tries per request (first try included)
CHECK_DEADLINE = 12   # seconds for the first request (`Bucket.check`)
CHUNK = 8 << 20
# Part size of S3 multipart uploads (files of twice this size or more). We set it, rather
# than take s3fs's default, so the multipart ETag can be computed locally to verify.
S3_PART_SIZE = 64 << 20

REMOTE_SCHEMES = ("s3", "gs")
# Environment variables whose values must never appear in a message.
_SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
               "GOOGLE_OAUTH_ACCESS_TOKEN")


_CONFLICT_RETRIES = 5  # S3 409 ConditionalRequestConflict: competing conditional writes


class BucketError(RuntimeError):
  """A storage operation failed; the message is one line meant for the user."""


class URLError(BucketError, ValueError):
  """A URL that names no bucket or folder we can use (a command line's usage error)."""


class MissingBucketError(BucketError, FileNotFoundError):
  """The bucket itself does not exist (a command line's "not there")."""


class NotAnObjectError(BucketError):
  """An object that none of ours could be: in a folder bucket, not a regular file (a
  symlink, a device, a FIFO), or larger than any of its kind (`read_bytes`' max_bytes):
  refused unread (never followed), and no retry changes that."""


class LocalWriteError(OSError):
  """Writing a download to the local disk failed (e.g. ENOSPC): not a storage fault, so
  it is neither retried nor reported as the bucket's."""


@dataclasses.dataclass(frozen=True)
class ObjectInfo:
  size: int
  md5: bytes | None  # MD5 of the whole object as reported by the store, if it reports one
  multipart_etag: str | None = None  # S3 multipart ETag "<md5 of part md5s>-<parts>"


ProgressFn = Callable[[int], None]  # called with the number of bytes just moved


def split_url(url: str) -> tuple[str, str]:
  """('s3', 'bucket/prefix') for s3://bucket/prefix; ('file', '/abs/path') for paths."""
  parsed = urllib.parse.urlsplit(url)
  if parsed.scheme in ("gcs",):
    return "gs", (parsed.netloc + parsed.path).rstrip("/")
  if parsed.scheme in REMOTE_SCHEMES:
    if not parsed.netloc:
      raise URLError(f"{url}: no bucket name (expected {parsed.scheme}://BUCKET/PREFIX)")
    return parsed.scheme, (parsed.netloc + parsed.path).rstrip("/")
  if parsed.scheme in ("", "file"):
    path = parsed.path if parsed.scheme == "file" else url
    return "file", _folder(os.path.expanduser(path))
  raise URLError(f"{url}: unsupported scheme {parsed.scheme!r} (use s3://, gs:// or a path)")


def _folder(path: str) -> str:
  """`path` absolute, without "." or "..": listings give such paths, which must start with
  the root. The part up to its last ".." is resolved as the kernel resolves it (a ".."
  after a symlink is the link target's parent), the rest is kept as written."""
  parts = path.split(os.sep)
  if ".." not in parts:
    return os.path.abspath(path)
  last = len(parts) - 1 - parts[::-1].index("..")
  return os.path.abspath(os.path.join(os.path.realpath(os.sep.join(parts[:last + 1]) or os.sep),
                                      *parts[last + 1:]))


def _redact(text: str) -> str:
  for name in _SECRET_ENV:
    value = os.environ.get(name)
    if value and len(value) >= 4:
      text = text.replace(value, "***")
  return text


def _one_line(exc: BaseException) -> str:
  text = str(exc).strip() or type(exc).__name__
  return _redact(" ".join(text.split()))[:300]


def _is_unreachable(exc: BaseException) -> bool:
  names = {cls.__name__ for cls in type(exc).__mro__}
  return bool(names & {
      "EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError",
      "ClientConnectorError", "ServerTimeoutError", "ConnectionError",
      "FSTimeoutError", "TimeoutError", "ProxyConnectionError",
      "ServerDisconnectedError",  # aiohttp (gcsfs): the server closed a kept-alive connection
  }) or getattr(exc, "errno", None) in (errno.ECONNREFUSED, errno.EHOSTUNREACH,
                                        errno.ENETUNREACH, errno.ETIMEDOUT,
                                        errno.ECONNRESET, errno.ECONNABORTED)


def _is_denied(exc: BaseException) -> bool:
  if isinstance(exc, PermissionError):
    return True
  text = str(exc)
  # gcsfs raises OSError("Forbidden: ...") for 403 and HttpError(code=401) for bad tokens;
  # google-auth raises RefreshError when a credential cannot be refreshed.
  return (text.startswith("Forbidden") or getattr(exc, "code", None) in (401, 403)
          or type(exc).__name__ in ("RefreshError", "DefaultCredentialsError"))


@functools.cache
def _gcs_class():
  """gcsfs with a bounded retry count.

  gcsfs retries every request 6 times with exponential backoff (~35 s), also on refused
  connections and failed credential refreshes; its count is fixed when the class is
  defined, so we re-wrap the undecorated request method with our count. (Should a gcsfs
  release drop `__wrapped__`, its own count stays and `Bucket.check`'s deadline still
  bounds the first request.)
  """
  from gcsfs import core as gcs_core
  from gcsfs import retry as gcs_retry

  undecorated = getattr(gcs_core.GCSFileSystem._request, "__wrapped__", None)
  if undecorated is None:
    return gcs_core.GCSFileSystem

  class BoundedGCSFileSystem(gcs_core.GCSFileSystem):
    # The protocol attribute stays ("gs", "gcs"), so FSSPEC_GCS_* settings still apply.
    retries = ATTEMPTS
    _request = gcs_retry.retry_request(retries=ATTEMPTS)(undecorated)
  return BoundedGCSFileSystem


def _filesystem(scheme: str) -> fsspec.AbstractFileSystem:
  # skip_instance_cache: credentials are read when the client is made; a cached client
  # would keep old ones (and tests change them between calls). No listings cache: objects
  # are checked right after they are written, and others may write meanwhile.
  common = {"skip_instance_cache": True, "use_listings_cache": False}
  if scheme == "s3":
    import s3fs
    fs = s3fs.S3FileSystem(**common, config_kwargs={
        "connect_timeout": CONNECT_TIMEOUT, "read_timeout": READ_TIMEOUT,
        "retries": {"max_attempts": ATTEMPTS, "mode": "standard"}})
    fs.retries = ATTEMPTS  # s3fs's own retry loop around botocore's
    return fs
  if scheme == "gs":
    import aiohttp
    return _gcs_class()(**common, requests_timeout=aiohttp.ClientTimeout(
        total=None, sock_connect=CONNECT_TIMEOUT, sock_read=READ_TIMEOUT))
  return fsspec.filesystem("file")


class Bucket:
  """A folder in a bucket (or on disk) addressed by paths relative to its URL."""

  def __init__(self, url: str):
    self.scheme, self.root = split_url(url)
    self.url = url.rstrip("/") if self.scheme != "file" else self.root
    self._fs = None

  @property
  def is_local(self) -> bool:
    return self.scheme == "file"

  @property
  def fs(self) -> fsspec.AbstractFileSystem:
    if self._fs is None:
      with self._translated("connect to"):
        self._fs = _filesystem(self.scheme)
    return self._fs

  def _path(self, rel: str = "") -> str:
    return f"{self.root}/{rel}" if rel else self.root

  def url_of(self, rel: str) -> str:
    return f"{self.url}/{rel}" if rel else self.url

  def endpoint_id(self) -> str:
    """Which server this bucket is on, as a folder name: "" for the cloud's own endpoint,
    else e.g. "127.0.0.1_8333" (one bucket name on two servers is two buckets)."""
    if self.scheme == "s3":
      custom = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    elif self.scheme == "gs":
      custom = os.environ.get("STORAGE_EMULATOR_HOST")
    else:
      custom = None
    if not custom:
      return ""
    return re.sub(r"[^A-Za-z0-9.-]+", "_", custom.split("://", 1)[-1]).strip("_.")

  def _endpoint(self) -> str:
    if self.scheme == "s3":
      return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get(
          "AWS_ENDPOINT_URL") or "the AWS S3 endpoint"
    if self.scheme == "gs":
      return os.environ.get("STORAGE_EMULATOR_HOST") or "the Google Cloud Storage endpoint"
    return "the local file system"

  def _credentials_hint(self) -> str:
    if self.scheme == "s3":
      return ("check the AWS credentials (AWS_PROFILE or AWS_ACCESS_KEY_ID/"
              "AWS_SECRET_ACCESS_KEY, ~/.aws/credentials) and the bucket policy")
    if self.scheme == "gs":
      return ("check the Google credentials (gcloud auth application-default login or "
              "GOOGLE_APPLICATION_CREDENTIALS) and the bucket's IAM roles")
    return "check the folder's permissions"

  @contextlib.contextmanager
  def _translated(self, action: str, rel: str = ""):
    """Turns client exceptions into one-line BucketErrors; FileNotFoundError passes."""
    where = self.url_of(rel)
    try:
      yield
    except (BucketError, FileNotFoundError, LocalWriteError, KeyboardInterrupt):
      raise
    except Exception as exc:  # noqa: BLE001 - every client error gets the same treatment
      if _is_denied(exc):
        raise BucketError(f"access denied: cannot {action} {where} ({_one_line(exc)}); "
                          f"{self._credentials_hint()}") from None
      if _is_unreachable(exc):
        raise BucketError(f"cannot reach {self._endpoint()} to {action} {where} "
                          f"({type(exc).__name__}: {_one_line(exc)}); check the network "
                          "and the endpoint") from None
      raise BucketError(f"cannot {action} {where}: {type(exc).__name__}: "
                        f"{_one_line(exc)}") from None

  def check(self) -> None:
    """Fails fast with a clear message if the bucket is unreachable, missing or denied."""
    if self.is_local:
      if os.path.exists(self.root) and not os.path.isdir(self.root):
        raise URLError(f"{self.url} is a file, not a folder")
      return
    bucket_name = self.root.split("/", 1)[0]
    with self._translated("list"):
      try:
        # One listing call under an overall deadline, whatever the clients' retries do.
        asyn.sync(self.fs.loop, self.fs._ls, self.root, timeout=CHECK_DEADLINE)
      except FileNotFoundError:
        # A missing prefix is fine (nothing published yet); a missing bucket is not.
        try:
          asyn.sync(self.fs.loop, self.fs._ls, bucket_name, timeout=CHECK_DEADLINE)
        except FileNotFoundError:
          raise MissingBucketError(f"bucket {bucket_name!r} does not exist at "
                                   f"{self._endpoint()} ({self.url}); create it first") from None
      except asyn.FSTimeoutError:
        raise BucketError(f"cannot reach {self._endpoint()} to list {self.url}: no answer "
                          f"within {CHECK_DEADLINE} s; check the network and the "
                          "endpoint") from None

  def list_files(self, rel: str = "") -> dict[str, int]:
    """{path relative to the bucket URL: size} of every object under `rel`."""
    base = self._path(rel).rstrip("/")
    with self._translated("list", rel):
      try:
        found = self.fs.find(base, detail=True)
      except FileNotFoundError:
        return {}
    prefix = self.root.rstrip("/") + "/"
    out = {}
    for path, info in found.items():
      path = path.rstrip("/")
      if self.is_local:
        path = os.path.abspath(path)
      if info.get("type") == "directory" or not path.startswith(prefix):
        continue
      out[path[len(prefix):]] = int(info.get("size") or 0)
    return out

  def exists(self, rel: str) -> bool:
    with self._translated("look up", rel):
      return self.fs.exists(self._path(rel))

  def read_bytes(self, rel: str, max_bytes: int | None = None) -> bytes:
    """The object's bytes; FileNotFoundError if it does not exist. `max_bytes`: more than
    any object of its kind holds: a larger one is NotAnObjectError, read no further (and
    in a folder, anything but a regular file: `_open_object`)."""
    with self._translated("read", rel):
      if max_bytes is None:
        return self.fs.cat_file(self._path(rel))
      data = self._read_at_most(rel, max_bytes + 1)
    if len(data) > max_bytes:
      raise NotAnObjectError(
          f"{self.url_of(rel)} holds more than {max_bytes} bytes, more than any object of "
          "its kind: refused, read no further; it is damaged or forged, tell the publisher")
    return data

  def _read_at_most(self, rel: str, limit: int) -> bytes:
    if self.is_local:
      with self._open_object(rel, None) as source:
        return b"".join(_chunks(source, limit))
    try:  # (one ranged request: a whole small object, a larger one's start)
      return self.fs.cat_file(self._path(rel), start=0, end=limit)
    except Exception as error:  # pylint: disable=broad-except  (each client its own type)
      # HTTP 416: a range from byte 0 is not satisfiable only in an empty object
      if getattr(error, "code", None) == 416 or "range is not satisfiable" in str(error):
        return b""
      raise

  def write_bytes(self, rel: str, data: bytes) -> None:
    with tempfile.NamedTemporaryFile() as tmp:
      tmp.write(data)
      tmp.flush()
      self.upload(tmp.name, rel)

  def create(self, rel: str, data: bytes) -> bool:
    """Writes `data` at `rel` only if no object is there (the stores' conditional write:
    S3 `If-None-Match: *`, GCS `ifGenerationMatch=0`, a folder's `link`, which fails on an
    existing name): True when this call created it, False when one was there already. Of
    two callers at once, exactly one gets True (on a store that honours the condition;
    the object is read back, and a publisher checks its claim again before committing)."""
    with self._translated("create", rel):
      if self.is_local:
        created = atomic_files.write(self._path(rel), data, exclusive=True, sync=True)
      else:
        created = self._create_remote(rel, data)
    return created and self.read_bytes(rel) == data

  def _create_remote(self, rel: str, data: bytes) -> bool:
    for attempt in range(_CONFLICT_RETRIES):
      try:
        self.fs.pipe_file(self._path(rel), data, mode="create")
        return True
      except (FileExistsError, OSError) as error:
        self.fs.invalidate_cache(self._path(rel))
        if self.fs.exists(self._path(rel)):
          return False
        # S3 answers 409 ConditionalRequestConflict while a competing conditional write of
        # the name is in flight: ask again, the name then exists or is free
        if "ConditionalRequestConflict" not in str(error) or attempt == _CONFLICT_RETRIES - 1:
          raise  # (not the condition: a real failure)
        time.sleep(0.2 * (attempt + 1))
    return False

  def info(self, rel: str) -> ObjectInfo:
    with self._translated("look up", rel):
      info = self.fs.info(self._path(rel))
    etag = str(info.get("ETag") or "").strip('"')
    return ObjectInfo(size=int(info.get("size") or 0), md5=_whole_object_md5(info),
                      multipart_etag=etag if re.fullmatch(r"[0-9a-f]{32}-\d+", etag) else None)

  def sha256(self, rel: str) -> str:
    """SHA-256 of an object's bytes as read back from the store, as readers read them (in
    a folder, a regular file only: NotAnObjectError for a link, FIFO or device)."""
    sha = hashlib.sha256()
    with self._translated("read", rel):
      with self._open_object(rel, None) as f:
        for chunk in _chunks(f, None):
          sha.update(chunk)
    return sha.hexdigest()

  def upload(self, local_path: str, rel: str, progress: ProgressFn | None = None) -> None:
    """Copies a local file to `rel`; a local destination appears whole or not at all."""
    callback = _Callback(progress)
    with self._translated("upload to", rel):
      if self.is_local:
        atomic_files.copy(local_path, self._path(rel), progress=callback.relative_update)
      else:
        extra = {"chunksize": S3_PART_SIZE} if self.scheme == "s3" else {}
        self.fs.put_file(local_path, self._path(rel), callback=callback, **extra)

  def download(self, rel: str, local_path: str, progress: ProgressFn | None = None) -> None:
    """Copies the object to `local_path`, whole or not at all (in a folder, a regular file
    only, as `copy_to` reads it)."""
    if self.is_local:
      with self._translated("download", rel), self._open_object(rel, None) as source:
        atomic_files.write(local_path, _counted(_chunks(source, None), progress))
      return
    with self._translated("download", rel):
      self.fs.get_file(self._path(rel), local_path, callback=_Callback(progress))

  def copy(self, src_rel: str, dst_rel: str) -> None:
    """Copies the object at `src_rel` to `dst_rel` inside the store, no byte through this
    machine: S3 CopyObject, a GCS rewrite, a folder's hard link (the two names then share
    their bytes: fine for published objects, which are replaced, never written in place).
    The destination appears whole or not at all; FileNotFoundError if the source is gone."""
    with self._translated(f"copy {self.url_of(src_rel)} to", dst_rel):
      if self.is_local:
        # (a regular file only, as readers take one, and a copy, where the folder refuses
        # hard links, reads the file opened so: a FIFO named later is never waited on)
        with self._open_object(src_rel, None) as source:
          atomic_files.link(self._path(src_rel), self._path(dst_rel), opened=source)
      else:
        # (cp_file: the one-object copy fsspec's `copy` ends in, without its path
        # expansion and directory probes)
        self.fs.cp_file(self._path(src_rel), self._path(dst_rel))

  def copy_to(self, rel: str, out, progress: ProgressFn | None = None,
              size: int | None = None) -> None:
    """Writes the object's bytes into the open binary file `out`, chunk by chunk
    (FileNotFoundError if it does not exist; a failed local write is a LocalWriteError).
    `size`: the bytes expected (from a manifest): read that many without asking the store
    first, and never more than one byte past them (an object larger than its manifest
    says, however large, costs that); the caller checks what arrived."""
    with self._translated("download", rel):
      with self._open_object(rel, size) as source:
        for chunk in _counted(_chunks(source, None if size is None else size + 1), progress):
          try:
            out.write(chunk)
          except OSError as error:
            raise LocalWriteError(error.errno, error.strerror) from None

  def _open_object(self, rel: str, size: int | None):
    """The object at `rel` opened for reading; in a folder, a regular file only (never a
    symlink followed, e.g. to /dev/zero): NotAnObjectError for anything else."""
    if not self.is_local:
      extra = {"size": size} if size is not None else {}
      return self.fs.open(self._path(rel), "rb", block_size=CHUNK, **extra)
    try:
      return atomic_files.open_regular(self._path(rel))
    except (OSError, atomic_files.NotAFileOfOurs) as error:
      if isinstance(error, OSError) and error.errno != errno.ELOOP:
        raise
    raise NotAnObjectError(
        f"{self.url_of(rel)} is not a regular file (a symlink, a device or a FIFO): refused, "
        "neither followed nor read; the published copy is damaged or forged, tell the "
        "publisher")

  def delete(self, rels: list[str]) -> None:
    if not rels:
      return
    with self._translated("delete from", rels[0]):
      self.fs.rm([self._path(rel) for rel in rels])


def _counted(chunks: Iterable[bytes], progress: ProgressFn | None) -> Iterator[bytes]:
  """`chunks`, with `progress(n)` told each one's size once its consumer is done with it."""
  for chunk in chunks:
    yield chunk
    if progress:
      progress(len(chunk))


def _chunks(source, limit: int | None):
  """The bytes of the open file `source` in chunks, `limit` bytes at most in all (None:
  to its end)."""
  while limit is None or limit > 0:
    chunk = source.read(CHUNK if limit is None else min(CHUNK, limit))
    if not chunk:
      return
    if limit is not None:
      limit -= len(chunk)
    yield chunk


def _whole_object_md5(info: dict) -> bytes | None:
  """The MD5 a store reports for a whole object, or None when it reports none.

  GCS gives base64 `md5Hash` (absent for composite objects). An S3 ETag is the hex MD5
  only for single-part uploads; multipart ETags end in `-N`.
  """
  if info.get("md5Hash"):
    try:
      return base64.b64decode(info["md5Hash"])
    except (binascii.Error, ValueError):
      return None
  etag = str(info.get("ETag") or info.get("etag") or "").strip('"')
  if re.fullmatch(r"[0-9a-fA-F]{32}", etag):
    return bytes.fromhex(etag)
  return None


class _Callback(fsspec.callbacks.Callback):
  """Forwards fsspec's byte counts to a plain function, as increments.

  Clients report either increments (relative_update) or totals (absolute_update, e.g.
  gcsfs for single-request uploads); both end in `call`.
  """

  def __init__(self, progress: ProgressFn | None):
    super().__init__()
    self._progress = progress
    self._reported = 0

  def call(self, *args, **kwargs):
    delta = (self.value or 0) - self._reported
    if delta > 0 and self._progress:
      self._progress(delta)
    self._reported += max(delta, 0)


def file_digests(path: str | os.PathLike) -> tuple[str, bytes]:
  """(sha256 hex, md5 bytes) of a local file, in one pass."""
  sha, md5 = hashlib.sha256(), hashlib.md5()
  with open(path, "rb") as f:
    while chunk := f.read(CHUNK):
      sha.update(chunk)
      md5.update(chunk)
  return sha.hexdigest(), md5.digest()


def s3_multipart_etag(path: str | os.PathLike, part_size: int | None = None) -> str:
  """The ETag S3 gives a multipart upload of a local file cut in `part_size` parts."""
  part_size = part_size or S3_PART_SIZE
  digests = []
  with open(path, "rb") as f:
    while part := f.read(part_size):
      digests.append(hashlib.md5(part).digest())
  return f"{hashlib.md5(b''.join(digests)).hexdigest()}-{len(digests)}"


__all__ = ["Bucket", "BucketError", "LocalWriteError", "NotAnObjectError", "ObjectInfo",
           "file_digests", "s3_multipart_etag", "split_url"]
