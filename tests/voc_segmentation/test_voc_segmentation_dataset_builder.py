"""voc_segmentation: builds from VOC-shaped trees and tars made here, checks, round trips."""

import hashlib
import json
import pathlib
import subprocess
import tarfile

import numpy as np
import PIL.Image
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import imagesets  # noqa: F401
from conftest import REPO, beam_download_config, offline_env, records_by_split, shard_bytes, tfds_cli, warm
from conftest import registered as registered_files
from imagesets.building import archives
from imagesets.building import downloads
from imagesets.building import problems
from imagesets.annotations import masks
from imagesets.checksums import DIRECTORY as CHECKSUMS
from imagesets.analysis import duplicates
from imagesets_testing import fake_voc
from imagesets_testing import http_server
from imagesets.voc_segmentation import voc_pairs
from imagesets.voc_segmentation import voc_segmentation_dataset_builder as voc
from imagesets.voc_segmentation import voc_source

NUM_TRAIN, NUM_VAL = 6, 5
PROXIES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy")


class DummyDataTest(tfds.testing.DatasetBuilderTestCase):
  DATASET_CLASS = voc.Builder
  BUILDER_CONFIG_NAMES_TO_TEST = ["default"]  # train_aug: tests/voc_segmentation/test_train_aug.py
  SPLITS = {"train": 3, "validation": 2}


def _build(data_dir, manual_dir):
  builder = voc.Builder(data_dir=data_dir)
  builder.download_and_prepare(
      download_config=tfds.download.DownloadConfig(manual_dir=str(manual_dir)))
  return builder


def _listed(folder, name):
  return (folder / voc_pairs.LISTS_DIR / name).read_text().split()


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
  root = tmp_path_factory.mktemp("voc_tree")
  return root, fake_voc.write_tree(root, num_train=NUM_TRAIN, num_val=NUM_VAL, num_unlabelled=3)


@pytest.fixture(scope="module")
def built(tree, tmp_path_factory):
  root, _ = tree
  return _build(tmp_path_factory.mktemp("tfds"), root)


def test_every_example_round_trips_exactly(tree, built):
  _, folder = tree
  seen = set()
  for split in ("train", "validation"):
    raw = built.as_dataset(split=split, decoders={"image": tfds.decode.SkipDecoding()})
    for example in tfds.as_numpy(raw):
      image_id = example["image_id"].decode()
      jpeg = (folder / voc_pairs.JPEG_DIR / f"{image_id}.jpg").read_bytes()
      assert example["image"] == jpeg  # the original bytes, not a re-encoding
    for example in tfds.as_numpy(built.as_dataset(split=split)):
      image_id = example["image_id"].decode()
      jpeg = (folder / voc_pairs.JPEG_DIR / f"{image_id}.jpg").read_bytes()
      np.testing.assert_array_equal(example["image"], tf.io.decode_jpeg(jpeg).numpy())
      for key, sub in (("class_mask", voc_pairs.CLASS_DIR), ("object_mask", voc_pairs.OBJECT_DIR)):
        source = np.array(PIL.Image.open(folder / sub / f"{image_id}.png"))
        assert example[key].shape == source.shape + (1,) and example[key].dtype == np.uint8
        np.testing.assert_array_equal(example[key][..., 0], source)
      assert (example["height"], example["width"]) == example["image"].shape[:2]
      seen.add(image_id)
  assert len(seen) == NUM_TRAIN + NUM_VAL


def test_masks_hold_class_ids_not_colours(built):
  values = set()
  for example in tfds.as_numpy(built.as_dataset(split="train+validation")):
    values |= set(np.unique(example["class_mask"]).tolist())
  assert 255 in values and 0 in values
  assert values <= set(range(21)) | {255}
  assert len(values) > 5  # several classes, not palette colours squeezed into grey


def test_splits_follow_the_segmentation_lists(tree, built):
  _, folder = tree
  ids = {split: {e["image_id"].decode() for e in tfds.as_numpy(built.as_dataset(split=split))}
         for split in ("train", "validation", "train+validation")}
  assert ids["train"] == set(_listed(folder, "train.txt"))
  assert ids["validation"] == set(_listed(folder, "val.txt"))
  assert ids["train+validation"] == set(_listed(folder, "trainval.txt"))
  # JPEGs without masks are in JPEGImages/ but are not examples.
  unlabelled = {p.stem for p in (folder / voc_pairs.JPEG_DIR).glob("*.jpg")} - ids["train+validation"]
  assert len(unlabelled) == 3
  assert set(built.info.splits.keys()) == {"train", "validation"}
  assert built.info.splits["train"].num_examples == NUM_TRAIN
  assert all(built.info.splits[s].num_shards >= 4 for s in ("train", "validation"))


def test_features_and_metadata_document_classes_and_void(built):
  reloaded = voc.Builder(data_dir=built.data_dir_root)  # info read back from disk
  features = reloaded.info.features
  assert features["image"].encoding_format == "jpeg" and features["image"].shape == (None, None, 3)
  for key in ("class_mask", "object_mask"):
    assert features[key].shape == (None, None, 1) and features[key].encoding_format == "png"
    assert features[key].use_colormap
    assert "255 void" in features[key].doc.desc
  assert "15 person" in features["class_mask"].doc.desc
  assert reloaded.info.metadata["class_names"] == list(voc_pairs.CLASS_NAMES)
  assert len(voc_pairs.CLASS_NAMES) == 21 and voc_pairs.CLASS_NAMES[20] == "tvmonitor"
  assert reloaded.info.metadata["void_value"] == 255
  assert reloaded.info.supervised_keys == ("image", "class_mask")
  assert "Everingham" in reloaded.info.citation


def test_grey_index_masks_are_accepted_like_palette_masks(tmp_path):
  folder = fake_voc.write_tree(tmp_path, num_train=1, num_val=1, num_unlabelled=0)
  mask_path = folder / voc_pairs.CLASS_DIR / "2012_000000.png"
  indices = np.array(PIL.Image.open(mask_path))
  PIL.Image.fromarray(indices).save(mask_path)  # mode L, as DeepLab's colormap removal writes
  example, found = voc_pairs.load_example("2012_000000", folder)
  assert found == []
  np.testing.assert_array_equal(tf.io.decode_png(example["class_mask"])[..., 0], indices)


def _break(folder, ids):
  """One broken pair per check, in one tree."""
  jpegs, classes, objects = (folder / d for d in (voc_pairs.JPEG_DIR, voc_pairs.CLASS_DIR,
                                                  voc_pairs.OBJECT_DIR))
  (jpegs / f"{ids[0]}.jpg").unlink()
  (classes / f"{ids[1]}.png").unlink()
  (objects / f"{ids[2]}.png").unlink()
  small = np.zeros((7, 9), np.uint8)
  fake_voc.write_palette_png(small, classes / f"{ids[3]}.png")
  colours = masks.pascal_palette()[np.array(PIL.Image.open(classes / f"{ids[4]}.png"))]
  PIL.Image.fromarray(colours).save(classes / f"{ids[4]}.png")
  bad_values = np.array(PIL.Image.open(classes / f"{ids[5]}.png"))
  bad_values[0, 0], bad_values[-1, -1] = 21, 128
  fake_voc.write_palette_png(bad_values, classes / f"{ids[5]}.png")
  PIL.Image.open(jpegs / f"{ids[6]}.jpg").save(jpegs / f"{ids[6]}.jpg", format="PNG")
  with (folder / voc_pairs.LISTS_DIR / "train.txt").open("a") as listing:
    listing.write(f"{ids[7]}\n")  # already in val.txt
    listing.write("../../JPEGImages/2012_000009\n")  # a path, not an id


EXPECTED = [
    (0, "JPEGImages/{}.jpg is missing"),
    (1, "SegmentationClass/{}.png is missing"),
    (2, "SegmentationObject/{}.png is missing"),
    (3, "SegmentationClass/{}.png is 9x7 (WxH) but the image is"),
    (4, "SegmentationClass/{}.png: colour (RGB) mask"),
    (5, "SegmentationClass/{}.png has values [21, 128] outside 0-20 and 255 (void)"),
    (6, "JPEGImages/{}.jpg is a PNG file, not a JPEG"),
    (7, "listed 2 times (train.txt, val.txt)"),
]
PATH_ID = ("../../JPEGImages/2012_000009", "in train.txt: not a plain file name")


def test_every_problem_of_a_build_is_reported_in_one_error(tmp_path):
  folder = fake_voc.write_tree(tmp_path / "src", num_train=NUM_TRAIN, num_val=NUM_VAL,
                               num_unlabelled=0)
  ids = sorted(p.stem for p in (folder / voc_pairs.JPEG_DIR).glob("*.jpg"))
  _break(folder, ids)
  with pytest.raises(problems.InvalidSourceError) as caught:
    _build(tmp_path / "tfds", tmp_path / "src")
  found = caught.value.problems
  assert len(found) == len(EXPECTED) + 1, found
  assert problems.Problem(*PATH_ID) in found
  for index, reason in EXPECTED:
    assert any(p.where == ids[index] and p.reason.startswith(reason.format(ids[index]))
               for p in found), (ids[index], reason, found)
  message = str(caught.value)
  assert all(ids[index] in message for index, _ in EXPECTED)
  assert "Fix: every id listed in ImageSets/Segmentation" in message
  assert "restore the named files from the original VOCtrainval_11-May-2012.tar" in message
  assert not list((tmp_path / "tfds").glob(f"voc_segmentation/default/{voc.Builder.VERSION}"))  # nothing half-written


def test_a_pair_with_several_problems_gets_all_of_them(tmp_path):
  folder = fake_voc.write_tree(tmp_path, num_train=1, num_val=0, num_unlabelled=0)
  (folder / voc_pairs.CLASS_DIR / "2012_000000.png").unlink()
  fake_voc.write_palette_png(np.full((3, 3), 255, np.uint8),
                             folder / voc_pairs.OBJECT_DIR / "2012_000000.png")
  example, found = voc_pairs.load_example("2012_000000", folder)
  assert example is None
  assert [p.reason.split(" ")[0] for p in found] == [
      "SegmentationClass/2012_000000.png", "SegmentationObject/2012_000000.png"]


def test_missing_or_empty_split_lists_are_problems_too(tmp_path):
  folder = fake_voc.write_tree(tmp_path / "src", num_train=1, num_val=1, num_unlabelled=0)
  (folder / voc_pairs.LISTS_DIR / "val.txt").unlink()
  (folder / voc_pairs.LISTS_DIR / "train.txt").write_text("\n")
  with pytest.raises(problems.InvalidSourceError) as caught:
    _build(tmp_path / "tfds", tmp_path / "src")
  assert [(p.where, p.reason) for p in caught.value.problems] == [
      ("ImageSets/Segmentation/train.txt", "split list is empty"),
      ("ImageSets/Segmentation/val.txt", "split list is missing")]


def test_a_wholly_bad_split_does_not_hide_the_other_splits_problems(tmp_path):
  folder = fake_voc.write_tree(tmp_path / "src", num_train=2, num_val=2, num_unlabelled=0)
  train, val = _listed(folder, "train.txt"), _listed(folder, "val.txt")
  for image_id in train:  # every train pair is bad: TFDS alone would stop at "no examples"
    (folder / voc_pairs.CLASS_DIR / f"{image_id}.png").unlink()
  (folder / voc_pairs.JPEG_DIR / f"{val[1]}.jpg").unlink()
  with pytest.raises(problems.InvalidSourceError) as caught:
    _build(tmp_path / "tfds", tmp_path / "src")
  assert [p.where for p in caught.value.problems] == sorted([*train, val[1]])


def test_builds_from_the_tar_and_from_other_manual_layouts(tree, built, tmp_path, monkeypatch):
  root, folder = tree
  expected = shard_bytes(pathlib.Path(built.data_path))
  manual = tmp_path / "manual"
  manual.mkdir()
  tar = fake_voc.write_tar(root, manual / voc_source.TAR_NAME)
  monkeypatch.setattr(voc.Builder, "url_infos", registered_files(tar))  # the test tar as VOC's
  from_tar = _build(tmp_path / "from_tar", manual)
  assert shard_bytes(pathlib.Path(from_tar.data_path)) == expected
  assert list((tmp_path / "from_tar" / "downloads" / "extracted").glob("*/VOCdevkit/VOC2012"))
  # The VOC2012 folder itself, or its parent, also work as --manual_dir.
  assert voc_source.folder_in_manual_dir(folder, tmp_path, {}) == folder
  assert voc_source.folder_in_manual_dir(folder.parent, tmp_path, {}) == folder


def test_a_manual_tar_that_is_not_the_registered_file_is_refused(tree, tmp_path):
  root, _ = tree
  manual = tmp_path / "manual"
  manual.mkdir()
  fake_voc.write_tar(root, manual / voc_source.TAR_NAME)  # right name, wrong bytes
  with pytest.raises(archives.ArchiveMismatchError) as caught:
    _build(tmp_path / "tfds", manual)
  assert "expected 1,999,639,040 bytes, sha256 e14f7632" in str(caught.value)
  assert voc_source.ORIGINAL_URL in str(caught.value)
  assert not list((tmp_path / "tfds").rglob("*.jpg"))  # nothing extracted


def test_offline_without_a_manual_dir_stops_at_the_first_refusals_naming_both_urls(tmp_path):
  with http_server.silent_server(hang_up=True) as proxy:
    result = subprocess.run([warm("tfds"), "build", "datasets/voc_segmentation",
                             "--data_dir", str(tmp_path)], cwd=REPO, capture_output=True,
                            text=True, env=offline_env(proxy.port), timeout=300)
  assert result.returncode != 0, result.stderr[-2000:]
  assert proxy.connections == len(voc_source.URLS), proxy.connections  # one probe a URL
  assert "Traceback" not in result.stderr
  message = result.stderr[result.stderr.index("error: could not download"):]
  assert voc_source.ORIGINAL_URL in message and voc_source.MIRROR_URL in message
  assert "--manual_dir" in message


def test_manual_tar_is_extracted_safely(tmp_path):
  manual = tmp_path / "manual"
  manual.mkdir()
  with tarfile.open(manual / voc_source.TAR_NAME, "w") as tar:
    tar.add(__file__, arcname="../escape.py")
  with pytest.raises(archives.UnsafeArchiveError, match="escape.py"):
    voc_source.folder_in_manual_dir(manual, tmp_path / "extracted",
                                    registered_files(manual / voc_source.TAR_NAME))
  assert not (tmp_path / "escape.py").exists()


def test_a_manual_dir_without_voc_says_what_to_put_there(tmp_path):
  (tmp_path / "something.txt").write_text("x")
  with pytest.raises(voc_source.SourceNotFoundError, match="--manual_dir") as caught:
    voc_source.folder_in_manual_dir(tmp_path, tmp_path / "extracted", {})
  assert voc_source.TAR_NAME in str(caught.value) and "VOCdevkit/VOC2012/" in str(caught.value)


@pytest.fixture
def server(monkeypatch):
  for name in PROXIES:
    monkeypatch.delenv(name, raising=False)
  with http_server.FileServer() as running:
    monkeypatch.setattr(voc_source, "URLS", (running.url("/original/" + voc_source.TAR_NAME),
                                             running.url("/mirror/" + voc_source.TAR_NAME)))
    yield running


def _serve(server, monkeypatch, tmp_path, registered_tar, served):
  """Registers `registered_tar` for both URLs in a test checksum file; serves `served`."""
  monkeypatch.setattr(voc.Builder, "_checksums_path", http_server.write_checksums(
      tmp_path / "voc_segmentation.txt", {url: registered_tar for url in voc_source.URLS}))
  server.files.update(served)


def test_download_falls_back_to_the_mirror_through_tfds(tree, built, server, tmp_path,
                                                       monkeypatch):
  root, _ = tree
  tar = fake_voc.write_tar(root, tmp_path / voc_source.TAR_NAME)
  _serve(server, monkeypatch, tmp_path, tar,
         {"/mirror/" + voc_source.TAR_NAME: tar.read_bytes()})  # the original host: 404
  downloaded = voc.Builder(data_dir=tmp_path / "tfds")
  downloaded.download_and_prepare()
  assert server.downloads("/original/" + voc_source.TAR_NAME) == 1
  assert server.downloads("/mirror/" + voc_source.TAR_NAME) == 1
  assert shard_bytes(pathlib.Path(downloaded.data_path)) == shard_bytes(
      pathlib.Path(built.data_path))
  assert list((tmp_path / "tfds" / "downloads" / "extracted").glob("*.safe/VOCdevkit/VOC2012"))


def test_the_original_host_is_used_when_it_works(tree, server, tmp_path, monkeypatch):
  root, _ = tree
  tar = fake_voc.write_tar(root, tmp_path / voc_source.TAR_NAME)
  _serve(server, monkeypatch, tmp_path, tar, {"/original/" + voc_source.TAR_NAME: tar.read_bytes(),
                                              "/mirror/" + voc_source.TAR_NAME: tar.read_bytes()})
  voc.Builder(data_dir=tmp_path / "tfds").download_and_prepare()
  assert server.downloads("/original/" + voc_source.TAR_NAME) == 1
  assert server.downloads("/mirror/" + voc_source.TAR_NAME) == 0


def test_downloads_that_are_not_the_registered_tar_are_refused_one_line_each(
    tree, server, tmp_path, monkeypatch):
  root, _ = tree
  tar = fake_voc.write_tar(root, tmp_path / voc_source.TAR_NAME)
  other = bytearray(tar.read_bytes())
  other[1000] ^= 1
  _serve(server, monkeypatch, tmp_path, tar, {"/original/" + voc_source.TAR_NAME: bytes(other),
                                              "/mirror/" + voc_source.TAR_NAME: bytes(other)})
  with pytest.raises(voc_source.SourceNotFoundError) as caught:
    voc.Builder(data_dir=tmp_path / "tfds").download_and_prepare()
  lines = str(caught.value).splitlines()
  assert lines[0] == f"could not download {voc_source.TAR_NAME}:"
  expected = hashlib.sha256(tar.read_bytes()).hexdigest()
  for url in voc_source.URLS:
    line, = [line for line in lines if url in line]
    assert "NonMatchingChecksumError" in line and expected in line
  assert "--manual_dir" in str(caught.value)
  assert not list((tmp_path / "tfds").rglob("*.tfrecord*"))


def test_a_closed_port_an_unknown_host_and_a_hung_server_are_each_probed_once(tmp_path,
                                                                              monkeypatch):
  for name in PROXIES:
    monkeypatch.delenv(name, raising=False)
  closed = f"http://127.0.0.1:{http_server.closed_port()}/{voc_source.TAR_NAME}"
  unknown = f"http://no-such-host.invalid/{voc_source.TAR_NAME}"
  monkeypatch.setattr(downloads, "PROBE_TIMEOUT_S", 1)  # the rule, not the default's wait
  with http_server.silent_server() as server:
    hung = f"http://127.0.0.1:{server.port}/{voc_source.TAR_NAME}"
    monkeypatch.setattr(voc_source, "URLS", (closed, unknown, hung))
    registered = tmp_path / voc_source.TAR_NAME
    registered.write_bytes(b"the registered archive")
    monkeypatch.setattr(voc.Builder, "_checksums_path", http_server.write_checksums(
        tmp_path / "voc_segmentation.txt", {url: registered for url in voc_source.URLS}))
    with pytest.raises(voc_source.SourceNotFoundError) as caught:
      voc.Builder(data_dir=tmp_path / "tfds").download_and_prepare()
  message = str(caught.value)
  assert f"{closed}: cannot connect to 127.0.0.1:" in message
  assert f"{unknown}: cannot connect to no-such-host.invalid:80 (" in message
  assert f"{hung}: no answer from 127.0.0.1:{server.port} within 1 s" in message
  assert server.connections == 1, server.connections  # one probe: no download retried


def test_both_urls_are_registered_with_the_real_size_and_sha256():
  lines = [line.split("\t") for line in
           pathlib.Path(CHECKSUMS, "voc_segmentation.txt").read_text().splitlines()]
  registered = {url: (int(size), sha) for url, size, sha, _ in lines}
  for url in voc_source.URLS:
    assert registered[url] == (
        1_999_639_040, "e14f763270cf193d0b5f74b169f44157a4b0c6efa708f4dd0ff78ee691763bcb")
  assert set(voc.Builder.url_infos) == set(voc_source.URLS)


def test_cli_build_is_byte_identical_to_the_library_build(tree, built, tmp_path):
  root, _ = tree
  # Another process (the stock tfds CLI, builder imported by path) writes the same bytes.
  tfds_cli("build", "datasets/voc_segmentation", "--config", "default", "--manual_dir", str(root),
           "--data_dir", str(tmp_path))
  cli = shard_bytes(tmp_path / "voc_segmentation" / "default" / str(voc.Builder.VERSION))
  assert cli == shard_bytes(pathlib.Path(built.data_path))
  assert len(cli) == 8


def test_beam_build_holds_the_local_records_and_reports_bad_pairs_the_same_way(tree, built, tmp_path):
  root, _ = tree
  on_beam = voc.Builder(data_dir=tmp_path / "beam")
  on_beam.download_and_prepare(download_config=beam_download_config(manual_dir=str(root),
                                                                    workers=2))
  assert records_by_split(on_beam.data_path) == records_by_split(built.data_path)

  folder = fake_voc.write_tree(tmp_path / "bad", num_train=3, num_val=2, num_unlabelled=0)
  train = _listed(folder, "train.txt")
  (folder / voc_pairs.OBJECT_DIR / f"{train[0]}.png").unlink()
  with (folder / voc_pairs.LISTS_DIR / "val.txt").open("a") as listing:
    listing.write(f"{train[1]}\n")
  with pytest.raises(problems.InvalidSourceError) as caught:
    voc.Builder(data_dir=tmp_path / "beam_bad").download_and_prepare(
        download_config=beam_download_config(manual_dir=str(tmp_path / "bad")))
  assert [(p.where, p.reason.split(" ")[0]) for p in caught.value.problems] == [
      (train[0], f"SegmentationObject/{train[0]}.png"), (train[1], "listed")]
  assert not list((tmp_path / "beam_bad").glob("voc_segmentation/*/*.tfrecord*"))


def test_the_build_fingerprints_every_image_for_its_duplicate_report(built):
  report = json.loads((pathlib.Path(built.data_path) / duplicates.REPORT_FILE).read_text())
  assert report["num_images"] == sum(s.num_examples for s in built.info.splits.values())
  assert built.info.metadata["duplicates"]["num_images"] == report["num_images"]
  card = (pathlib.Path(built.data_path) / "README.md").read_text()
  assert "## Duplicates" in card and "Formats: jpeg" in card
