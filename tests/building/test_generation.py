"""generation + builder_base: the same per-example work, problems and notes, locally and on Beam."""

import dataclasses
import itertools
import os
import pathlib
import pickle

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from conftest import beam_download_config, records_by_split
from imagesets.building import builder_base
from imagesets.building import generation
from imagesets.building import parallel_map
from imagesets.building import problems
from imagesets.reports import dataset_card

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
  # Workers are separate processes: they must be able to import this module and conftest.
  monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
      [str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
  return beam_download_config()


def test_local_and_beam_builds_hold_the_same_records_problems_and_notes(tmp_path, monkeypatch):
  monkeypatch.setattr(Toy, "SKIP_BAD", True)
  local = Toy(data_dir=tmp_path / "local")
  local.download_and_prepare()
  on_beam = Toy(data_dir=tmp_path / "beam")
  on_beam.download_and_prepare(download_config=_beam_config(monkeypatch))
  # (no images: the workers found no group, no finding, counted none)
  assert on_beam.report.known == ([], [], dataset_card.Tallies(), [])
  assert local.report == dataclasses.replace(on_beam.report, known=None)
  assert [p.where for p in local.report.problems] == [
      "test101", "test108", "test115", "test122", "test129",
      "train003", "train010", "train017", "train024"]
  assert list(local.report.notes) == ["test100", "test105", "test110", "test120", "test125",
                                      "train000", "train005", "train015", "train020", "train025"]
  assert records_by_split(local.data_path) == records_by_split(on_beam.data_path)
  assert len(records_by_split(local.data_path)["train"]) == 26
  assert not list((tmp_path / "beam").glob("**/_imagesets_report"))


def test_a_beam_build_with_a_cap_per_split_is_refused_in_one_line(tmp_path):
  """TFDS's Beam builds ignore max_examples_per_split: they would store the whole source."""
  builder = Toy(data_dir=tmp_path)
  with pytest.raises(ValueError, match=r"^toy/1.0.0: max_examples_per_split .* is not applied "
                                       r"by Beam builds, .* build locally .* or drop the cap"):
    builder.download_and_prepare(download_config=beam_download_config(max_examples_per_split=3))
  assert not builder.data_path.exists()


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


_SEEN = []


def _double_and_note(item):
  _SEEN.append(item)
  return {"value": item * 2}, None


def _splits(gen, sizes):
  return {name: gen.examples(name, [(f"{name}{i}", i + 100 * n) for i in range(size)],
                             _double_and_note)
          for n, (name, size) in enumerate(sizes.items())}


def test_workers_go_on_with_the_next_split_while_one_is_written(tmp_path):
  """In the order given (TFDS's), one stream runs over all splits: by the time a split's
  last example is handed over, the next split's items are already being worked on."""
  import time
  with parallel_map.executor(2, threads=True) as pool:
    gen = generation.Generation(use_beam=False, data_dir=tmp_path, pool=pool)
    splits = _splits(gen, {"a": 40, "b": 40, "c": 5})
    _SEEN.clear()
    first = [example["value"] for _, example in splits["a"]]
    time.sleep(0.5)  # TFDS writing split a's shards
    assert any(item >= 100 for item in _SEEN)  # split b started meanwhile
    rest = {name: [example["value"] for _, example in splits[name]] for name in ("b", "c")}
  assert first == [2 * i for i in range(40)]
  assert rest == {"b": [2 * (100 + i) for i in range(40)], "c": [2 * (200 + i) for i in range(5)]}
  assert not gen._unfinished


@pytest.mark.parametrize("order", [("b", "a", "c"), ("a", "c", "b")])
def test_splits_asked_for_in_another_order_still_get_their_own_items(tmp_path, order):
  with parallel_map.executor(2) as pool:
    gen = generation.Generation(use_beam=False, data_dir=tmp_path, pool=pool)
    splits = _splits(gen, {"a": 40, "b": 33, "c": 5})
    got = {name: [key for key, _ in splits[name]] for name in order}
  assert got == {name: [f"{name}{i}" for i in range(size)]
                 for name, size in {"a": 40, "b": 33, "c": 5}.items()}


def test_a_split_stopped_early_does_not_shift_the_next_splits_items(tmp_path):
  """TFDS stops reading a split early with --max_examples_per_split: the shared stream is
  then out of step, and the following splits must still get exactly their own items."""
  with parallel_map.executor(2) as pool:
    gen = generation.Generation(use_beam=False, data_dir=tmp_path, pool=pool)
    splits = _splits(gen, {"a": 40, "b": 33, "c": 5})
    first = [key for key, _ in itertools.islice(splits["a"], 3)]
    rest = {name: [key for key, _ in splits[name]] for name in ("b", "c")}
  assert first == ["a0", "a1", "a2"]
  assert rest == {"b": [f"b{i}" for i in range(33)], "c": [f"c{i}" for i in range(5)]}


def test_max_examples_per_split_builds_each_split_from_its_own_items(tmp_path):
  builder = Toy(data_dir=tmp_path)
  builder.SKIP_BAD = True
  builder.download_and_prepare(
      download_config=tfds.download.DownloadConfig(max_examples_per_split=4))
  values = {split: sorted(int(tf.train.Example.FromString(r).features.feature["value"]
                              .int64_list.value[0]) for r in records)
            for split, records in records_by_split(builder.data_dir).items()}
  assert values == {"train": [0, 2, 4, 8], "test": [200, 204, 206, 208]}  # 3, 101 cursed


def test_an_empty_split_error_survives_pickling_with_its_splits_and_message():
  """It crosses process boundaries (Beam workers, worker pools): its one argument is not
  its message."""
  error = generation.EmptySplitError({"train": (["c/0.jpg", "c/3.jpg"], 0)}).joined(
      [generation.EmptySplitError({"test": (["c/1.jpg"], 2)})])
  back = pickle.loads(pickle.dumps(error))
  assert type(back) is generation.EmptySplitError
  assert back.empty == {"train": (["c/0.jpg", "c/3.jpg"], 0), "test": (["c/1.jpg"], 2)}
  assert str(back) == str(error) == (
      "splits 'train', 'test' have no examples left: train: 2 bad file(s) skipped (c/0.jpg, "
      "c/3.jpg); test: 1 bad file(s) skipped (c/1.jpg), 2 dropped as copies of images of an "
      "earlier split (leakage=drop); repair or replace them, add images, or change the split "
      "proportions or seed")


def test_a_library_build_draws_no_progress_bar_and_follows_tfds_switch(tmp_path, capfd,
                                                                        monkeypatch):
  # A script's or a test's build drew a bar of carriage-return redraws into its log, and
  # tfds.disable_progress_bar() did not stop it.
  import imagesets  # noqa: F401  (registers the builders)
  tfds.builder("synthetic_images/tiny", data_dir=str(tmp_path)).download_and_prepare()
  assert "building synthetic_images" not in capfd.readouterr().err
  assert not generation.shows_progress()  # (not a command-line program, not a terminal)
  from imagesets.console import cli_process
  monkeypatch.setattr(cli_process, "is_cli_process", lambda: True)
  assert generation.shows_progress()
  monkeypatch.setattr(generation.tfds_internals, "progress_bars_on", lambda: False)
  assert not generation.shows_progress()  # (tfds.disable_progress_bar(): test_tfds_internals)
