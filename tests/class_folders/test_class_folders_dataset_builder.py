"""class_folders (and the class-folder builder it shares with flowers and named builds):
real-world class-per-folder trees the tests make, checked example by example against the
source files."""

import io
import json
import pathlib
import re
import tarfile

import numpy as np
import PIL.Image
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import imagesets  # noqa: F401
from conftest import REPO, beam_download_config, records_by_split, shard_bytes, tfds_cli
from imagesets.analysis import duplicates
from imagesets.analysis import image_quality
from imagesets.building import class_folders_builder
from imagesets.building import generation
from imagesets.building import problems
from imagesets.reports import dataset_card
from imagesets_testing import sample_images
from imagesets_testing.trees import write_gfile_tree, write_tree
from imagesets.class_folders import class_folders_dataset_builder as class_folders


class ExampleTreeTest(tfds.testing.DatasetBuilderTestCase):
  """TFDS's own builder checks, on the `example` config's tree in dummy_data/pets."""

  DATASET_CLASS = class_folders.Builder
  BUILDER_CONFIG_NAMES_TO_TEST = ["example"]
  SPLITS = {"train": 21, "validation": 2, "test": 2}
  SKIP_CHECKSUMS = True


# ---------------------------------------------------------------- trees the tests make

UPRIGHT = sample_images.photo(40, 30, seed=99)  # portrait, red top / blue bottom


def real_world_files() -> dict[str, bytes]:
  """Every kind of file a real photo folder holds, by relative path."""
  files = {}
  for c, name in enumerate(["cats", "dogs", "owls"]):
    for i in range(6):
      suffix = [".jpg", ".JPG", ".jpeg"][i % 3]
      files[f"{name}/photo{i}{suffix}"] = sample_images.jpeg(30 + 3 * i, 40 + 2 * c, seed=10 * c + i)
    files[f"{name}/plain.png"] = sample_images.encode(sample_images.photo(20, 24, c), "PNG")
  files["cats/grey.jpg"] = sample_images.encode(UPRIGHT[..., 0], "JPEG", quality=90)
  files["cats/print_cmyk.jpg"] = sample_images.cmyk_jpeg(UPRIGHT)
  files["dogs/phone_IMG_0001.JPG"] = sample_images.sideways_jpeg(UPRIGHT)
  files["owls/sticker.png"] = sample_images.rgba_png(UPRIGHT)
  files["owls/nested/deeper.jpeg"] = sample_images.jpeg(33, 44, seed=5)
  files["LICENSE.txt"] = b"CC-BY\n"
  files["dogs/.DS_Store"] = b"\0\0\0\1Bud1"
  files["owls/Thumbs.db"] = b"\xd0\xcf\x11\xe0"
  return files


CONVERTED = {"cats/grey.jpg": "L JPEG", "cats/print_cmyk.jpg": "CMYK JPEG",
             "dogs/phone_IMG_0001.JPG": "EXIF orientation 6", "owls/sticker.png": "RGBA PNG"}
IGNORED = ["LICENSE.txt", "dogs/.DS_Store", "owls/Thumbs.db"]
BAD = {
    "cats/cut_download.jpg": (sample_images.jpeg(60, 80, seed=7)[:700], "cannot be decoded"),
    "dogs/empty.jpeg": (b"", "empty file"),
    "owls/readme.png": (b"These photos were taken by ...\n", "not an image"),
}


def build(root: str, data_dir, name="mine", **config):
  builder = class_folders.Builder(config=class_folders.ClassFoldersConfig(name=name, root=root, **config),
                            data_dir=data_dir)
  builder.download_and_prepare()
  return builder


def raw_examples(builder, split="all"):
  """Examples with the stored image bytes (not decoded), as numpy."""
  ds = builder.as_dataset(split=split, decoders={"image": tfds.decode.SkipDecoding()})
  return list(tfds.as_numpy(ds))


def check_contract(example) -> np.ndarray:
  pixels = tf.io.decode_image(example["image"], expand_animations=False)
  assert pixels.dtype == tf.uint8
  assert pixels.shape == (example["height"], example["width"], example["channels"])
  assert example["channels"] == 3
  assert example["format"].decode() == {b"\xff\xd8": "jpeg", b"\x89P": "png"}[example["image"][:2]]
  return pixels.numpy()


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
  return write_tree(tmp_path_factory.mktemp("photos"), real_world_files())


@pytest.fixture(scope="module")
def built(tree, tmp_path_factory):
  return build(tree, tmp_path_factory.mktemp("tfds"))


# ---------------------------------------------------------------------------- tests


def test_every_file_is_stored_once_decodable_upright_and_unchanged_when_possible(tree, built):
  source = real_world_files()
  images = {p: d for p, d in source.items() if p not in IGNORED}
  names = built.info.features["label"].names
  assert names == ["cats", "dogs", "owls"]
  examples = raw_examples(built)
  assert sorted(e["file_name"].decode() for e in examples) == sorted(images)
  for example in examples:
    path = example["file_name"].decode()
    pixels = check_contract(example)
    assert names[example["label"]] == path.split("/")[0]
    if path in CONVERTED:
      assert example["image"] != images[path]
    else:
      assert example["image"] == images[path]  # byte-identical pass-through
    if path in ("dogs/phone_IMG_0001.JPG", "cats/print_cmyk.jpg"):
      assert pixels.shape == UPRIGHT.shape
      error = np.abs(pixels.astype(int) - UPRIGHT).mean()
      upside_down = np.abs(pixels.astype(int) - UPRIGHT[::-1]).mean()
      assert error < 12 and upside_down > 3 * error  # upright, right colours
  metadata = built.info.metadata
  assert metadata["converted_files"].keys() == CONVERTED.keys()
  assert metadata["num_converted_files"] == len(CONVERTED)
  for path, reason in CONVERTED.items():
    assert reason in metadata["converted_files"][path]
  assert metadata["ignored_files"] == IGNORED
  assert metadata["num_skipped_files"] == 0
  # The label file TFDS writes next to the shards.
  assert (pathlib.Path(built.data_dir) / "label.labels.txt").read_text().split() == names


def test_splits_are_the_hash_assignment_and_subsplits_work(built):
  from imagesets.building import splits
  source = [p for p in real_world_files() if p not in IGNORED]
  expected = splits.assign(source, splits.DEFAULT_PROPORTIONS, seed=0)
  for split, paths in expected.items():
    got = sorted(e["file_name"].decode() for e in raw_examples(built, split))
    assert got == paths
  half = raw_examples(built, "train[:50%]")
  assert 0 < len(half) < len(expected["train"])


def test_bad_files_stop_the_build_with_one_error_listing_all(tree, tmp_path):
  root = write_tree(tmp_path / "photos", {**real_world_files(), **{p: d for p, (d, _) in BAD.items()}})
  data_dir = tmp_path / "tfds"
  with pytest.raises(problems.InvalidSourceError) as caught:
    build(root, data_dir)
  assert [p.where for p in caught.value.problems] == sorted(BAD)
  for problem in caught.value.problems:
    assert BAD[problem.where][1] in problem.reason
  message = str(caught.value)
  assert "3 problem(s)" in message and "skip_bad_files" in message
  assert not list(data_dir.glob("class_folders/mine/*/dataset_info.json"))  # nothing published


def test_skip_bad_files_records_them_in_metadata_and_log(tmp_path, monkeypatch):
  root = write_tree(tmp_path / "photos", {**real_world_files(), **{p: d for p, (d, _) in BAD.items()}})
  # Record the builder's warnings at the call: other tests (imagesets.cli.main) silence
  # absl's logger process-wide, so captured log text would depend on test order.
  warnings = []
  original = class_folders_builder.logging.warning
  monkeypatch.setattr(class_folders_builder.logging, "warning",
                      lambda msg, *args: warnings.append(msg % args) or original(msg, *args))
  builder = build(root, tmp_path / "tfds", skip_bad_files=True)
  log = "\n".join(warnings)
  metadata = builder.info.metadata
  assert metadata["num_skipped_files"] == 3
  assert sorted(metadata["skipped_files"]) == sorted(BAD)
  good = len(real_world_files()) - len(IGNORED)
  assert sum(s.num_examples for s in builder.info.splits.values()) == good
  assert "skipped 3 bad file(s)" in log and "dogs/empty.jpeg: empty file" in log
  # The record survives a reload from disk.
  reloaded = tfds.builder_from_directory(builder.data_dir)
  assert reloaded.info.metadata["skipped_files"] == metadata["skipped_files"]


def test_shards_are_no_bigger_than_the_source_photos(tmp_path):
  files = {f"{c}/{i}.jpg": sample_images.jpeg(375, 500, seed=i)
           for c in ("a", "b") for i in range(15)}
  builder = build(write_tree(tmp_path / "photos", files), tmp_path / "tfds")
  shards = sum(len(b) for b in shard_bytes(pathlib.Path(builder.data_dir)).values())
  source = sum(map(len, files.values()))
  assert shards <= 1.02 * source, shards / source


def test_parallel_and_serial_builds_write_identical_shards(tree, built, tmp_path, monkeypatch):
  from imagesets.building import parallel_map
  monkeypatch.setattr(parallel_map, "available_cores", lambda: 1)
  serial = build(tree, tmp_path / "tfds")
  assert shard_bytes(pathlib.Path(serial.data_dir)) == shard_bytes(pathlib.Path(built.data_dir))


def test_bucket_style_root_read_through_gfile(tmp_path):
  root = f"ram://{tmp_path.name}/photos"  # tf.io.gfile URL; gs:// goes the same way
  write_gfile_tree(root, real_world_files())
  builder = build(root, tmp_path / "tfds")
  assert builder.info.metadata["source"] == root
  assert len(raw_examples(builder)) == len(real_world_files()) - len(IGNORED)


def test_shorter_side_stores_small_jpegs(tmp_path):
  files = {f"{c}/{i}.png": sample_images.encode(sample_images.photo(300, 420, i), "PNG")
           for c in ("a", "b") for i in range(5)}
  files["a/small.jpg"] = sample_images.jpeg(100, 120)
  builder = build(write_tree(tmp_path / "photos", files), tmp_path / "tfds", shorter_side=256,
                  split_proportions={"train": 0.5, "test": 0.5})
  for example in raw_examples(builder):
    check_contract(example)
    assert example["format"] == b"jpeg"
    small = example["file_name"] == b"a/small.jpg"
    assert min(example["height"], example["width"]) == (100 if small else 256)
    if small:  # already small enough: stored as it came
      assert example["image"] == files["a/small.jpg"]


# ----------------------------------------------------------- user folders via the CLI


def test_user_folder_with_the_tfds_cli_json_config(tree, tmp_path):
  config = {"name": "my_photos", "version": "2.1.0", "root": tree, "seed": 3,
            "split_proportions": {"train": 0.6, "validation": 0.2, "test": 0.2},
            "description": "my three pets"}
  tfds_cli("build", "datasets/class_folders", "--config", json.dumps(config),
           "--data_dir", str(tmp_path))
  # Loaded by name, without the JSON: TFDS reads the config from the prepared files.
  builder = tfds.builder("class_folders/my_photos", data_dir=tmp_path)
  assert str(builder.version) == "2.1.0"
  assert builder.info.features["label"].names == ["cats", "dogs", "owls"]
  assert builder.info.metadata["split_proportions"] == config["split_proportions"]
  total = sum(s.num_examples for s in builder.info.splits.values())
  assert total == len(real_world_files()) - len(IGNORED)
  ds = tfds.load("class_folders/my_photos", split="validation", data_dir=tmp_path, download=False,
                 as_supervised=True)
  for image, label in ds:
    assert image.shape[-1] == 3 and 0 <= label < 3


def _build_on_beam(root, data_dir, multi_processing=True, **config):
  builder = class_folders.Builder(config=class_folders.ClassFoldersConfig(name="mine", root=root, **config),
                            data_dir=data_dir)
  builder.download_and_prepare(download_config=beam_download_config(multi_processing=multi_processing))
  return builder


def _with_copies(files: dict[str, bytes]) -> dict[str, bytes]:
  """`files` and copies of two of its photos: the same bytes under another class, and
  the same pixels saved again at a lower quality."""
  again = sample_images.encode(np.asarray(PIL.Image.open(io.BytesIO(files["cats/photo1.JPG"]))),
                               "JPEG", quality=70)
  return {**files, "dogs/copy_of_a_cat.jpg": files["cats/photo0.jpg"],
          "owls/saved_again.jpg": again}


def test_beam_build_equals_the_local_build_with_the_same_report(tmp_path):
  root = write_tree(tmp_path / "photos", {**_with_copies(real_world_files()),
                                          **{p: d for p, (d, _) in BAD.items()}})
  local = build(root, tmp_path / "local", skip_bad_files=True)
  # The stock CLI: builder imported by path, Beam workers in other processes.
  result = tfds_cli(
      "build", "datasets/class_folders", "--data_dir", str(tmp_path / "beam"),
      "--config", json.dumps({"name": "mine", "root": root, "skip_bad_files": True}),
      "--beam_pipeline_options=direct_num_workers=2,direct_running_mode=multi_processing")
  # Beam's INFO lines, its own and its workers' (127 here, 269 for the README's example),
  # are off in a command-line build on the local runner; its warnings stay.
  beam_info = re.findall(r"^INFO(?::apache_beam.*|\[(?:local_job_service|worker_handlers|"
                         r"native_type_compatibility|direct_runner|iobase)\.py\].*)$",
                         result.stdout + result.stderr, re.M)
  assert beam_info == [], beam_info[:5]
  on_beam = tfds.builder_from_directory(tmp_path / "beam" / "class_folders" / "mine" / "1.0.0")
  assert records_by_split(on_beam.data_path) == records_by_split(local.data_path)
  assert dict(on_beam.info.metadata) == dict(local.info.metadata)
  assert sorted(on_beam.info.metadata["converted_files"]) == sorted(CONVERTED)
  assert on_beam.info.metadata["num_skipped_files"] == len(BAD)
  # What the workers found of the images (beam_report): the local build's files, byte for byte.
  for name in (duplicates.REPORT_FILE, image_quality.QUALITY_FILE, dataset_card.CARD_FILE):
    assert (on_beam.data_path / name).read_bytes() == (local.data_path / name).read_bytes()
  found = json.loads((local.data_path / duplicates.REPORT_FILE).read_text())
  assert {m["file_name"] for g in found["groups"] for m in g["members"]} >= {
      "cats/photo0.jpg", "dogs/copy_of_a_cat.jpg", "cats/photo1.JPG", "owls/saved_again.jpg"}
  with pytest.raises(problems.InvalidSourceError) as caught:  # default: one error, every file
    _build_on_beam(root, tmp_path / "beam_strict")
  assert [p.where for p in caught.value.problems] == sorted(BAD)
  assert not list((tmp_path / "beam_strict").glob("class_folders/mine/*/*.tfrecord*"))


def test_beam_build_reads_a_bucket_style_root(tree, built, tmp_path):
  root = f"ram://{tmp_path.name}/photos"  # in-memory file system: Beam workers in-process
  write_gfile_tree(root, real_world_files())
  on_beam = _build_on_beam(root, tmp_path / "beam", multi_processing=False)
  assert records_by_split(on_beam.data_path) == records_by_split(built.data_path)
  # The driver read what the workers found (beam_report), not a fingerprint an image.
  report = on_beam.generation.report()
  assert report.images == [] and report.known.tallies.num_images == sum(
      split.num_examples for split in on_beam.info.splits.values())


def _emptied_test_split(tmp_path, copy: bool, **config):
  """A builder whose test split holds only a bad file and (`copy`) a copy of a train
  image, or another bad file."""
  from imagesets.building import splits
  names = ["c/orig.jpg", "c/copy.jpg", "c/bad.jpg"] + [f"c/g{i}.jpg" for i in range(4)]
  proportions = {"train": 0.5, "test": 0.5}
  seed = next(seed for seed in range(2000)  # (one that puts those two alone in test)
              if set(splits.assign(names, proportions, seed)["test"]) == {"c/copy.jpg",
                                                                           "c/bad.jpg"})
  image = sample_images.jpeg(30, 30, seed=1)
  root = write_tree(tmp_path / "tree", {
      "c/orig.jpg": image, "c/copy.jpg": image if copy else b"junk too", "c/bad.jpg": b"junk",
      **{f"c/g{i}.jpg": sample_images.jpeg(30, 30, seed=10 + i) for i in range(4)}})
  return class_folders.Builder(config=class_folders.ClassFoldersConfig(
      name="dropbad", root=str(root), skip_bad_files=True, split_proportions=proportions,
      seed=seed, exact_split_sizes=False, **config), data_dir=tmp_path / "out")


@pytest.mark.parametrize("on_beam", [False, True])
def test_a_split_emptied_by_a_bad_file_and_a_dropped_copy_says_both(tmp_path, on_beam):
  """test holds a bad file and a copy of a train image: skipped, dropped (leakage=drop);
  on Beam the copy is dropped on the workers and TFDS's writer refuses the empty split:
  the same error."""
  builder = _emptied_test_split(tmp_path, copy=True, leakage="drop")
  config = beam_download_config(multi_processing=False) if on_beam else None
  with pytest.raises(generation.EmptySplitError,
                     match=r"split 'test' has no examples left: 1 bad file\(s\) "
                     r"skipped \(c/bad.jpg\), 1 dropped as copies of images of an earlier "
                     r"split \(leakage=drop\)"):
    builder.download_and_prepare(download_config=config)


@pytest.mark.parametrize("leakage", ["warn", "drop"])
def test_a_split_of_bad_files_only_on_beam_names_them_whatever_the_leakage(tmp_path, leakage):
  """Nothing dropped: the bad files are named, as locally (not a leak, and not the
  folders a failed pipeline's sinks leave behind)."""
  builder = _emptied_test_split(tmp_path, copy=False, leakage=leakage)
  with pytest.raises(generation.EmptySplitError,
                     match=r"split 'test' has no examples left: 2 bad file\(s\) skipped "
                     r"\(c/bad.jpg, c/copy.jpg\); repair"):
    builder.download_and_prepare(download_config=beam_download_config(multi_processing=False))


@pytest.mark.parametrize("cap", [None, 1])
def test_every_split_left_empty_by_skipped_files_is_named_on_the_records_path(tmp_path, cap):
  """Local records (no cap) and TFDS's own writer (--max_examples_per_split): TFDS stops at
  the first empty split; the one error names all three."""
  from imagesets.building import generation
  root = write_tree(tmp_path / "junk", {f"c/{i}.jpg": b"junk%d" % i for i in range(6)})
  builder = class_folders.Builder(config=class_folders.ClassFoldersConfig(
      name="allbad", root=root, skip_bad_files=True, seed=1,
      split_proportions={"train": .34, "validation": .33, "test": .33}), data_dir=tmp_path / "d")
  with pytest.raises(generation.EmptySplitError) as error:
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(max_examples_per_split=cap))
  assert str(error.value) == (
      "splits 'train', 'validation', 'test' have no examples left: train: 2 bad file(s) "
      "skipped (c/0.jpg, c/3.jpg); validation: 1 bad file(s) skipped (c/4.jpg); test: 3 bad "
      "file(s) skipped (c/1.jpg, c/2.jpg, c/5.jpg); repair or replace them, add images, or "
      "change the split proportions or seed")
  assert not builder.data_path.exists()
