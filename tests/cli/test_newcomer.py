"""Issue 37, a newcomer's second hour, through the `imagesets` command: what a shared
bucket's files allow and progress to the end of long work in a log, as a user runs it (a
subprocess, stderr captured: not a terminal); mistakes answered in one line naming the
fix (what the command says: in this process)."""

import re
import stat
import subprocess

import pytest

import cli_runs
from conftest import BIN
from publish_helpers import TINY
from imagesets_testing import sample_images
from imagesets_testing.trees import write_tree


imagesets = cli_runs.command


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_published_files_get_the_permissions_of_a_plain_copy(tiny_data_dir, tmp_path, umask):
  # A bucket on a shared file system: teammates read what was published (it was -rw-------).
  bucket = tmp_path / "bucket"
  result = subprocess.run([str(BIN / "imagesets"), "publish", TINY, "--data-dir",
                           str(tiny_data_dir), "--to", str(bucket), "--quiet"],
                          capture_output=True, text=True, timeout=300, umask=umask)
  assert result.returncode == 0, result.stderr
  files = [path for path in bucket.rglob("*") if path.is_file()]
  assert len(files) >= 13  # the version's objects and the default config's metadata
  assert {oct(stat.S_IMODE(path.stat().st_mode)) for path in files} == {oct(0o666 & ~umask)}
  assert not [path for path in bucket.rglob(".*.tmp-*")]  # no temporary file left behind


def usage_error(*args) -> str:
  """The last line of a usage error (exit 2)."""
  result = cli_runs.in_process(*args)
  assert result.returncode == 2, (result.returncode, result.stderr)
  return result.stderr.strip().splitlines()[-1]


def test_mistyped_flags_are_answered_with_the_documented_flag(tmp_path):
  # `--too`: the missing --to was reported instead, with no word about the typo.
  assert usage_error("publish", TINY, "--too", tmp_path / "b") == (
      f"imagesets publish: error: unrecognized argument(s): --too {tmp_path / 'b'} "
      "(did you mean --to?)")
  # The spelling the help and the README show, not TFDS's --data_dir.
  assert usage_error("list", "--datadir", tmp_path).endswith(
      f"--datadir {tmp_path} (did you mean --data-dir?)")
  assert usage_error("build", tmp_path, "--name", "n", "--skip_bad_file").endswith(
      "unrecognized argument(s): --skip_bad_file (did you mean --skip-bad-files?)")


def test_a_bad_name_or_version_is_refused_naming_the_fix(tmp_path):
  # (That TensorFlow never loads for them: tests/test_startup.py.)
  for flags, says in [
      (["--name", "Pets"], "dataset name 'Pets': use lower case letters, digits and _, "
                           "starting with a letter (did you mean --name pets?)"),
      (["--name", "my-pets 2"], "(did you mean --name my_pets_2?)"),
      (["--name", "pets", "--version", "1.3"], "version '1.3': expected X.Y.Z, three numbers "
                                               "(did you mean --version 1.3.0?)"),
      (["--name", "pets", "--version", "v2"], "(did you mean --version 2.0.0?)")]:
    result = cli_runs.in_process("build", tmp_path, *flags, "--data-dir", tmp_path / "d")
    assert result.returncode == 2, result.stderr  # (a usage error)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("imagesets: error: ") and line.endswith(says), line
  assert not (tmp_path / "d").exists()


def _last_lines(stderr: str) -> dict[str, str]:
  """The last line of each progress bar in a log ("DESC: NN%|...")."""
  last = {}
  for line in stderr.splitlines():
    match = re.match(r"(.+?): +\d+%\|", line)
    if match:
      last[match.group(1)] = line
  return last


def test_build_and_diff_show_progress_to_the_end_in_a_log(tmp_path):
  files = {f"{label}/{i}.jpg": sample_images.jpeg(30, 40, seed=i)
           for i, label in enumerate(["cat", "dog"] * 15)}
  tree = write_tree(tmp_path / "pets", files)
  built = imagesets("build", tree, "--name", "pets", "--data-dir", tmp_path / "d")
  assert built.returncode == 0, built.stderr
  last = _last_lines(built.stderr)
  assert re.search(r"\| 30/30 images \[", last["building pets/1.0.0"]), built.stderr
  assert "\r" not in built.stderr  # a log: lines, not a redrawn bar
  diff = imagesets("diff", "pets:1.0.0", "pets:1.0.0", "--data-dir", tmp_path / "d")
  assert diff.returncode == 0, diff.stderr
  # Each side's bar (both "reading pets/1.0.0") ends on its total.
  ends = [line for line in diff.stderr.splitlines()
          if re.match(r"reading pets/1\.0\.0: 100%\|.*\| 30/30 ", line)]
  assert len(ends) == 2, diff.stderr


def test_a_flag_value_that_starts_with_dashes_is_a_value_not_a_flag(tmp_path):
  # `--description "-- holiday photos --"` was refused as an unknown flag by the check that
  # answers typos (argparse takes such a value: it holds a space).
  result = cli_runs.in_process("build", tmp_path / "missing", "--name", "pets",
                               "--description", "-- holiday photos --")
  assert result.returncode != 0 and "unrecognized argument" not in result.stderr
  assert "missing" in result.stderr.strip().splitlines()[-1]
