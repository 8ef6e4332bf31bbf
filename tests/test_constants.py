"""One home per shared value: the data dir and the cache root, used by every caller."""

import pytest

from imagesets import constants
from imagesets.class_folders import from_directory
from imagesets.publishing import fetch
from imagesets.reading import input_pipeline, numpy_ops, preprocess_ops


def test_data_dir_expands_the_home_folder_tfds_does_not(monkeypatch, tmp_path):
  monkeypatch.setenv("HOME", str(tmp_path))
  assert constants.data_dir() == f"{tmp_path}/tensorflow_datasets"
  assert constants.data_dir("~/d") == f"{tmp_path}/d"
  # What the pipelines do with a data_dir: a missing build is looked for in the expanded one.
  with pytest.raises(input_pipeline.DatasetNotPreparedError, match=f"not prepared in {tmp_path}/d"):
    input_pipeline.open_builder("synthetic_images/tiny", "~/d")


def test_one_cache_root_for_fetched_versions_and_keras_style_builds(monkeypatch, tmp_path):
  monkeypatch.setenv("HOME", str(tmp_path))
  monkeypatch.delenv(constants.CACHE_ENV, raising=False)
  assert constants.cache_root() == tmp_path / ".cache" / "imagesets"
  monkeypatch.setenv(constants.CACHE_ENV, str(tmp_path / "c"))
  assert fetch.cache_root() == tmp_path / "c"
  assert from_directory.default_cache_dir() == tmp_path / "c" / "from_directory"


def test_pad_values_are_the_same_objects_everywhere():
  assert (preprocess_ops.MASK_PAD_VALUE, numpy_ops.MASK_PAD_VALUE) == (constants.MASK_PAD_VALUE,) * 2
  assert (preprocess_ops.IMAGE_PAD_VALUE, numpy_ops.IMAGE_PAD_VALUE) == (constants.IMAGE_PAD_VALUE,) * 2
