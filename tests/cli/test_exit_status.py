"""Issue 50: one exit status per kind of outcome, the same in every subcommand
(`imagesets.cli.exit_status`, the README's table)."""

import shutil

import pytest

import cli_runs
from imagesets.cli import exit_status
from imagesets_testing import photo_datasets
from publish_helpers import TINY

_NOT_THERE = "pets:1.0.0"


def _spec_commands(data_dir, bucket, spec):
  """Every subcommand that takes a version, asked for `spec`."""
  return {
      "verify": ["verify", spec, "--data-dir", data_dir, "--source", data_dir],
      "duplicates": ["duplicates", spec, "--data-dir", data_dir],
      "report": ["report", spec, "--data-dir", data_dir],
      "diff": ["diff", TINY, spec, "--data-dir", data_dir],
      "publish": ["publish", spec, "--data-dir", data_dir, "--to", bucket],
      "fetch": ["fetch", bucket, spec],
  }


@pytest.mark.parametrize("command", ["verify", "duplicates", "report", "diff", "publish",
                                     "fetch"])
def test_a_version_that_is_not_there_exits_3_from_every_command(command, tiny_data_dir,
                                                                   tmp_path):
  bucket = tmp_path / "bucket"
  cli_runs.in_process("publish", TINY, "--data-dir", tiny_data_dir, "--to", bucket, "--quiet")
  args = _spec_commands(tiny_data_dir, bucket, _NOT_THERE)[command]
  result = cli_runs.in_process(*args, "--cache-dir" if command == "fetch" else "--data-dir",
                               tmp_path / "cache" if command == "fetch" else tiny_data_dir)
  assert result.returncode == exit_status.NOT_FOUND, (result.returncode, result.stderr)
  assert "pets" in result.stderr.strip().splitlines()[-1]
  # ... and a text that is no version at all is a usage error, as a bad flag is
  args = _spec_commands(tiny_data_dir, bucket, "pets:1")[command]
  assert cli_runs.in_process(*args).returncode == exit_status.USAGE
  assert cli_runs.in_process(*args, "--no-such-flag").returncode == exit_status.USAGE


def test_folders_that_are_not_there_exit_3(tmp_path):
  for args in (["list", "--data-dir", tmp_path / "nowhere"], ["list", tmp_path / "nowhere"],
               ["build", tmp_path / "nowhere", "--name", "pets"],
               ["build", tmp_path, "--name", "pets", "--annotations", tmp_path / "none.json"]):
    result = cli_runs.in_process(*args)
    assert result.returncode == exit_status.NOT_FOUND, (args, result.stderr)


def test_the_installed_command_exits_with_the_same_statuses(tiny_data_dir, tmp_path):
  # (the console script's process: what a shell script sees)
  for args, status in [(["duplicates", _NOT_THERE, "--data-dir", tiny_data_dir], 3),
                       (["list", "ftp://host/x"], 2), (["build", tmp_path, "--name", "P"], 2),
                       # the answer is yes: no group in the seeded random images
                       (["duplicates", TINY, "--data-dir", tiny_data_dir, "--fail-on", "any"],
                        0)]:
    result = cli_runs.command(*args)
    assert result.returncode == status, (args, result.stderr)


def test_an_unexpected_failure_and_a_refusal_exit_4(tmp_path):
  assert exit_status.of(RuntimeError("boom")) == exit_status.FAILED
  # a file missing inside something that is there is damage: only the named types are 3
  assert exit_status.of(FileNotFoundError("x")) == exit_status.FAILED
  assert exit_status.of(FileNotFoundError("x"), not_there=(FileNotFoundError,)) == 3


@pytest.fixture(scope="module")
def pets(tmp_path_factory):
  """(data dir holding pets:1.0.0, its source tree), built as `imagesets build` builds."""
  return photo_datasets.pets(tmp_path_factory.mktemp("statuses"))


def test_a_damaged_version_is_a_failure_not_a_missing_one(pets, tmp_path):
  data_dir, _ = pets
  copy = shutil.copytree(data_dir, tmp_path / "tfds")
  shard = next((copy / "pets" / "1.0.0").glob("pets-train.tfrecord-*"))
  shard.unlink()   # the version is there (its dataset_info.json); a file of it is gone
  for args in (["duplicates", "pets:1.0.0", "--recompute"], ["diff", "pets:1.0.0", "pets"]):
    result = cli_runs.in_process(*args, "--data-dir", copy)
    assert result.returncode == exit_status.FAILED, (args, result.stderr)
    assert shard.name in result.stderr.strip().splitlines()[-1], result.stderr


def test_verify_says_3_only_for_what_is_not_there(pets, tmp_path):
  data_dir, source = pets
  verify = ["verify", "pets:1.0.0", "--data-dir", data_dir]
  result = cli_runs.in_process(*verify, "--source", tmp_path / "none")
  assert result.returncode == exit_status.NOT_FOUND, result.stderr
  result = cli_runs.in_process(*verify, "--annotations", tmp_path / "none.json")
  assert result.returncode == exit_status.NOT_FOUND, result.stderr
  (tmp_path / "other" / "x").mkdir(parents=True)   # there, but not the build's source
  result = cli_runs.in_process(*verify, "--source", tmp_path / "other")
  assert result.returncode == exit_status.FAILED, result.stderr
  assert "no folder with the class folders" in result.stderr


def test_a_file_for_a_folder_or_a_spec_with_dot_dot_is_a_usage_error(pets, tmp_path):
  data_dir, source = pets
  (tmp_path / "afile").write_text("x")
  for args in (["build", tmp_path / "afile", "--name", "pets"], ["list", tmp_path / "afile"],
               ["list", "--data-dir", tmp_path / "afile"]):
    result = cli_runs.in_process(*args)
    assert result.returncode == exit_status.USAGE and "not a folder" in result.stderr, (
        args, result.stderr)
  result = cli_runs.in_process("publish", "pets/..:1.0.0", "--data-dir", data_dir,
                               "--to", tmp_path / "bucket")
  assert result.returncode == exit_status.USAGE, result.stderr
  assert "plain folder names" in result.stderr and not (tmp_path / "bucket").exists()


def test_building_on_a_version_that_is_not_built_is_not_there(pets, tmp_path):
  data_dir, source = pets
  copy = shutil.copytree(data_dir, tmp_path / "tfds")
  result = cli_runs.in_process("build", source, "--name", "pets", "--version", "1.1.0",
                               "--from", "9.9.9", "--data-dir", copy)
  assert result.returncode == exit_status.NOT_FOUND, result.stderr
  assert "pets:9.9.9 is not built in" in result.stderr
