"""Two builds published under one version number at once: exactly one wins, the other is
refused in one line, and the bucket never holds objects of both (issue 40, item 5).

The interleavings are made by running the second publisher at a chosen point of the first
(no sleeps), and two `imagesets publish` processes are started together as well."""

import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from conftest import BIN
from hang_guard import returns_within
from publish_helpers import FOLDER, TINY
from imagesets.storage import bucket as bucket_lib
from imagesets.publishing import publish
from imagesets.storage import versions

OTHER_CONTENT = r"is being published to .* by another build with other content"


def _quiet(data_dir, url):
  return publish.publish(TINY, data_dir, url, progress=False)


@pytest.fixture
def other_build(tiny_data_dir, tmp_path) -> pathlib.Path:
  """The same version number, other content (its card differs: a build of another tree)."""
  other = tmp_path / "other"
  shutil.copytree(tiny_data_dir, other)
  card = other / FOLDER / "README.md"
  card.write_text(card.read_text() + "\nbuilt from another tree\n")
  return other


def _objects(url: str) -> dict[str, str]:
  store = bucket_lib.Bucket(url)
  return {rel.rsplit("/", 1)[1]: hashlib.sha256(store.read_bytes(rel)).hexdigest()
          for rel in store.list_files(FOLDER)}


def _files_of(data_dir: pathlib.Path) -> dict[str, str]:
  return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
          for p in (data_dir / FOLDER).iterdir() if p.is_file()}


def _only_objects_of(url: str, data_dir: pathlib.Path) -> None:
  """Every object of the version is the build's file of that name, and the manifest and the
  claim name the build's content."""
  objects, files = _objects(url), _files_of(data_dir)
  ours = {versions.MANIFEST, versions.CLAIM}
  assert {name: digest for name, digest in objects.items() if name not in ours} == files
  store, ref = bucket_lib.Bucket(url), versions.Ref.parse(TINY)
  local = publish.manifest_lib.describe_local(ref, data_dir / FOLDER)
  if versions.MANIFEST in objects:
    published = publish.manifest_lib.Manifest.from_bytes(
        store.read_bytes(f"{FOLDER}/{versions.MANIFEST}"), url)
    assert published.content() == local.content()
  claim = json.loads(store.read_bytes(f"{FOLDER}/{versions.CLAIM}"))
  assert claim["content"] == publish._content_digest(local)  # pylint: disable=protected-access


@pytest.mark.parametrize("bucket_url", ["s3", "gs", "file"], indirect=True)
def test_create_is_exclusive(bucket_url):
  store = bucket_lib.Bucket(bucket_url)
  assert store.create("x/claim", b"first")
  assert not store.create("x/claim", b"second")
  assert store.read_bytes("x/claim") == b"first"


@pytest.mark.parametrize("bucket_url", ["s3", "file"], indirect=True)
def test_a_second_build_started_during_the_upload_is_refused_and_uploads_nothing(
    bucket_url, tiny_data_dir, other_build, monkeypatch):
  upload = bucket_lib.Bucket.upload
  refused, uploads_by_second = [], []

  def first_upload_runs_the_second_publisher(self, local_path, rel, progress=None):
    if not refused:  # the first build holds the claim and has uploaded nothing yet
      monkeypatch.setattr(bucket_lib.Bucket, "upload",
                          lambda *args, **kwargs: uploads_by_second.append(args[2]))
      with pytest.raises(versions.PublishError, match=OTHER_CONTENT) as error:
        _quiet(other_build, bucket_url)
      refused.append(str(error.value))
      monkeypatch.setattr(bucket_lib.Bucket, "upload", first_upload_runs_the_second_publisher)
    return upload(self, local_path, rel, progress)

  monkeypatch.setattr(bucket_lib.Bucket, "upload", first_upload_runs_the_second_publisher)
  assert _quiet(tiny_data_dir, bucket_url).status == "published"
  assert refused and "\n" not in refused[0] and uploads_by_second == []
  _only_objects_of(bucket_url, tiny_data_dir)


@pytest.mark.parametrize("bucket_url", ["s3", "file"], indirect=True)
def test_a_build_that_loses_the_claim_uploads_nothing(bucket_url, tiny_data_dir, other_build,
                                                      monkeypatch):
  """Both passed the "not published yet" check; the other build claims and commits first."""
  create = bucket_lib.Bucket.create
  uploads_after = []

  def other_publishes_first(self, rel, data):
    monkeypatch.setattr(bucket_lib.Bucket, "create", create)
    assert _quiet(other_build, bucket_url).status == "published"
    monkeypatch.setattr(bucket_lib.Bucket, "upload",
                        lambda *args, **kwargs: uploads_after.append(args[2]))
    return create(self, rel, data)

  monkeypatch.setattr(bucket_lib.Bucket, "create", other_publishes_first)
  with pytest.raises(versions.PublishError, match="already published .* with different content"):
    _quiet(tiny_data_dir, bucket_url)
  assert uploads_after == []
  _only_objects_of(bucket_url, other_build)


@pytest.mark.parametrize("bucket_url", ["s3", "file"], indirect=True)
def test_the_same_build_resumes_its_own_claim(bucket_url, tiny_data_dir):
  store = bucket_lib.Bucket(bucket_url)
  local = publish.manifest_lib.describe_local(versions.Ref.parse(TINY), tiny_data_dir / FOLDER)
  publish._claim(store, versions.Ref.parse(TINY), local)  # (a run killed after its claim)
  assert _quiet(tiny_data_dir, bucket_url).status == "published"
  _only_objects_of(bucket_url, tiny_data_dir)


@pytest.mark.parametrize("bucket_url", ["s3", "file"], indirect=True)
def test_two_publishers_started_together_one_wins(bucket_url, tiny_data_dir, other_build):
  runs = [subprocess.Popen([str(BIN / "imagesets"), "publish", TINY, "--data-dir",
                            str(data_dir), "--to", bucket_url, "--quiet"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
          for data_dir in (tiny_data_dir, other_build)]
  results = [(run.wait(timeout=300), *run.communicate()) for run in runs]
  codes = [code for code, _, _ in results]
  assert sorted(codes) == [0, 4], results  # (4: refused)
  winner = (tiny_data_dir, other_build)[codes.index(0)]
  loser_error = results[codes.index(4)][2].strip().splitlines()[-1]
  assert loser_error.startswith("imagesets: error: ") and (
      "by another build with other content" in loser_error
      or "already published" in loser_error), loser_error
  _only_objects_of(bucket_url, winner)
  assert subprocess.run([str(BIN / "imagesets"), "publish", TINY, "--data-dir", str(winner),
                         "--to", bucket_url, "--quiet"], capture_output=True).returncode == 0


@pytest.mark.parametrize("bucket_url", ["s3", "file"], indirect=True)
def test_a_claim_lost_while_uploading_stops_before_the_commit(bucket_url, tiny_data_dir,
                                                             monkeypatch):
  """A claim replaced while this publish uploads (deleted by hand and taken by another build,
  or a store that ignores the condition): checked again before the manifest, refused."""
  store = bucket_lib.Bucket(bucket_url)
  upload = bucket_lib.Bucket.upload
  claim = f"{FOLDER}/{versions.CLAIM}"

  def replaced_on_first_upload(self, local_path, rel, progress=None):
    monkeypatch.setattr(bucket_lib.Bucket, "upload", upload)
    store.write_bytes(claim, b'{"content": "another build", "at": "now", "by": "them"}')
    return upload(self, local_path, rel, progress)

  monkeypatch.setattr(bucket_lib.Bucket, "upload", replaced_on_first_upload)
  with pytest.raises(versions.PublishError, match=OTHER_CONTENT + r" \(claimed now by them\)"):
    _quiet(tiny_data_dir, bucket_url)
  assert not store.exists(f"{FOLDER}/{versions.MARKER}")
  assert not store.exists(f"{FOLDER}/{versions.MANIFEST}")


def test_a_folder_without_hard_links_still_creates_exclusively(tmp_path, monkeypatch):
  def no_links(*args):
    raise PermissionError(1, "Operation not permitted")  # (vfat, SMB, FUSE mounts)
  monkeypatch.setattr(bucket_lib.os, "link", no_links)
  store = bucket_lib.Bucket(str(tmp_path / "bucket"))
  assert store.create("v/claim", b"first") and not store.create("v/claim", b"second")
  assert store.read_bytes("v/claim") == b"first"
  assert sorted(p.name for p in (tmp_path / "bucket" / "v").iterdir()) == ["claim"]


@pytest.mark.parametrize("claim", [
    b'{"content": "x", "at": "\\u001b[31mnow", "by": "them\\nimagesets: ok"}',
    b"[" * 100_000 + b"]" * 100_000,  # (deeper than json's recursion limit)
    b'{"content": "x", "by": "' + b"y" * 10_000 + b'"}'])
def test_a_hostile_claim_is_refused_in_one_printable_line(claim, tiny_data_dir, tmp_path):
  url = str(tmp_path / "bucket")
  bucket_lib.Bucket(url).write_bytes(f"{FOLDER}/{versions.CLAIM}", claim)
  with pytest.raises(versions.PublishError, match=OTHER_CONTENT) as error:
    _quiet(tiny_data_dir, url)
  message = str(error.value)
  assert message.isprintable() and len(message) < 600


@pytest.mark.parametrize("plant", [lambda path: os.mkfifo(path),
                                   lambda path: path.symlink_to("/dev/zero")],
                         ids=["fifo", "link to /dev/zero"])
def test_a_claim_that_is_no_regular_file_is_refused_unread(plant, tiny_data_dir, tmp_path):
  """A claim that sizes 0 and never ends (a FIFO waited on for ever, /dev/zero read until
  memory ran out) is none of ours: refused in one line, read no further than a claim."""
  url = str(tmp_path / "bucket")
  claim = tmp_path / "bucket" / FOLDER / versions.CLAIM
  claim.parent.mkdir(parents=True)
  plant(claim)
  with pytest.raises(versions.PublishError, match=OTHER_CONTENT) as error:
    returns_within(120, _quiet, tiny_data_dir, url, what="publish reading a planted claim")
  assert "\n" not in str(error.value)
