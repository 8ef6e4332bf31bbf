"""`imagesets build` options through the command line's parsing (`cli.main`, in this
process): the build a flag asks for is the build the Python call with that option makes,
record for record."""

import json
import pathlib
import subprocess

import tensorflow_datasets as tfds

import cli_runs
import imagesets  # noqa: F401
from conftest import records_by_split, warm_beam_workers
from imagesets.building import class_folders_builder
from imagesets.class_folders import named_build
from imagesets.reading import sources
from imagesets_testing import sample_images
from imagesets_testing.trees import write_tree

SPLITS = {"train": 0.5, "test": 0.5}


def files() -> dict[str, bytes]:
  out = {f"{name}/{i}.jpg": sample_images.jpeg(30 + i, 40, seed=10 * c + i)
         for c, name in enumerate(["cats", "dogs"]) for i in range(5)}
  out["cats/big.jpg"] = sample_images.jpeg(300, 400, seed=5)
  return out


def imagesets_build(tree, data_dir, *flags) -> subprocess.CompletedProcess:
  return cli_runs.in_process("build", tree, "--name", "pets", "--data-dir", data_dir,
                             "--splits", "train=0.5,test=0.5", *flags)


def python_build(tree, data_dir, file_format="tfrecord", versioned=True, **options):
  """The Python call `imagesets build` makes (`versioned`); without it, the build of a
  version before versions recorded their split recipe (by path)."""
  config = class_folders_builder.ClassFoldersConfig(name="pets", split_proportions=SPLITS,
                                                    **options)
  return named_build.build(tree, "pets", data_dir=str(data_dir), options=config,
                           file_format=file_format, versioned=versioned,
                           from_version=named_build.LATEST if versioned else named_build.FULL)


def array_records(version_dir) -> dict[str, list[bytes]]:
  builder = tfds.builder_from_directory(str(version_dir))
  return {split: sorted(sources.raw_records(builder, split)[i]
                        for i in range(builder.info.splits[split].num_examples))
          for split in builder.info.splits}


def test_file_format_and_image_size(tmp_path):
  tree = write_tree(tmp_path / "pets", files())
  result = imagesets_build(tree, tmp_path / "cli", "--file-format", "array_record",
                           "--image-size", "64")
  assert result.returncode == 0, result.stderr
  assert "deprecated" not in result.stderr
  version = tmp_path / "cli" / "pets" / "1.0.0"
  assert list(version.glob("*.array_record-*")) and not list(version.glob("*.tfrecord*"))
  metadata = json.loads((version / "metadata.json").read_text())
  assert metadata["image_size"] == 64 and "cats/big.jpg" in metadata["converted_files"]
  stored = {e["file_name"].decode(): e for split in ("train", "test") for e in
            tfds.builder_from_directory(str(version)).as_data_source(split)}
  assert stored["cats/big.jpg"]["image"].shape[:2] == (64, 85)  # shorter side exactly 64
  assert stored["cats/0.jpg"]["image"].shape[:2] == (30, 40)    # small: as it came
  # The same dataset as the Python call with that option, record for record.
  python = python_build(tree, tmp_path / "python", file_format="array_record", image_size=64)
  assert array_records(version) == array_records(python.data_path)
  assert metadata["content_fingerprint"] == python.info.metadata["content_fingerprint"]
  # The check can fail: without the options, another dataset.
  plain = python_build(tree, tmp_path / "plain")
  assert plain.info.metadata["content_fingerprint"] != metadata["content_fingerprint"]
  assert "--shorter-side" not in cli_runs.in_process("build", "--help").stdout


def test_the_old_shorter_side_option_keeps_its_meaning_and_its_builds(tmp_path):
  tree = write_tree(tmp_path / "pets", files())
  # What `imagesets build ... --shorter-side 64` made before --image-size existed: the
  # config with shorter_side=64 (at least 64). Re-running that command must find it built.
  python_build(tree, tmp_path / "old", versioned=False, shorter_side=64)
  again = imagesets_build(tree, tmp_path / "old", "--shorter-side", "64")
  assert again.returncode == 0, again.stderr
  assert "nothing to do" in again.stderr + again.stdout
  (line,) = [line for line in again.stderr.splitlines() if "deprecated" in line]
  assert "--image-size 64" in line and "at least" in line and "exactly" in line
  # A fresh build with it is the old option's dataset, not --image-size's.
  fresh = imagesets_build(tree, tmp_path / "fresh", "--shorter-side", "64")
  assert fresh.returncode == 0, fresh.stderr
  fingerprint = lambda d: named_build.stored_fingerprint(d / "pets" / "1.0.0")  # noqa: E731
  python_build(tree, tmp_path / "python", shorter_side=64)
  assert fingerprint(tmp_path / "fresh") == fingerprint(tmp_path / "python")
  exact = imagesets_build(tree, tmp_path / "exact", "--image-size", "64")
  assert fingerprint(tmp_path / "exact") != fingerprint(tmp_path / "fresh"), exact.stderr


def test_beam_pipeline_options_run_the_build_on_beam(tmp_path):
  tree = write_tree(tmp_path / "pets", files())
  warm_beam_workers()
  # The flags of docs/scaling.md's local example: Beam's DirectRunner, 2 worker processes.
  result = imagesets_build(tree, tmp_path / "beam", "--beam_pipeline_options",
                           "direct_num_workers=2,direct_running_mode=multi_processing")
  assert result.returncode == 0, result.stderr
  local = python_build(tree, tmp_path / "local")
  assert records_by_split(tmp_path / "beam" / "pets" / "1.0.0") == records_by_split(
      local.data_path)
  # The options reach Beam: a runner Beam does not know fails the build.
  refused = imagesets_build(tree, tmp_path / "refused", "--beam_pipeline_options",
                            "runner=NoSuchRunner")
  assert refused.returncode != 0
  assert "NoSuchRunner" in refused.stderr
  assert not (pathlib.Path(tmp_path / "refused") / "pets" / "1.0.0").exists()
