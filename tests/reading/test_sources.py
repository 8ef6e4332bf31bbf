"""sources: how a version named on the command line is opened (`open_named`)."""

import shutil

import pytest

from imagesets.reading import sources
from imagesets.storage import versions


def test_a_name_is_read_in_the_data_dir_unless_a_folder_here_is_named(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert sources._readings("pets:1.0.0", "/data") == ([("pets:1.0.0", "/data")], 0)
  assert sources._readings("pets/small:1.0.0", "/data") == ([("pets/small:1.0.0", "/data")], 0)
  (tmp_path / "builds" / "pets").mkdir(parents=True)
  # DATA_DIR/NAME:VERSION, DATA_DIR/NAME/CONFIG:VERSION, then NAME/CONFIG:VERSION in the
  # data dir, whose error is shown when none opens
  assert sources._readings("builds/pets:1.0.0", "/data") == (
      [("pets:1.0.0", "./builds"), ("builds/pets:1.0.0", "."), ("builds/pets:1.0.0", "/data")], 2)
  assert sources._readings("s3://team/tfds/pets/small:1.0.0/", "/data") == (
      [("small:1.0.0", "s3://team/tfds/pets"), ("pets/small:1.0.0", "s3://team/tfds")], 0)
  assert sources._readings("/builds/pets:1.0.0", "/data") == (
      [("pets:1.0.0", "/builds")], 0)


def test_a_version_opens_by_name_or_by_its_whole_path_and_a_wrong_one_says_which(
    tiny_data_dir, tmp_path, monkeypatch):
  spec = "synthetic_images/tiny:1.0.0"
  by_name = sources.open_named(spec, str(tiny_data_dir))
  assert by_name.builder.info.full_name == "synthetic_images/tiny/1.0.0"
  here = tmp_path / "here"
  shutil.copytree(tiny_data_dir, here / "builds")
  monkeypatch.chdir(here)
  for text in (f"builds/{spec}", f"{here}/builds/{spec}", f"./builds/{spec}"):
    opened = sources.open_named(text, "/nowhere")
    assert opened.builder.info.full_name == "synthetic_images/tiny/1.0.0", text
  with pytest.raises(versions.DatasetNotPreparedError) as error:
    sources.open_named("builds/synthetic_images/tiny:9.9.9", "/nowhere")
  assert "9.9.9" in str(error.value)
