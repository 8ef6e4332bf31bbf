"""flowers: TF's flower_photos, from the manual dir (archive or folder) or the download,
on the dummy archive in dummy_data/."""

import hashlib
import io
import math
import pathlib
import subprocess
import tarfile

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import imagesets  # noqa: F401
from conftest import REPO, offline_env, registered, shard_bytes, warm
from imagesets.building import archives
from imagesets.building import downloads
from imagesets_testing import http_server
from imagesets_testing import sample_images
from imagesets_testing.trees import write_tree
from imagesets.flowers import flowers_dataset_builder as flowers

DUMMY_TGZ = pathlib.Path(flowers.__file__).parent / "dummy_data" / "flower_photos.tgz"
DUMMY_SPLITS = {"train": 30, "validation": 4, "test": 1}
PROXIES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy")


class DummyFlowerPhotosTest(tfds.testing.DatasetBuilderTestCase):
  """TFDS's own builder checks, through the download path (dl_manager.download mocked)."""

  DATASET_CLASS = flowers.Builder
  BUILDER_CONFIG_NAMES_TO_TEST = ["default"]
  SPLITS = DUMMY_SPLITS
  DL_DOWNLOAD_RESULT = "flower_photos.tgz"
  SKIP_CHECKSUMS = True


@pytest.fixture(scope="module")
def from_manual_tgz(tmp_path_factory):
  manual = tmp_path_factory.mktemp("manual")
  (manual / "flower_photos.tgz").write_bytes(DUMMY_TGZ.read_bytes())
  data_dir = tmp_path_factory.mktemp("tfds")
  builder = tfds.builder("flowers", data_dir=data_dir)
  with pytest.MonkeyPatch.context() as patch:  # the dummy archive as the registered file
    patch.setattr(flowers.Builder, "url_infos", registered(manual / "flower_photos.tgz"))
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=manual))
  return builder


def test_default_config_from_manual_tgz_loads_by_name(from_manual_tgz):
  data_dir = from_manual_tgz.data_dir_root
  info = from_manual_tgz.info
  assert {k: v.num_examples for k, v in info.splits.items()} == DUMMY_SPLITS
  assert info.features["label"].names == flowers.FLOWER_CLASSES
  assert info.metadata["ignored_files"] == ["LICENSE.txt"]
  assert info.metadata["source"] == flowers.URL
  ds = tfds.load("flowers", split="train[:50%]", data_dir=data_dir, download=False)
  assert len(list(ds)) == DUMMY_SPLITS["train"] // 2
  for split, count in DUMMY_SPLITS.items():
    assert info.splits[split].num_shards >= min(4, count)  # the shard floor


def test_read_config_input_context_splits_work_between_two_workers(from_manual_tgz):
  seen = []
  for worker in range(2):
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=worker)
    ds = from_manual_tgz.as_dataset(
        split="train", read_config=tfds.ReadConfig(input_context=context),
        decoders={"image": tfds.decode.SkipDecoding()})
    names = [e["file_name"] for e in tfds.as_numpy(ds)]
    assert names
    seen.append(set(names))
  assert not seen[0] & seen[1] and len(seen[0] | seen[1]) == DUMMY_SPLITS["train"]


def test_manual_extracted_folder_gives_the_same_shards(from_manual_tgz, tmp_path):
  manual = tmp_path / "manual"
  manual.mkdir()
  with tarfile.open(DUMMY_TGZ) as tar:
    tar.extractall(manual, filter="data")
  builder = tfds.builder("flowers", data_dir=tmp_path / "tfds")
  builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=manual))
  assert (shard_bytes(pathlib.Path(builder.data_dir))
          == shard_bytes(pathlib.Path(from_manual_tgz.data_dir)))


def _tgz(path, members):
  """members: (name, data or None, link target or None)."""
  with tarfile.open(path, "w:gz") as tar:
    for name, data, link in members:
      info = tarfile.TarInfo(name)
      if link:
        info.type, info.linkname = tarfile.SYMTYPE, link
        tar.addfile(info)
      else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def test_unsafe_manual_archive_is_refused_and_nothing_is_written(tmp_path, monkeypatch):
  manual = tmp_path / "manual"
  manual.mkdir()
  photo = sample_images.jpeg(20, 20)
  _tgz(manual / "flower_photos.tgz", [
      ("flower_photos/daisy/ok.jpg", photo, None),
      ("flower_photos/../../escaped.jpg", photo, None),
      ("/tmp/absolute.jpg", photo, None),
      ("flower_photos/roses/link.jpg", None, "/etc/passwd"),
  ])
  builder = tfds.builder("flowers", data_dir=tmp_path / "tfds")
  monkeypatch.setattr(flowers.Builder, "url_infos", registered(manual / "flower_photos.tgz"))
  with pytest.raises(archives.UnsafeArchiveError) as caught:
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=manual))
  assert {p.where for p in caught.value.problems} == {
      "flower_photos/../../escaped.jpg", "/tmp/absolute.jpg", "flower_photos/roses/link.jpg"}
  assert not (tmp_path / "escaped.jpg").exists()
  assert not list((tmp_path / "tfds").rglob("*.jpg"))  # not even the good member


@pytest.fixture
def served(tmp_path, monkeypatch):
  """A local server for flower_photos.tgz, registered in a test checksum file as the
  dummy archive: the builder downloads through TFDS's real download manager."""
  for name in PROXIES:
    monkeypatch.delenv(name, raising=False)
  with http_server.FileServer() as server:
    url = server.url("/flower_photos.tgz")
    monkeypatch.setattr(flowers, "URL", url)
    monkeypatch.setattr(flowers.Builder, "_checksums_path", http_server.write_checksums(
        tmp_path / "flowers.txt", {url: DUMMY_TGZ}))
    yield server


def test_download_is_checked_by_tfds_then_safely_extracted(served, tmp_path):
  served.files["/flower_photos.tgz"] = DUMMY_TGZ.read_bytes()
  builder = tfds.builder("flowers", data_dir=tmp_path / "tfds")
  builder.download_and_prepare()  # no manual dir: downloads
  assert served.downloads("/flower_photos.tgz") == 1
  assert {k: v.num_examples for k, v in builder.info.splits.items()} == DUMMY_SPLITS
  downloaded = [p for p in (tmp_path / "tfds" / "downloads").rglob("*") if p.is_file()
                and p.read_bytes() == DUMMY_TGZ.read_bytes()]
  assert len(downloaded) == 1, downloaded  # kept by TFDS; extracted beside it
  assert list((tmp_path / "tfds" / "downloads" / "extracted").glob("*.safe/flower_photos"))


def test_a_downloaded_archive_that_is_not_the_registered_one_is_refused(served, tmp_path):
  changed = bytearray(DUMMY_TGZ.read_bytes())
  changed[100] ^= 1  # same size, other bytes
  served.files["/flower_photos.tgz"] = bytes(changed)
  builder = tfds.builder("flowers", data_dir=tmp_path / "tfds")
  with pytest.raises(downloads.SourceNotFoundError) as caught:
    builder.download_and_prepare()
  line, = [line for line in str(caught.value).splitlines() if flowers.URL in line]
  assert "NonMatchingChecksumError" in line and hashlib.sha256(
      DUMMY_TGZ.read_bytes()).hexdigest() in line  # the expected sha256, on that one line
  assert not list((tmp_path / "tfds").rglob("*.jpg"))  # nothing extracted
  assert not list((tmp_path / "tfds").rglob("*.tfrecord*"))  # nothing built


def test_a_server_that_never_answers_is_probed_once_and_named(tmp_path, monkeypatch):
  for name in PROXIES:
    monkeypatch.delenv(name, raising=False)
  monkeypatch.setattr(downloads, "PROBE_TIMEOUT_S", 1)  # the rule, not the default's wait
  with http_server.silent_server() as hung:
    monkeypatch.setattr(flowers, "URL", f"http://127.0.0.1:{hung.port}/flower_photos.tgz")
    monkeypatch.setattr(flowers.Builder, "_checksums_path", http_server.write_checksums(
        tmp_path / "flowers.txt", {flowers.URL: DUMMY_TGZ}))
    with pytest.raises(downloads.SourceNotFoundError) as caught:
      tfds.builder("flowers", data_dir=tmp_path / "tfds").download_and_prepare()
  assert f"{flowers.URL}: no answer from 127.0.0.1:{hung.port} within 1 s" in str(caught.value)
  assert hung.connections == 1, hung.connections  # one probe: no download retried


def test_the_real_archive_is_registered_with_its_size_and_sha256():
  info = flowers.Builder.url_infos[flowers.URL]
  assert (info.size, info.checksum) == (
      228_813_984, "4c54ace7911aaffe13a365c34f650e71dd5bf1be0a58b464e5a7183e3e595d9c")


def test_manual_dir_without_the_archive_says_what_to_put_there(tmp_path):
  manual = tmp_path / "manual"
  manual.mkdir()
  (manual / "something_else.zip").write_bytes(b"PK")
  builder = tfds.builder("flowers", data_dir=tmp_path / "tfds")
  with pytest.raises(FileNotFoundError, match="flower_photos.tgz"):
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=manual))


def test_wrong_class_folders_for_flower_photos_are_an_error(tmp_path):
  manual = tmp_path / "manual"
  write_tree(manual / "flower_photos", {"daisy/a.jpg": sample_images.jpeg(20, 20)})
  builder = tfds.builder("flowers", data_dir=tmp_path / "tfds")
  with pytest.raises(ValueError, match="expected"):
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=manual))




# Shorter sides around and above 256: kept (<= 256) or scaled by libjpeg's n/8 steps.
FAST_READ_SIZES = [(200, 300), (256, 400), (300, 450), (500, 375), (700, 1000), (333, 500)]


def _n8_scaled(height: int, width: int) -> tuple[int, int]:
  """What docs/flowers.md says fast_read stores: the smallest n/8 scale whose shorter
  side is >= 256 (libjpeg rounds up), or the image itself when its shorter side is <= 256."""
  if min(height, width) <= 256:
    return height, width
  n = next(n for n in range(1, 9) if math.ceil(min(height, width) * n / 8) >= 256)
  return math.ceil(height * n / 8), math.ceil(width * n / 8)


def test_fast_read_is_built_with_the_sizes_the_docs_give(tmp_path):
  files = {f"{name}/{h}x{w}.jpg": sample_images.jpeg(h, w, seed=seed)
           for seed, name in enumerate(flowers.FLOWER_CLASSES) for h, w in FAST_READ_SIZES}
  write_tree(tmp_path / "manual" / "flower_photos", files)
  builder = tfds.builder("flowers/fast_read", data_dir=tmp_path / "tfds")
  builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
      manual_dir=tmp_path / "manual"))
  stored = {}
  raw = builder.as_dataset(split="train+validation+test",
                           decoders={"image": tfds.decode.SkipDecoding()})
  for example in tfds.as_numpy(raw):
    name = example["file_name"].decode()
    h, w = (int(v) for v in name.split("/")[1][:-4].split("x"))
    size = tuple(tf.io.decode_jpeg(example["image"]).shape[:2])
    assert size == (example["height"], example["width"]) == _n8_scaled(h, w), name
    if min(h, w) <= 256:
      assert example["image"] == files[name]  # small enough: kept as it came
    else:
      assert 256 <= min(size) <= 320, name  # the range docs/flowers.md gives
    stored[name] = size
  assert sorted(stored) == sorted(files)
  assert builder.info.metadata["shorter_side"] == 256


def test_a_root_is_refused_with_the_way_to_build_your_own_folder(tmp_path):
  config = flowers.FlowersConfig(name="mine", root=str(tmp_path))
  builder = flowers.Builder(config=config, data_dir=tmp_path / "tfds")
  with pytest.raises(ValueError, match="imagesets build PATH --name NAME"):
    builder.download_and_prepare()
  assert builder.info.citation.startswith("@ONLINE {tfflowers")  # the citation is flowers' own


def test_a_manual_archive_that_is_not_the_registered_file_is_refused(tmp_path):
  manual = tmp_path / "manual"
  manual.mkdir()
  (manual / "flower_photos.tgz").write_bytes(DUMMY_TGZ.read_bytes())  # any tar of that name
  builder = tfds.builder("flowers", data_dir=tmp_path / "tfds")
  with pytest.raises(archives.ArchiveMismatchError) as caught:
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=manual))
  message = str(caught.value)
  assert "expected 228,813,984 bytes, sha256 4c54ace7" in message
  assert f"found {DUMMY_TGZ.stat().st_size:,} bytes" in message and flowers.URL in message
  assert not list((tmp_path / "tfds").rglob("*.jpg"))  # nothing extracted
  # Same size, other bytes: the sha256 decides.
  same_size = manual / "flower_photos.tgz"
  real = registered(same_size)
  (url, info), = real.items()
  changed = bytearray(same_size.read_bytes())
  changed[100] ^= 1
  same_size.write_bytes(bytes(changed))
  with pytest.raises(archives.ArchiveMismatchError, match=f"expected {info.size:,} bytes, sha256 "):
    archives.check_registered(same_size, real)


def test_offline_without_a_manual_dir_stops_at_the_first_refusal_with_one_message(tmp_path):
  with http_server.silent_server(hang_up=True) as proxy:
    result = subprocess.run([warm("tfds"), "build", "datasets/flowers", "--data_dir",
                             str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                            env=offline_env(proxy.port), timeout=300)
  assert result.returncode != 0, result.stderr[-2000:]
  assert proxy.connections == 1, proxy.connections  # one probe, no download retried
  assert "Traceback" not in result.stderr
  message = result.stderr[result.stderr.index("error: could not download"):]
  assert flowers.URL in message and "--manual_dir" in message
