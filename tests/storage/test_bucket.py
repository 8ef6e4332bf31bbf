"""bucket: one storage interface over a real S3 server, a GCS server and local paths."""

import collections
import errno
import hashlib
import os
import pathlib
import socket
import threading
import time

import aiohttp
import pytest

import bucket_servers as servers
from hang_guard import returns_within
from publish_helpers import small_version
from imagesets.publishing import listing
from imagesets.publishing import publish
from imagesets.storage import bucket as bucket_lib
from imagesets.storage import transfer
from imagesets.storage import versions


def test_objects_round_trip_in_every_kind_of_bucket(bucket_url, tmp_path):
  store = bucket_lib.Bucket(bucket_url)
  store.check()
  assert store.list_files() == {}
  data = os.urandom(3 << 20)
  source = tmp_path / "blob"
  source.write_bytes(data)
  moved = []
  store.upload(str(source), "a/blob", progress=moved.append)
  store.write_bytes("a/b/empty", b"")
  assert sum(moved) == len(data)  # the progress bar sees every byte
  assert store.list_files() == {"a/blob": len(data), "a/b/empty": 0}
  assert store.list_files("a/b") == {"a/b/empty": 0}
  info = store.info("a/blob")
  assert info.size == len(data)
  if store.scheme != "file":  # both servers report the MD5 they computed on receipt
    assert info.md5 == hashlib.md5(data).digest()
  assert store.sha256("a/blob") == hashlib.sha256(data).hexdigest()
  assert store.read_bytes("a/b/empty") == b"" == store.read_bytes("a/b/empty", max_bytes=9)
  assert store.read_bytes("a/blob", max_bytes=len(data)) == data
  with pytest.raises(bucket_lib.NotAnObjectError, match=f"holds more than {len(data) - 1} "):
    store.read_bytes("a/blob", max_bytes=len(data) - 1)
  back = tmp_path / "back"
  store.download("a/blob", str(back))
  assert back.read_bytes() == data
  with pytest.raises(FileNotFoundError):
    store.read_bytes("a/missing")
  assert not store.exists("a/missing") and store.exists("a/blob")
  store.delete(["a/blob"])
  assert store.list_files() == {"a/b/empty": 0}


def test_copy_makes_a_whole_object_inside_the_bucket(bucket_url):
  store = bucket_lib.Bucket(bucket_url)
  data = os.urandom(1 << 20)
  store.write_bytes("a/blob", data)
  store.write_bytes("b/blob", b"an older object of that name")
  store.copy("a/blob", "b/blob")  # (replaces the destination, as an upload would)
  store.copy("a/blob", "c/new")
  assert store.read_bytes("b/blob") == store.read_bytes("c/new") == store.read_bytes("a/blob")
  assert store.sha256("c/new") == hashlib.sha256(data).hexdigest()
  if store.scheme != "file":  # a new object whose checksum the store computed (verifiable)
    assert store.info("c/new").md5 == hashlib.md5(data).digest()
  else:  # the same bytes under a second name, no temporary left beside it
    root = pathlib.Path(store.root)
    assert os.path.samefile(root / "a/blob", root / "c/new")
  with pytest.raises(FileNotFoundError):
    store.copy("a/missing", "d/blob")
  assert store.list_files() == {"a/blob": len(data), "b/blob": len(data), "c/new": len(data)}


@pytest.mark.parametrize("failure", [errno.EXDEV, errno.EPERM, errno.EMLINK],
                         ids=["EXDEV", "EPERM", "EMLINK"])
def test_a_folder_that_cannot_hard_link_copies_through_a_temporary(failure, tmp_path,
                                                                   monkeypatch):
  # (another device; no hard links, or a teammate's file under protected_hardlinks; the
  # file's link limit)
  def no_link(*args):
    raise OSError(failure, os.strerror(failure))
  monkeypatch.setattr(bucket_lib.os, "link", no_link)
  store = bucket_lib.Bucket(str(tmp_path / "bucket"))
  store.write_bytes("a/blob", b"shard bytes")
  store.copy("a/blob", "b/blob")
  assert store.read_bytes("b/blob") == b"shard bytes"
  assert not os.path.samefile(tmp_path / "bucket/a/blob", tmp_path / "bucket/b/blob")
  assert os.listdir(tmp_path / "bucket/b") == ["blob"]


def test_a_failed_folder_copy_leaves_no_file_and_says_so_in_one_line(tmp_path, monkeypatch):
  store = bucket_lib.Bucket(str(tmp_path / "bucket"))
  store.write_bytes("a/blob", b"shard bytes")

  def rename_fails(*args):
    raise OSError(errno.EIO, "Input/output error")
  monkeypatch.setattr(bucket_lib.os, "replace", rename_fails)
  with pytest.raises(bucket_lib.BucketError, match=f"^cannot copy {store.url}/a/blob to "
                     f"{store.url}/b/blob: OSError: .*Input/output error"):
    store.copy("a/blob", "b/blob")
  assert os.listdir(tmp_path / "bucket/b") == []  # neither the name nor a temporary


def test_a_folder_object_is_read_no_further_than_its_size_and_never_through_a_link(tmp_path):
  """An object 100 times the size its manifest gives costs one byte past that size a
  download (then refused in one line as damaged); a symlink in an object's place (to
  /dev/zero: endless) is refused unread, at once (no retry changes it)."""
  store, size = bucket_lib.Bucket(str(tmp_path / "bucket")), 1000
  store.write_bytes("v/shard", b"x" * (100 * size))
  (tmp_path / "bucket/v/endless").symlink_to("/dev/zero")
  written = []

  class Counted:  # a part file that counts what it is given (and stops an endless read)
    def write(self, chunk):
      written.append(len(chunk))
      assert sum(written) <= 1000 * size, "read on and on"
  store.copy_to("v/shard", Counted(), size=size)
  assert sum(written) == size + 1
  written.clear()
  with pytest.raises(bucket_lib.NotAnObjectError, match=f"^{store.url}/v/endless is not a "
                     "regular file .*tell the publisher$"):
    store.copy_to("v/endless", Counted(), size=size)
  assert written == []
  entry = {"size": size, "sha256": hashlib.sha256(b"x" * size).hexdigest()}
  stats, moved = collections.Counter(), []
  with pytest.raises(transfer.DamagedError, match="v/shard does not match its manifest"):
    transfer.checked_download(store, "v/shard", tmp_path / "cache/shard", entry,
                              retry_seconds=0, stats=stats, progress=moved.append)
  assert stats["downloads"] == 2 and sum(moved) == 2 * (size + 1)
  with pytest.raises(bucket_lib.NotAnObjectError):
    transfer.checked_download(store, "v/endless", tmp_path / "cache/endless", entry,
                              stats=stats)
  assert stats["retries"] == 0 and os.listdir(tmp_path / "cache") == []


def test_urls_and_paths():
  assert bucket_lib.split_url("s3://team/tfds/") == ("s3", "team/tfds")
  assert bucket_lib.split_url("gs://team") == ("gs", "team")
  assert bucket_lib.split_url("gcs://team/x") == ("gs", "team/x")
  assert bucket_lib.split_url("/data/tfds") == ("file", "/data/tfds")
  assert bucket_lib.split_url("file:///data/tfds") == ("file", "/data/tfds")
  with pytest.raises(bucket_lib.BucketError, match="unsupported scheme 'hdfs'"):
    bucket_lib.split_url("hdfs://x/y")
  with pytest.raises(bucket_lib.BucketError, match="no bucket name"):
    bucket_lib.split_url("s3:///x")


def test_a_folder_named_with_dots_is_the_folder_its_listings_find(tmp_path, monkeypatch):
  """A relative path with '..' (as a user types one): publishing a version again uploads
  nothing and leaves its manifest as it was (a published version never changes), and the
  listing shows it."""
  small_version(tmp_path / "data")
  (tmp_path / "work").mkdir()
  monkeypatch.chdir(tmp_path / "work")
  url = "../team/./bucket"
  assert bucket_lib.split_url(url) == ("file", str(tmp_path / "team" / "bucket"))
  publish.publish("ds/cfg:1.0.0", tmp_path / "data", url, progress=False)
  manifest = tmp_path / "team/bucket/ds/cfg/1.0.0" / versions.MANIFEST
  published = manifest.read_bytes()
  uploads, upload = [], bucket_lib.Bucket.upload

  def counted(self, local_path, rel, *args, **kwargs):
    uploads.append(rel)
    return upload(self, local_path, rel, *args, **kwargs)
  monkeypatch.setattr(bucket_lib.Bucket, "upload", counted)
  again = publish.publish("ds/cfg:1.0.0", tmp_path / "data", url, progress=False)
  assert again.status == "unchanged" and uploads == []
  assert manifest.read_bytes() == published
  (item,), unfinished = listing.list_published(url)
  assert str(item.ref) == "ds/cfg:1.0.0" and not unfinished


def test_a_dot_dot_after_a_link_is_the_link_targets_parent_as_the_kernel_finds_it(tmp_path):
  """'link/../bucket' is the bucket beside the link's target (what `ls` shows, and where
  a publish before folder paths were normalised wrote): not a folder beside the link."""
  small_version(tmp_path / "data")
  (tmp_path / "mnt" / "disk").mkdir(parents=True)
  (tmp_path / "x").mkdir()
  (tmp_path / "x" / "l").symlink_to(tmp_path / "mnt" / "disk")
  url = str(tmp_path / "x" / "l" / ".." / "bucket")
  assert bucket_lib.split_url(url) == ("file", str(tmp_path / "mnt" / "bucket"))
  assert bucket_lib.split_url(str(tmp_path / "x" / "l" / "b")) == (
      "file", str(tmp_path / "x" / "l" / "b"))   # (no "..": kept as written)
  publish.publish("ds/cfg:1.0.0", tmp_path / "data", url, progress=False)
  assert (tmp_path / "mnt/bucket/ds/cfg/1.0.0" / versions.MANIFEST).is_file()
  assert [str(item.ref) for item in listing.list_published(url)[0]] == ["ds/cfg:1.0.0"]


def test_store_checksums_are_used_only_for_whole_objects():
  md5 = hashlib.md5(b"x").digest()
  assert bucket_lib._whole_object_md5({"ETag": f'"{md5.hex()}"'}) == md5
  assert bucket_lib._whole_object_md5({"ETag": '"0123456789abcdef0123456789abcdef-3"'}) is None
  assert bucket_lib._whole_object_md5({"md5Hash": "XUFAKrxLKna5cZ2REBfFkg=="}) == \
      hashlib.md5(b"hello").digest()
  assert bucket_lib._whole_object_md5({"size": 1}) is None


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_missing_bucket_is_one_clear_error(scheme, bucket_servers):
  with pytest.raises(bucket_lib.BucketError, match="bucket 'no-such-bucket' does not exist"):
    bucket_lib.Bucket(f"{scheme}://no-such-bucket/tfds").check()


@pytest.mark.parametrize("variable, value", [
    ("AWS_SECRET_ACCESS_KEY", "wrong-secret-value-1234"),
    ("AWS_ACCESS_KEY_ID", "wrong-key-id-5678"),
])
def test_denied_credentials_fail_fast_without_printing_them(variable, value, bucket_servers):
  with servers.environment({variable: value}):
    start = time.monotonic()
    with pytest.raises(bucket_lib.BucketError) as caught:
      bucket_lib.Bucket(f"s3://{servers.BUCKET}/tfds").check()
    elapsed = time.monotonic() - start
  message = str(caught.value)
  assert message.startswith("access denied: cannot list s3://team-bucket/tfds"), message
  assert "AWS_PROFILE" in message and "\n" not in message
  for secret in (value, servers.S3_SECRET):
    assert secret not in message
  assert elapsed < 5, elapsed


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_unreachable_endpoint_fails_fast(scheme, bucket_servers):
  closed = f"http://127.0.0.1:{servers.free_port()}"
  with servers.environment({"AWS_ENDPOINT_URL": closed, "STORAGE_EMULATOR_HOST": closed}):
    start = time.monotonic()
    with pytest.raises(bucket_lib.BucketError, match=f"cannot reach {closed}"):
      bucket_lib.Bucket(f"{scheme}://team-bucket/tfds").check()
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_endpoint_that_never_answers_hits_the_deadline(scheme, bucket_servers, monkeypatch):
  # Accepts connections and never replies: no error from the network, only silence.
  listener = socket.socket()
  listener.bind(("127.0.0.1", 0))
  listener.listen(16)
  accepted = []
  threading.Thread(target=lambda: accepted.extend(
      listener.accept() for _ in range(64)), daemon=True).start()
  monkeypatch.setattr(bucket_lib, "CHECK_DEADLINE", 2)
  silent = f"http://127.0.0.1:{listener.getsockname()[1]}"
  try:
    with servers.environment({"AWS_ENDPOINT_URL": silent, "STORAGE_EMULATOR_HOST": silent}):
      start = time.monotonic()
      with pytest.raises(bucket_lib.BucketError, match="no answer within 2 s"):
        bucket_lib.Bucket(f"{scheme}://team-bucket/tfds").check()
      assert time.monotonic() - start < 5
  finally:
    listener.close()



def test_s3_multipart_etag_is_computed_locally(bucket_servers, tmp_path, monkeypatch):
  monkeypatch.setattr(bucket_lib, "S3_PART_SIZE", 5 << 20)  # S3's smallest part
  source = tmp_path / "big"
  source.write_bytes(os.urandom((11 << 20) + 123))  # three parts
  store = bucket_lib.Bucket(f"s3://{servers.BUCKET}/{tmp_path.name}")
  store.upload(str(source), "big")
  info = store.info("big")
  assert info.md5 is None and info.multipart_etag.endswith("-3")
  assert info.multipart_etag == bucket_lib.s3_multipart_etag(source)
  assert bucket_lib.s3_multipart_etag(source, 4 << 20) != info.multipart_etag




@pytest.mark.parametrize("error", [
    lambda: aiohttp.ClientOSError(errno.ECONNRESET, "Connection reset by peer"),
    lambda: aiohttp.ServerDisconnectedError(),
    lambda: ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
], ids=["ClientOSError", "ServerDisconnectedError", "ConnectionResetError"])
def test_a_connection_reset_by_the_server_says_it_cannot_be_reached(error, monkeypatch):
  # CI saw gcsfs end in ClientOSError ECONNRESET when the endpoint went down mid-run,
  # reported as a plain listing failure ("cannot list ...") instead of a network fault.
  with servers.environment(servers.STATIC_ENV):
    store = bucket_lib.Bucket("gs://team-bucket/tfds")

    def find(*args, **kwargs):
      raise error()

    monkeypatch.setattr(store.fs, "find", find)
    with pytest.raises(bucket_lib.BucketError, match="cannot reach .* to list gs://team-bucket"):
      store.list_files()


def test_a_folder_copy_reads_the_regular_file_it_checked(tmp_path, monkeypatch):
  """Where the folder refuses hard links a copy reads its source: the regular file it
  opened and checked, not the name again (a FIFO named meanwhile is never waited on); a
  source that is not a regular file is refused, unread."""
  store = bucket_lib.Bucket(str(tmp_path / "bucket"))
  store.write_bytes("v1/object", b"the bytes")
  source = tmp_path / "bucket/v1/object"

  def refused_after_a_swap(*args, **kwargs):
    source.unlink()
    os.mkfifo(source)
    raise PermissionError(errno.EPERM, "Operation not permitted")
  monkeypatch.setattr(os, "link", refused_after_a_swap)
  returns_within(120, store.copy, "v1/object", "v2/object", what="a copy, on a FIFO")
  assert store.read_bytes("v2/object") == b"the bytes"
  with pytest.raises(bucket_lib.NotAnObjectError, match="v1/object is not a regular file"):
    store.copy("v1/object", "v3/object")
  assert not store.exists("v3/object")


def test_a_folder_copy_links_only_the_file_it_checked(tmp_path, monkeypatch):
  """A hard link is made from the source's name: one made after another file took that
  name (a symlink to a file outside the bucket) is not kept; the file opened and checked
  is copied instead."""
  store = bucket_lib.Bucket(str(tmp_path / "bucket"))
  store.write_bytes("v1/object", b"the bytes")
  source, outside = tmp_path / "bucket/v1/object", tmp_path / "secret"
  outside.write_bytes(b"not for the bucket")
  real_link = os.link

  def swapped_then_linked(src, dst, *args, **kwargs):
    source.unlink()
    source.symlink_to(outside)
    return real_link(src, dst, *args, **kwargs)
  monkeypatch.setattr(os, "link", swapped_then_linked)
  store.copy("v1/object", "v2/object")
  copied = tmp_path / "bucket/v2/object"
  assert not copied.is_symlink() and copied.read_bytes() == b"the bytes"
  assert [p.name for p in copied.parent.iterdir()] == ["object"]  # (no temporary left)
