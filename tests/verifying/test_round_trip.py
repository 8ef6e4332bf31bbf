"""round_trip and `imagesets verify`: prepared versions checked against their sources, file
by file, on trees and archives the tests make, TFRecord and ArrayRecord builds; every kind of
tampering is caught."""

import json
import pathlib
import shutil

import pytest
import tensorflow_datasets as tfds

import cli_runs
import imagesets  # noqa: F401
from conftest import registered
from imagesets.building import splits as split_rules
from imagesets.flowers import flowers_dataset_builder as flowers
from imagesets.class_folders import named_build
from imagesets.class_folders import class_folders_dataset_builder as class_folders
from imagesets.verifying import round_trip
from imagesets_testing import sample_images
from imagesets_testing.trees import write_tree

UPRIGHT = sample_images.photo(40, 30, seed=99)


def files() -> dict[str, bytes]:
  out = {f"{name}/{i}.jpg": sample_images.jpeg(30 + i, 40, seed=10 * c + i)
         for c, name in enumerate(["cats", "dogs"]) for i in range(6)}
  out["cats/grey.jpg"] = sample_images.encode(UPRIGHT[..., 0], "JPEG", quality=90)
  out["dogs/phone.JPG"] = sample_images.sideways_jpeg(UPRIGHT)
  out["dogs/sticker.png"] = sample_images.rgba_png(UPRIGHT)
  out["cats/big.jpg"] = sample_images.jpeg(300, 400, seed=5)
  out["cats/cut.jpg"] = sample_images.jpeg(60, 80)[:500]
  out["NOTES.txt"] = b"taken in 2024\n"
  return out


def build(tree, data_dir, file_format="tfrecord", **options):
  config = class_folders.ClassFoldersConfig(
      name="pets", skip_bad_files=True, split_proportions={"train": 0.5, "test": 0.5}, **options)
  return named_build.build(tree, "pets", data_dir=str(data_dir), options=config,
                           file_format=file_format)


def imagesets_verify(*args):
  return cli_runs.in_process("verify", *args)


@pytest.mark.parametrize("shorter_side, file_format",
                         [(0, "tfrecord"), (64, "tfrecord"), (64, "array_record")])
def test_a_class_folder_build_matches_its_source(tmp_path, shorter_side, file_format):
  tree = write_tree(tmp_path / "pets", files())
  builder = build(tree, tmp_path / "tfds", shorter_side=shorter_side, file_format=file_format)
  assert builder.info.file_format.value == file_format
  report = round_trip.verify(builder.data_path, tree)
  assert report.ok, report.lines()
  assert report.checked == len(files()) - 2 and list(report.skipped) == ["cats/cut.jpg"]
  converted = len(builder.info.metadata["converted_files"])
  assert (report.identical, report.reconverted) == (report.checked - converted, converted)
  assert converted == (3 if not shorter_side else 3 + 1)  # + big.jpg, resized
  assert report.ignored == 1


def test_every_kind_of_difference_is_named(tmp_path):
  tree = write_tree(tmp_path / "pets", files())
  builder = build(tree, tmp_path / "tfds")
  changed = shutil.copytree(tree, tmp_path / "changed")
  (changed / "cats" / "0.jpg").write_bytes(sample_images.jpeg(30, 40, seed=77))
  (changed / "dogs" / "phone.JPG").write_bytes(sample_images.sideways_jpeg(UPRIGHT[::-1]))
  (changed / "dogs" / "new.jpg").write_bytes(sample_images.jpeg(30, 40, seed=78))
  (changed / "dogs" / "1.jpg").unlink()
  shutil.move(changed / "cats" / "2.jpg", changed / "dogs" / "moved.jpg")
  report = round_trip.verify(builder.data_path, changed)
  found = {p.where: p.reason for p in report.mismatches}
  assert "differ from the source" in found["cats/0.jpg"]
  assert "recorded conversion" in found["dogs/phone.JPG"]
  assert "neither stored nor listed as skipped" in found["dogs/new.jpg"]
  assert "not in the source" in found["dogs/1.jpg"]
  assert "not in the source" in found["cats/2.jpg"]
  assert "neither stored" in found["dogs/moved.jpg"]
  assert len(found) == 6 and not report.ok


def test_the_copies_a_drop_build_left_out_are_accounted_for(tmp_path):
  # Split by path, a copy of a train photo lands in test: leakage="drop" leaves it out and
  # lists it in duplicates.json; the version is what its build recorded (it failed:
  # "in the source but neither stored nor listed as skipped").
  source = files()
  proportions = {"train": 0.5, "test": 0.5}
  original = next(name for name in source if name.endswith(".jpg")
                  and split_rules.split_of(name, proportions) == "train")
  copy = next(f"dogs/copy{n}.jpg" for n in range(100)
              if split_rules.split_of(f"dogs/copy{n}.jpg", proportions) == "test")
  source[copy] = source[original]
  tree = write_tree(tmp_path / "pets", source)
  builder = build(tree, tmp_path / "tfds", leakage="drop", split_key="path")
  report = round_trip.verify(builder.data_path, tree)
  assert report.ok, report.lines()
  assert report.dropped == {copy} and "1 dropped as copies" in report.lines()[0]
  # A report that lists a stored example as dropped does not say what the version holds.
  stored = pathlib.Path(builder.data_path) / "duplicates.json"
  listed = json.loads(stored.read_text())
  listed["dropped"].append({"split": "train", "file_name": original, "label": "cats"})
  stored.write_text(json.dumps(listed))
  found = {p.where: p.reason for p in round_trip.verify(builder.data_path, tree).mismatches}
  assert found == {original: "stored, but duplicates.json lists it as dropped by the build"}


def test_cli_exit_codes_and_archive_sources(tmp_path, monkeypatch):
  manual = tmp_path / "manual"
  manual.mkdir()
  shutil.copy(flowers.__file__.replace("flowers_dataset_builder.py",
                                       "dummy_data/flower_photos.tgz"), manual)
  monkeypatch.setattr(flowers.Builder, "url_infos", registered(manual / "flower_photos.tgz"))
  tfds.builder("flowers", data_dir=tmp_path / "tfds").download_and_prepare(
      download_config=tfds.download.DownloadConfig(manual_dir=manual))
  ok = imagesets_verify("flowers", "--data-dir", tmp_path / "tfds", "--source",
                        manual / "flower_photos.tgz")
  assert ok.returncode == 0, ok.stderr
  assert "35 stored example(s) checked, 35 byte-identical" in ok.stdout
  assert "1 non-image file(s) ignored" in ok.stdout and "OK" in ok.stdout  # LICENSE.txt
  other = write_tree(tmp_path / "other", {f"{c}/x.jpg": sample_images.jpeg(20, 20)
                                          for c in flowers.FLOWER_CLASSES})
  failed = imagesets_verify("flowers:1.1.0", "--data-dir", tmp_path / "tfds", "--source", other)
  assert failed.returncode == 1 and "FAILED" in failed.stdout
  assert "stored, but not in the source" in failed.stdout
  missing = imagesets_verify("flowers", "--data-dir", tmp_path / "tfds", "--source",
                             tmp_path / "nowhere")
  assert missing.returncode == 3  # (not there)
  assert missing.stderr.strip().splitlines()[-1] == (
      f"imagesets: error: --source {tmp_path / 'nowhere'}: no such file or folder")


def test_cli_verifies_an_array_record_build(tmp_path):
  tree = write_tree(tmp_path / "pets", files())
  build(tree, tmp_path / "tfds", file_format="array_record")
  ok = imagesets_verify("pets:1.0.0", "--data-dir", tmp_path / "tfds")   # the recorded folder
  assert ok.returncode == 0, ok.stderr
  assert f"  source: {tree} (the folder its build recorded)" in ok.stdout.splitlines()
  assert f"{len(files()) - 2} stored example(s) checked" in ok.stdout and "OK" in ok.stdout
  moved = shutil.move(tree, tmp_path / "elsewhere")
  gone = imagesets_verify("pets:1.0.0", "--data-dir", tmp_path / "tfds")
  assert gone.returncode == 3 and gone.stderr.strip().splitlines()[-1] == (
      f"imagesets: error: {tree}: the folder its build recorded is not there (moved or "
      "deleted?): give --source PATH_OR_ARCHIVE")
  tree = shutil.move(moved, tree)
  metadata = tmp_path / "tfds" / "pets" / "1.0.0" / "metadata.json"   # (forged: escaped)
  metadata.write_text(metadata.read_text().replace(
      json.dumps(str(tree)), json.dumps("/nowhere\nOK: everything matches")))
  forged = imagesets_verify("pets:1.0.0", "--data-dir", tmp_path / "tfds")
  assert forged.returncode == 3 and "\nOK" not in forged.stderr + forged.stdout
  (pathlib.Path(tree) / "dogs" / "0.jpg").write_bytes(sample_images.jpeg(30, 40, seed=123))
  failed = imagesets_verify("pets:1.0.0", "--data-dir", tmp_path / "tfds", "--source", tree)
  assert failed.returncode == 1 and "FAILED" in failed.stdout, failed.stderr
  assert "dogs/0.jpg: stored bytes differ from the source file" in failed.stdout
