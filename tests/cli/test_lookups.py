"""Issue 37: a name, version, data dir or bucket prefix that is not there, through the
`imagesets` command as a user runs it: one line saying what is there and the command that
builds or publishes it (never TFDS's errors, never a silent empty answer)."""

import pytest

import cli_runs
from imagesets.cli import exit_status
from imagesets.cli import main as cli
from imagesets.publishing import publish
from imagesets_testing import photo_datasets
from publish_helpers import TINY


# (what is said and the exit status, not a process's start: in this process)
imagesets = cli_runs.in_process


def error_line(result, status=exit_status.NOT_FOUND) -> str:
  """The one line of an error (the last of stderr: TensorFlow may log before it)."""
  assert result.returncode == status, (result.returncode, result.stdout, result.stderr)
  assert "Traceback" not in result.stderr and "DatasetInfoFileError" not in result.stderr
  lines = result.stderr.strip().splitlines()
  assert [line for line in lines if line.startswith("imagesets")] == lines[-1:], result.stderr
  return lines[-1]


@pytest.fixture(scope="module")
def pets(tmp_path_factory):
  """(data_dir, source folder, bucket) of pets:1.0.0, a folder dataset as `imagesets build`
  builds it, also published to a bucket that is a folder."""
  base = tmp_path_factory.mktemp("lookups")
  data_dir, source = photo_datasets.pets(base)
  publish.publish("pets:1.0.0", str(data_dir), str(base / "bucket"), progress=False)
  return data_dir, source, base / "bucket"


def test_verify_duplicates_and_publish_of_a_missing_version_say_what_is_there(pets):
  data_dir, source, bucket = pets
  expected = (f"imagesets: error: pets:9.9.9 is not prepared in {data_dir} (prepared there: "
              f"pets:1.0.0); build it: imagesets build {source} --name pets --version 9.9.9 "
              f"--data-dir {data_dir}")
  assert error_line(imagesets("verify", "pets:9.9.9", "--data-dir", data_dir,
                              "--source", source)) == expected
  assert error_line(imagesets("duplicates", "pets:9.9.9", "--data-dir", data_dir)) == expected
  assert error_line(imagesets("publish", "pets:9.9.9", "--data-dir", data_dir,
                              "--to", bucket)) == expected
  assert error_line(imagesets("verify", "petz:1.0.0", "--data-dir", data_dir, "--source",
                              source)).endswith(
      "(datasets there: pets); did you mean pets? (or build a new dataset petz: imagesets "
      f"build PATH --name petz --version 1.0.0 --data-dir {data_dir})")


def test_fetch_of_an_unpublished_version_lists_the_published_ones(pets, tmp_path):
  _, _, bucket = pets
  assert error_line(imagesets("fetch", bucket, "pets:1.1.0", "--cache-dir", tmp_path)) == (
      f"imagesets: error: pets:1.1.0 is not published at {bucket} (published there: "
      f"pets:1.0.0); publish it: imagesets publish pets:1.1.0 --data-dir DATA_DIR --to {bucket}")


def test_diff_opens_both_versions_before_reading_either(pets, monkeypatch, capsys):
  data_dir, _, _ = pets
  result = imagesets("diff", "pets:1.0.0", "pets:9.9.9", "--data-dir", data_dir)
  assert error_line(result).startswith(
      f"imagesets: error: pets:9.9.9 is not prepared in {data_dir} (prepared there: pets:1.0.0)")
  from imagesets.reports import version_examples
  read = []
  monkeypatch.setattr(version_examples, "every_example",
                      lambda source, what: read.append(source) or iter(()))
  assert cli.main(["diff", "pets:1.0.0", "pets:9.9.9", "--data-dir", str(data_dir)]) == exit_status.NOT_FOUND
  assert read == []  # pets:1.0.0 was not read before pets:9.9.9 was found missing
  assert "pets:9.9.9 is not prepared" in capsys.readouterr().err


def test_list_of_a_folder_that_does_not_exist_is_an_error_an_empty_one_is_not(pets, tmp_path):
  data_dir, _, bucket = pets
  typo = data_dir.parent / "tdfs"
  assert error_line(imagesets("list", "--data-dir", typo)) == (
      f"imagesets: error: {typo} does not exist (did you mean {data_dir}?); build into it: "
      f"imagesets build PATH --name NAME --data-dir {typo}")
  assert error_line(imagesets("list", tmp_path / "nowhere")).startswith(
      f"imagesets: error: {tmp_path / 'nowhere'} does not exist; publish into it: ")
  (tmp_path / "empty").mkdir()
  for args, said in ((["--data-dir", tmp_path / "empty"], "no prepared datasets in"),
                     ([tmp_path / "empty"], "no published datasets in")):
    listed = imagesets("list", *args)
    assert listed.returncode == 0 and listed.stdout.strip() == f"{said} {tmp_path / 'empty'}"


@pytest.mark.parametrize("bucket_url", ["s3"], indirect=True)
def test_list_of_a_bucket_prefix_with_nothing_under_it_is_an_error(bucket_url, tiny_data_dir):
  publish.publish(TINY, str(tiny_data_dir), bucket_url, progress=False)
  typo = bucket_url.removesuffix("/tfds") + "/tdfs"
  assert error_line(imagesets("list", typo)) == (
      f"imagesets: error: {typo} does not exist (did you mean {bucket_url}?); publish into "
      f"it: imagesets publish NAME:VERSION --data-dir DATA_DIR --to {typo}")
  assert imagesets("list", bucket_url).returncode == 0


def test_the_command_named_builds_what_was_asked_or_none_is_named(pets, tmp_path):
  # Review: a config the builder lacks, a version it does not make, a TFDS catalog name and
  # a version out of the pattern each got a command that fails.
  data_dir, _, _ = pets
  said = error_line(imagesets("duplicates", "synthetic_images/small", "--data-dir", data_dir))
  assert ("synthetic_images has no config small (its configs: default, tiny, variable; did "
          "you mean synthetic_images/" in said and "tfds build" not in said), said
  said = error_line(imagesets("duplicates", "synthetic_images/tiny:9.0.0", "--data-dir",
                              data_dir))
  assert "this code builds synthetic_images 1.0.0, not 9.0.0" in said and "tfds build" not in said
  said = error_line(imagesets("duplicates", "mnist:3.0.1", "--data-dir", data_dir))
  assert said.endswith(f"build it: tfds build mnist --data_dir {data_dir}"), said
  said = error_line(imagesets("duplicates", "pets:01.0.0", "--data-dir", data_dir))
  assert "01.0.0 is not a version X.Y.Z" in said and "--version 01.0.0" not in said


def test_names_from_a_listing_that_are_not_plain_are_never_shown(pets, tmp_path):
  # A folder bucket holding a dataset folder named with a newline and a fake message: the
  # answer stays one line.
  _, _, bucket = pets
  evil = tmp_path / "bucket"
  import shutil
  shutil.copytree(bucket, evil)
  shutil.copytree(evil / "pets", evil / "pets\nimagesets: ok, nothing wrong")
  result = imagesets("fetch", evil, "petz:1.0.0", "--cache-dir", tmp_path / "cache", "--quiet")
  said = error_line(result)
  assert "nothing wrong" not in result.stderr and "(datasets there: pets); did you mean pets?" in said, said


def test_the_default_data_dir_spelled_out_is_the_default_data_dir(tmp_path):
  # Review: `list` said "no prepared datasets" (exit 0) for the default data dir before a
  # first build, but "does not exist" (exit 2) for the same folder given by its path.
  # (HOME is read when TFDS is imported: a process of its own)
  for args in (["list"], ["list", "--data-dir", tmp_path / "tensorflow_datasets"],
               ["list", "--data-dir", "~/tensorflow_datasets"]):
    result = cli_runs.command(*args, env={"HOME": str(tmp_path)}, timeout=120)
    assert result.returncode == 0, (args, result.stderr)
