"""voc_segmentation/train_aug: VOC2012 train + SBD minus VOC2012 val, built from VOC- and
SBD-shaped trees and archives made here whose hashes the tests register: from
--manual_dir and through TFDS's real download manager against a local server."""

import hashlib
import pathlib

import numpy as np
import PIL.Image
import pytest
import tensorflow_datasets as tfds

import imagesets  # noqa: F401
from conftest import shard_bytes
from imagesets.building import archives
from imagesets.building import downloads
from imagesets.building import problems
from imagesets.checksums import DIRECTORY as CHECKSUMS
from imagesets.voc_segmentation import sbd_pairs
from imagesets.voc_segmentation import train_aug
from imagesets.voc_segmentation import voc_pairs
from imagesets.voc_segmentation import voc_segmentation_dataset_builder as voc
from imagesets.voc_segmentation import voc_source
from imagesets_testing import fake_voc
from imagesets_testing import http_server

PROXIES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy")
VOC_TRAIN = [f"2012_{i:06d}" for i in range(4)]
VOC_VAL = [f"2012_{i:06d}" for i in range(4, 7)]
# SBD lists VOC train and val ids too (as the real one does), and ids VOC has no masks for.
SBD_TRAIN = ["2012_000001", "2012_000004", "2008_000010", "2008_000011"]
SBD_VAL = ["2012_000005", "2008_000012", "2012_000007"]
FROM_SBD = ["2008_000010", "2008_000011", "2008_000012", "2012_000007"]
EXPECTED_TRAIN = sorted(VOC_TRAIN + FROM_SBD)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
  """A manual dir with both trees extracted, and one with both archives."""
  folders = tmp_path_factory.mktemp("train_aug_folders")
  voc_folder = fake_voc.write_tree(folders, num_train=len(VOC_TRAIN), num_val=len(VOC_VAL),
                                   num_unlabelled=4)
  sbd_folder = fake_voc.write_sbd(folders, SBD_TRAIN, SBD_VAL)
  packed = tmp_path_factory.mktemp("train_aug_archives")
  fake_voc.write_tar(folders, packed / voc_source.TAR_NAME)
  fake_voc.write_tgz(folders, "benchmark_RELEASE", packed / sbd_pairs.ARCHIVE)
  return folders, voc_folder, sbd_folder, packed


def _register(patch, tmp_path, packed, urls=None):
  """The look-alike archives as the registered files, in a test checksum file: the VOC tar
  with its size, benchmark.tgz by its sha256 alone (size 0, as for the real one)."""
  urls = urls or {"voc": voc_source.URLS, "sbd": sbd_pairs.URLS}
  files = {url: packed / voc_source.TAR_NAME for url in urls["voc"]}
  files.update({url: (packed / sbd_pairs.ARCHIVE, False) for url in urls["sbd"]})
  patch.setattr(voc.Builder, "_checksums_path",
                http_server.write_checksums(tmp_path / "voc_segmentation.txt", files))


def _build(data_dir, manual=None):
  builder = voc.Builder(config="train_aug", data_dir=data_dir)
  config = tfds.download.DownloadConfig(manual_dir=str(manual)) if manual else None
  builder.download_and_prepare(download_config=config)
  return builder


@pytest.fixture(scope="module")
def built(sources, tmp_path_factory):
  folders, *_ = sources
  return _build(tmp_path_factory.mktemp("tfds"), folders)


def test_train_is_voc_train_plus_sbd_minus_voc_val(built):
  ids = {split: sorted(e["image_id"].decode() for e in tfds.as_numpy(built.as_dataset(split=split)))
         for split in ("train", "validation")}
  assert ids == {"train": EXPECTED_TRAIN, "validation": VOC_VAL}
  assert {s: built.info.splits[s].num_examples for s in ("train", "validation")} == {
      "train": 8, "validation": 3}
  assert built.info.full_name == f"voc_segmentation/train_aug/{voc.Builder.VERSION}"


def test_voc_pairs_come_from_voc_and_the_others_from_sbd(sources, built):
  _, voc_folder, sbd_folder, _ = sources
  skip = tfds.decode.SkipDecoding()
  for split in ("train", "validation"):
    for example in tfds.as_numpy(built.as_dataset(split=split, decoders={"image": skip})):
      image_id = example["image_id"].decode()
      classes, objects = example["class_mask"][..., 0], example["object_mask"][..., 0]
      if image_id in FROM_SBD:
        assert example["image"] == (sbd_folder / "img" / f"{image_id}.jpg").read_bytes()
        expected = [sbd_pairs.read_mat_mask(sbd_folder / sub / f"{image_id}.mat", struct)[0]
                    for sub, struct in (("cls", "GTcls"), ("inst", "GTinst"))]
      else:  # VOC's own JPEG and PNGs win, also for the ids SBD lists too
        assert example["image"] == (voc_folder / "JPEGImages" / f"{image_id}.jpg").read_bytes()
        expected = [np.array(PIL.Image.open(voc_folder / sub / f"{image_id}.png"))
                    for sub in (voc_pairs.CLASS_DIR, voc_pairs.OBJECT_DIR)]
      np.testing.assert_array_equal(classes, expected[0])
      np.testing.assert_array_equal(objects, expected[1])
      assert (example["height"], example["width"]) == classes.shape
  sbd_copy = sbd_pairs.read_mat_mask(sbd_folder / "cls" / "2012_000001.mat", "GTcls")[0]
  voc_copy = np.array(PIL.Image.open(voc_folder / voc_pairs.CLASS_DIR / "2012_000001.png"))
  assert sbd_copy.shape != voc_copy.shape or not np.array_equal(sbd_copy, voc_copy)


def test_from_archives_the_sbd_archive_is_accepted_on_its_sha256_alone(sources, built,
                                                                      tmp_path, monkeypatch):
  *_, packed = sources
  _register(monkeypatch, tmp_path, packed)
  from_archives = _build(tmp_path / "tfds", packed)
  assert shard_bytes(pathlib.Path(from_archives.data_path)) == shard_bytes(
      pathlib.Path(built.data_path))
  extracted = tmp_path / "tfds" / "downloads" / "extracted"
  assert (extracted / f"{sbd_pairs.ARCHIVE}.safe" / sbd_pairs.IN_ARCHIVE).is_dir()


def test_a_manual_sbd_archive_that_is_not_the_registered_one_is_refused(sources, tmp_path,
                                                                       monkeypatch):
  folders, _, _, packed = sources
  _register(monkeypatch, tmp_path, packed)
  manual = tmp_path / "manual"
  manual.mkdir()
  (manual / voc_source.TAR_NAME).symlink_to(packed / voc_source.TAR_NAME)
  fake_voc.write_tgz(folders, "benchmark_RELEASE/dataset/img", manual / sbd_pairs.ARCHIVE)
  with pytest.raises(archives.ArchiveMismatchError) as caught:
    _build(tmp_path / "tfds", manual)
  message = str(caught.value)
  assert "\n" not in message and str(manual / sbd_pairs.ARCHIVE) in message
  expected = hashlib.sha256((packed / sbd_pairs.ARCHIVE).read_bytes()).hexdigest()
  assert f"expected sha256 {expected} (size not yet registered); found " in message
  assert not (tmp_path / "tfds" / "downloads" / "extracted" / "benchmark.tgz.safe").exists()


def test_without_sbd_the_error_says_what_to_put_where(tmp_path):
  fake_voc.write_tree(tmp_path / "voc_only", num_train=1, num_val=1, num_unlabelled=0)
  with pytest.raises(downloads.SourceNotFoundError) as caught:
    _build(tmp_path / "tfds", tmp_path / "voc_only")
  assert "benchmark.tgz" in str(caught.value) and "--manual_dir" in str(caught.value)


def test_every_bad_sbd_pair_is_named_in_one_error(tmp_path):
  fake_voc.write_tree(tmp_path / "src", num_train=1, num_val=1, num_unlabelled=0)
  sbd = fake_voc.write_sbd(tmp_path / "src", ["2008_000001", "2008_000002", "2008_000003"],
                           ["2008_000004"])
  (sbd / "inst" / "2008_000001.mat").unlink()
  fake_voc.write_sbd_mat(sbd / "cls" / "2008_000002.mat", "GTcls", np.zeros((5, 6), np.uint8))
  fake_voc.write_sbd_mat(sbd / "cls" / "2008_000003.mat", "GTcls",
                         np.full(sbd_pairs.read_mat_mask(sbd / "inst" / "2008_000003.mat",
                                                         "GTinst")[0].shape, 21, np.uint8))
  (sbd / "cls" / "2008_000004.mat").write_bytes(b"MATLAB 5.0 but cut")
  with (sbd / "val.txt").open("a") as listed:
    listed.write("../2008_000005\n")
  with pytest.raises(problems.InvalidSourceError) as caught:
    _build(tmp_path / "tfds", tmp_path / "src")
  found = {p.where: p.reason for p in caught.value.problems}
  assert found["2008_000001"] == "SBD inst/2008_000001.mat is missing"
  assert found["2008_000002"].startswith("SBD cls/2008_000002.mat is 6x5 (WxH) but the image is")
  assert found["2008_000003"] == "SBD cls/2008_000003.mat has values [21] outside 0-20 and 255 (void)"
  assert found["2008_000004"].startswith("SBD cls/2008_000004.mat: unreadable GTcls annotation")
  assert found["../2008_000005"] == "in SBD val.txt: not a plain file name"
  assert len(found) == 5
  assert f"restore them from the original {sbd_pairs.ARCHIVE}" in str(caught.value)


@pytest.fixture
def server(monkeypatch):
  for name in PROXIES:
    monkeypatch.delenv(name, raising=False)
  with http_server.FileServer() as running:
    yield running


def test_download_falls_back_to_the_mirrors_through_tfds(sources, built, server, tmp_path,
                                                         monkeypatch):
  *_, packed = sources
  closed = f"http://127.0.0.1:{http_server.closed_port()}"
  urls = {"voc": (server.url("/voc/original.tar"), server.url("/voc/mirror.tar")),
          "sbd": (f"{closed}/benchmark.tgz", server.url("/sbd/benchmark.tgz"))}
  monkeypatch.setattr(voc_source, "URLS", urls["voc"])
  monkeypatch.setattr(sbd_pairs, "URLS", urls["sbd"])
  _register(monkeypatch, tmp_path, packed, urls)
  server.files.update({"/voc/mirror.tar": (packed / voc_source.TAR_NAME).read_bytes(),
                       "/sbd/benchmark.tgz": (packed / sbd_pairs.ARCHIVE).read_bytes()})
  downloaded = _build(tmp_path / "tfds")  # the original VOC host answers 404
  assert [server.downloads(p) for p in ("/voc/original.tar", "/voc/mirror.tar",
                                        "/sbd/benchmark.tgz")] == [1, 1, 1]
  assert shard_bytes(pathlib.Path(downloaded.data_path)) == shard_bytes(
      pathlib.Path(built.data_path))


def test_sbd_downloads_that_are_not_the_registered_file_are_refused(sources, server, tmp_path,
                                                                   monkeypatch):
  *_, packed = sources
  urls = {"voc": (server.url("/voc.tar"),),
          "sbd": (server.url("/sbd/a/benchmark.tgz"), server.url("/sbd/b/benchmark.tgz"))}
  monkeypatch.setattr(voc_source, "URLS", urls["voc"])
  monkeypatch.setattr(sbd_pairs, "URLS", urls["sbd"])
  _register(monkeypatch, tmp_path, packed, urls)
  wrong = bytearray((packed / sbd_pairs.ARCHIVE).read_bytes())
  wrong[-1] ^= 1
  server.files.update({"/voc.tar": (packed / voc_source.TAR_NAME).read_bytes(),
                       "/sbd/a/benchmark.tgz": bytes(wrong), "/sbd/b/benchmark.tgz": bytes(wrong)})
  with pytest.raises(downloads.SourceNotFoundError) as caught:
    _build(tmp_path / "tfds")
  lines = str(caught.value).splitlines()
  assert lines[0] == "could not download benchmark.tgz:"
  for url in urls["sbd"]:
    line, = [line for line in lines if url in line]
    assert "ArchiveMismatchError" in line and "(size not yet registered)" in line
  assert not list((tmp_path / "tfds").rglob("*.tfrecord*"))


def test_sbd_is_registered_by_its_published_sha256_for_both_addresses():
  lines = [line.split("\t") for line in
           pathlib.Path(CHECKSUMS, "voc_segmentation.txt").read_text().splitlines()]
  registered = {url: (int(size), sha, name) for url, size, sha, name in lines}
  for url in sbd_pairs.URLS:
    assert registered[url] == (
        0, "6a5a2918d5c73ce032fdeba876574d150d9d04113ab87540a1304cbcc715be53", "benchmark.tgz")
  assert sbd_pairs.URLS[0].startswith("https://www2.eecs.berkeley.edu/")
  assert set(voc.Builder.registered_files) == {*voc_source.URLS, *sbd_pairs.URLS}


def test_work_items_prefer_voc_and_drop_every_voc_val_id(sources):
  _, voc_folder, sbd_folder, _ = sources
  items, found = train_aug.work_items(voc_folder, sbd_folder)
  assert found == []
  assert {key: source for key, (source, _, _) in items["train"]} == {
      **{i: "voc" for i in VOC_TRAIN}, **{i: "sbd" for i in FROM_SBD}}
  assert [key for key, _ in items["validation"]] == VOC_VAL


def test_verify_says_it_does_not_support_train_aug_yet(sources, built):
  from imagesets.verifying import round_trip
  folders, *_ = sources
  with pytest.raises(ValueError, match=rf"^voc_segmentation/train_aug/{voc.Builder.VERSION}: no "
                                       "round trip for this config yet"):
    round_trip.verify(built.data_path, folders)
