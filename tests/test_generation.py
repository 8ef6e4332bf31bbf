"""generation + builder_base: the same per-example work, problems and notes, locally and on Beam."""

import os
import pathlib

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from conftest import beam_download_config, records_by_split
from imagesets import builder_base
from imagesets import generation
from imagesets import problems

HERE = pathlib.Path(__file__).parent


def cursed_every_seventh(item):
  if item % 7 == 3:
    raise generation.BadItem(f"value {item} is cursed")
  return {"value": item * 2}, ("a multiple of five" if item % 5 == 0 else None)


class Toy(builder_base.ImageSetBuilder):
  """Not under `imagesets.`, so never registered; items 0-29 (train) and 100-129 (test)."""

  VERSION = tfds.core.Version("1.0.0")
  SKIP_BAD = False
  RANGES = {"train": range(0, 30), "test": range(100, 130)}

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self, features=tfds.features.FeaturesDict({"value": np.int64}))

  def _split_generators(self, dl_manager):
    return {split: self.generation.examples(split, [(f"{split}{i:03d}", i) for i in values],
                                            cursed_every_seventh)
            for split, values in self.RANGES.items()}

  def _generate_examples(self):
    raise NotImplementedError  # _split_generators uses self.generation

  def _finish_generation(self, report):
    self.report = report
    if not self.SKIP_BAD:
      problems.raise_if_any(report.problems, source="toy source", fix="uncurse them")


def _beam_config(monkeypatch):
  # Workers are separate processes: they must be able to import this module.
  monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
  return beam_download_config()


def test_local_and_beam_builds_hold_the_same_records_problems_and_notes(tmp_path, monkeypatch):
  monkeypatch.setattr(Toy, "SKIP_BAD", True)
  local = Toy(data_dir=tmp_path / "local")
  local.download_and_prepare()
  on_beam = Toy(data_dir=tmp_path / "beam")
  on_beam.download_and_prepare(download_config=_beam_config(monkeypatch))
  assert local.report == on_beam.report
  assert [p.where for p in local.report.problems] == [
      "test101", "test108", "test115", "test122", "test129",
      "train003", "train010", "train017", "train024"]
  assert list(local.report.notes) == ["test100", "test105", "test110", "test120", "test125",
                                      "train000", "train005", "train015", "train020", "train025"]
  assert records_by_split(local.data_path) == records_by_split(on_beam.data_path)
  assert len(records_by_split(local.data_path)["train"]) == 26
  assert not list((tmp_path / "beam").glob("**/_imagesets_report"))


def test_beam_build_reports_every_problem_and_leaves_nothing(tmp_path, monkeypatch):
  with pytest.raises(problems.InvalidSourceError) as caught:
    Toy(data_dir=tmp_path).download_and_prepare(download_config=_beam_config(monkeypatch))
  assert len(caught.value.problems) == 9
  assert "train017: value 17 is cursed" in str(caught.value)
  assert "Fix: uncurse them" in str(caught.value)
  assert not list(tmp_path.glob("toy/*/*.tfrecord*"))


def test_local_build_reports_every_problem(tmp_path):
  with pytest.raises(problems.InvalidSourceError, match=r"9 problem\(s\) in toy source"):
    Toy(data_dir=tmp_path).download_and_prepare()
  assert not (tmp_path / "toy" / "1.0.0").exists()


def test_a_split_without_good_items_still_reports_every_split(tmp_path, monkeypatch):
  # TFDS stops at the first split that yields nothing; the other split is checked anyway.
  monkeypatch.setattr(Toy, "RANGES", {"train": [3, 10], "test": range(100, 130)})
  with pytest.raises(problems.InvalidSourceError) as caught:
    Toy(data_dir=tmp_path).download_and_prepare()
  assert [p.where for p in caught.value.problems] == [
      "test101", "test108", "test115", "test122", "test129", "train003", "train010"]
