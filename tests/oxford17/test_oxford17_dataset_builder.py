"""oxford17: Oxford-17 built from a look-alike 17flowers.tgz and datasplits.mat
(the real layout, 1,360 images) whose hashes the tests register: from --manual_dir and
through TFDS's real download manager against a local server."""

import hashlib
import pathlib
import subprocess
import tarfile

import numpy as np
import pytest
import tensorflow_datasets as tfds

import imagesets  # noqa: F401
from conftest import REPO, shard_bytes, warm
from imagesets.building import archives
from imagesets.building import downloads
from imagesets.building import problems
from imagesets.checksums import DIRECTORY as CHECKSUMS
from imagesets.oxford17 import oxford17_dataset_builder as oxford17_builder
from imagesets.oxford17 import oxford17_source as oxford17
from imagesets_testing import fake_oxford17
from imagesets_testing import http_server

PROXIES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy")
SPLIT_SIZES = {f"{name}{n}": size for n in (1, 2, 3)
               for name, size in (("train", 680), ("validation", 340), ("test", 340))}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
  """A manual dir with the look-alike archive and split file."""
  manual = tmp_path_factory.mktemp("oxford17_manual")
  fake_oxford17.write_archive(manual / oxford17.ARCHIVE)
  fake_oxford17.write_splits(manual / oxford17.SPLITS_FILE)
  return manual


def _md5(path) -> str:
  return hashlib.md5(pathlib.Path(path).read_bytes()).hexdigest()


def _register(patch, tmp_path, source, *, url=oxford17.URL, size_known=False):
  """Registers the look-alikes as the real files: the archive's sha256 in a test checksum
  file (size 0 = not yet known, as for the real one), the split file's md5."""
  patch.setattr(oxford17_builder.Builder, "_checksums_path", http_server.write_checksums(
      tmp_path / "oxford17.txt", {url: (source / oxford17.ARCHIVE, size_known)}))
  patch.setattr(oxford17, "SPLITS_MD5", _md5(source / oxford17.SPLITS_FILE))


def _build(data_dir, manual=None):
  builder = tfds.builder("oxford17", data_dir=data_dir)
  config = tfds.download.DownloadConfig(manual_dir=str(manual)) if manual else None
  builder.download_and_prepare(download_config=config)
  return builder


@pytest.fixture(scope="module")
def built(source, tmp_path_factory):
  with pytest.MonkeyPatch.context() as patch:
    _register(patch, tmp_path_factory.mktemp("checksums"), source)
    return _build(tmp_path_factory.mktemp("tfds"), source)


def test_1360_images_17_classes_of_80_and_the_official_splits(source, built):
  info = built.info
  assert {name: split.num_examples for name, split in info.splits.items()} == SPLIT_SIZES
  assert info.features["label"].names == oxford17.CLASS_NAMES
  assert len(oxford17.CLASS_NAMES) == 17 and oxford17.NUM_IMAGES == 1360
  lists = fake_oxford17.splits()
  with tarfile.open(source / oxford17.ARCHIVE) as tar:
    originals = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
  for name, examples in ((n, tfds.as_numpy(built.as_dataset(
      split=n, decoders={"image": tfds.decode.SkipDecoding()}))) for n in SPLIT_SIZES):
    key = {"train": "trn", "validation": "val", "test": "tst"}[name[:-1]] + name[-1]
    indices = []
    for example in examples:
      path = example["file_name"].decode()
      index = int(path[len("jpg/image_"):-len(".jpg")])
      indices.append(index)
      assert path == f"jpg/image_{index:04d}.jpg"
      assert example["label"] == (index - 1) // 80  # blocks of 80 by index
      assert example["image"] == originals[path]  # the original bytes
    assert sorted(indices) == lists[key].ravel().astype(int).tolist(), name
  per_class = np.bincount([e["label"] for e in tfds.as_numpy(built.as_dataset(split="train1"))])
  assert per_class.tolist() == [40] * 17
  assert info.metadata["source"] == oxford17.URL
  assert info.metadata["splits_source"] == oxford17.SPLITS_URL
  assert info.homepage == oxford17.HOMEPAGE
  assert "Nilsback" in info.citation


def test_the_extracted_folder_gives_the_same_shards(source, built, tmp_path, monkeypatch):
  _register(monkeypatch, tmp_path, source)
  manual = tmp_path / "manual"
  manual.mkdir()
  with tarfile.open(source / oxford17.ARCHIVE) as tar:
    tar.extractall(manual, filter="data")
  (manual / oxford17.SPLITS_FILE).write_bytes((source / oxford17.SPLITS_FILE).read_bytes())
  from_folder = _build(tmp_path / "tfds", manual)
  assert shard_bytes(pathlib.Path(from_folder.data_path)) == shard_bytes(
      pathlib.Path(built.data_path))


def test_a_manual_archive_that_is_not_the_registered_one_is_refused(source, tmp_path,
                                                                    monkeypatch):
  _register(monkeypatch, tmp_path, source)
  manual = tmp_path / "manual"
  fake_oxford17.write_archive(manual / oxford17.ARCHIVE, size=20)  # another archive
  (manual / oxford17.SPLITS_FILE).write_bytes((source / oxford17.SPLITS_FILE).read_bytes())
  with pytest.raises(archives.ArchiveMismatchError) as caught:
    _build(tmp_path / "tfds", manual)
  message = str(caught.value)
  assert "\n" not in message
  expected = hashlib.sha256((source / oxford17.ARCHIVE).read_bytes()).hexdigest()
  assert f"expected sha256 {expected} (size not yet registered); found " in message
  assert not list((tmp_path / "tfds").rglob("*.jpg"))  # nothing extracted


def test_a_split_file_without_the_published_md5_is_refused(source, tmp_path, monkeypatch):
  _register(monkeypatch, tmp_path, source)
  manual = tmp_path / "manual"
  manual.mkdir()
  (manual / oxford17.ARCHIVE).write_bytes((source / oxford17.ARCHIVE).read_bytes())
  fake_oxford17.write_splits(manual / oxford17.SPLITS_FILE, fake_oxford17.splits(seed=1))
  with pytest.raises(archives.ArchiveMismatchError) as caught:
    _build(tmp_path / "tfds", manual)
  assert str(caught.value) == (
      f"{manual / oxford17.SPLITS_FILE} is not the published datasplits.mat: expected md5 "
      f"{oxford17.SPLITS_MD5}, found md5 {_md5(manual / oxford17.SPLITS_FILE)}. Download it "
      f"again from {oxford17.SPLITS_URL}.")


def test_split_lists_that_are_not_image_numbers_are_named(tmp_path):
  lists = fake_oxford17.splits()
  lists["val2"] = np.array([[0.0, 5.0, 1361.0]])
  lists["tst3"] = np.array([[7.0, 7.0, 8.0]])
  del lists["trn1"]
  found = oxford17.read_splits(fake_oxford17.write_splits(tmp_path / "s.mat", lists))[1]
  assert [(p.where, p.reason) for p in found] == [
      ("datasplits.mat:trn1", "list is missing"),
      ("datasplits.mat:val2", "indices [0.0, 1361.0] are not image numbers 1-1360"),
      ("datasplits.mat:tst3", "lists [7] twice")]


def test_missing_images_are_all_named_in_one_error(source, tmp_path, monkeypatch):
  manual = tmp_path / "manual"
  with tarfile.open(source / oxford17.ARCHIVE) as tar:
    tar.extractall(manual, filter="data")
  (manual / oxford17.SPLITS_FILE).write_bytes((source / oxford17.SPLITS_FILE).read_bytes())
  _register(monkeypatch, tmp_path, source)
  (manual / "jpg" / "image_0005.jpg").unlink()
  (manual / "jpg" / "image_1360.jpg").write_bytes(b"not a jpeg")
  with pytest.raises(problems.InvalidSourceError) as caught:
    _build(tmp_path / "tfds", manual)
  assert sorted({p.where for p in caught.value.problems}) == [
      "jpg/image_0005.jpg", "jpg/image_1360.jpg"]
  assert "17flowers.tgz" in str(caught.value)


@pytest.fixture
def server(monkeypatch):
  for name in PROXIES:
    monkeypatch.delenv(name, raising=False)
  with http_server.FileServer() as running:
    monkeypatch.setattr(oxford17, "URL", running.url("/17flowers.tgz"))
    monkeypatch.setattr(oxford17, "SPLITS_URL", running.url("/datasplits.mat"))
    yield running


def test_download_accepts_the_archive_on_its_sha256_alone(source, server, tmp_path,
                                                          monkeypatch, built):
  _register(monkeypatch, tmp_path, source, url=oxford17.URL)  # size 0: not yet known
  server.files.update({"/17flowers.tgz": (source / oxford17.ARCHIVE).read_bytes(),
                       "/datasplits.mat": (source / oxford17.SPLITS_FILE).read_bytes()})
  downloaded = _build(tmp_path / "tfds")
  assert (server.downloads("/17flowers.tgz"), server.downloads("/datasplits.mat")) == (1, 1)
  assert shard_bytes(pathlib.Path(downloaded.data_path)) == shard_bytes(
      pathlib.Path(built.data_path))


@pytest.mark.parametrize("wrong", ["/17flowers.tgz", "/datasplits.mat"])
def test_a_wrong_download_is_refused_with_one_line(source, server, tmp_path, monkeypatch,
                                                   wrong):
  _register(monkeypatch, tmp_path, source, url=oxford17.URL)
  server.files.update({"/17flowers.tgz": (source / oxford17.ARCHIVE).read_bytes(),
                       "/datasplits.mat": (source / oxford17.SPLITS_FILE).read_bytes()})
  server.files[wrong] = server.files[wrong][:-10] + b"0123456789"
  with pytest.raises(downloads.SourceNotFoundError) as caught:
    _build(tmp_path / "tfds")
  line, = [line for line in str(caught.value).splitlines() if server.url(wrong) in line]
  assert "ArchiveMismatchError" in line
  assert ("(size not yet registered)" if wrong.endswith(".tgz") else "expected md5") in line
  assert not list((tmp_path / "tfds").rglob("*.tfrecord*"))


def test_the_real_files_are_registered_by_their_published_hashes():
  lines = [line.split("\t") for line in
           pathlib.Path(CHECKSUMS, "oxford17.txt").read_text().splitlines()]
  registered = {url: (int(size), sha, name) for url, size, sha, name in lines}
  assert registered[oxford17.URL] == (
      0, "fe38a60f8b4a95e657551247d3e7d799a3fafcdbc595be504b12839967823d70", "17flowers.tgz")
  assert oxford17.SPLITS_MD5 == "4828cddfd0d803c5abbdebcb1e148a1e"
  assert oxford17.URL not in oxford17_builder.Builder.url_infos  # TFDS cannot check a size it lacks
  assert oxford17.URL in oxford17_builder.Builder.registered_files


def test_verify_says_it_does_not_support_oxford17_yet(source, built):
  from imagesets.verifying import round_trip
  with pytest.raises(ValueError, match=r"^oxford17/1.0.0: no round trip for this "
                                       "config yet"):
    round_trip.verify(built.data_path, source / oxford17.ARCHIVE)


def test_the_old_name_flowers_oxford17_gives_one_line_with_the_new_name(tmp_path):
  with pytest.raises(ValueError) as caught:
    tfds.builder("flowers/oxford17", data_dir=tmp_path)
  message = str(caught.value)
  assert len(message.strip().splitlines()) == 1
  assert "flowers/oxford17 is now its own dataset, oxford17" in message


@pytest.mark.parametrize("how", [["datasets/flowers"], ["flowers", "--imports", "imagesets"]],
                         ids=["by path", "by name"])
def test_the_stock_tfds_build_of_flowers_oxford17_ends_in_one_line(tmp_path, how):
  result = subprocess.run([warm("tfds"), "build", *how, "--config", "oxford17",
                           "--data_dir", str(tmp_path)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
  assert result.returncode != 0
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith("error: ") and "flowers/oxford17 is now its own dataset, oxford17" in last
