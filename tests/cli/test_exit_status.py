"""Issue 50: one exit status per kind of outcome, the same in every subcommand
(`imagesets.cli.exit_status`, the README's table)."""

import pytest

import cli_runs
from imagesets.cli import exit_status
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
  (tmp_path / "file").write_text("not a folder")
  result = cli_runs.in_process("list", tmp_path / "file")
  assert result.returncode == exit_status.FAILED, result.stderr
  assert exit_status.of(RuntimeError("boom")) == exit_status.FAILED
  assert exit_status.of(FileNotFoundError("x")) == exit_status.NOT_FOUND
  assert exit_status.of(exit_status.UsageError("x")) == exit_status.USAGE
