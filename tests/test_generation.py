"""generation: the same per-example work and problem report, locally and on Beam."""

import os
import pathlib

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from imagesets import generation
from imagesets import problems

HERE = pathlib.Path(__file__).parent


def cursed_every_seventh(item):
  if item % 7 == 3:
    raise generation.BadItem(f"value {item} is cursed")
  return {"value": item * 2}


class Toy(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  VERSION = tfds.core.Version("1.0.0")
  SKIP_BAD = False

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self, features=tfds.features.FeaturesDict({"value": np.int64}))

  def _generate_splits(self, dl_manager, download_config):
    self.generation = generation.Generation(
        use_beam=download_config.beam_options is not None, workers=2, data_dir=self.data_path)
    split_infos = super()._generate_splits(dl_manager, download_config)
    self.skipped = self.generation.finish(source="toy source", fix="uncurse them",
                                          skip_bad=self.SKIP_BAD)
    return split_infos

  def _split_generators(self, dl_manager):
    return {split: self.generation.examples(split, [(f"{split}{i:03d}", i) for i in range(start, start + 30)],
                                            cursed_every_seventh)
            for split, start in [("train", 0), ("test", 100)]}

  def _generate_examples(self):
    raise NotImplementedError  # _split_generators uses generation.examples


def _beam_config(monkeypatch):
  beam = pytest.importorskip("apache_beam")
  # Workers are separate processes: they must be able to import this module.
  monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
  options = beam.options.pipeline_options.PipelineOptions(
      ["--direct_num_workers=2", "--direct_running_mode=multi_processing"])
  return tfds.download.DownloadConfig(beam_options=options)


def _records(builder):
  """{split: sorted serialized records}, read straight from the shards."""
  out = {}
  for split in builder.info.splits:
    files = sorted(str(p) for p in builder.data_path.glob(f"*-{split}.tfrecord-*"))
    out[split] = sorted(r.numpy() for r in tf.data.TFRecordDataset(files))
  return out


def test_local_and_beam_builds_hold_the_same_records(tmp_path, monkeypatch):
  Toy.SKIP_BAD = True
  try:
    local = Toy(data_dir=tmp_path / "local")
    local.download_and_prepare()
    on_beam = Toy(data_dir=tmp_path / "beam")
    on_beam.download_and_prepare(download_config=_beam_config(monkeypatch))
  finally:
    Toy.SKIP_BAD = False
  assert local.skipped == on_beam.skipped
  assert [p.where for p in local.skipped] == ["test101", "test108", "test115", "test122", "test129",
                                              "train003", "train010", "train017", "train024"]
  assert _records(local) == _records(on_beam)
  assert len(_records(local)["train"]) == 26
  assert not (on_beam.data_path / "_imagesets_problems").exists()


def test_beam_build_reports_every_problem_and_leaves_nothing(tmp_path, monkeypatch):
  builder = Toy(data_dir=tmp_path)
  with pytest.raises(problems.InvalidSourceError) as caught:
    builder.download_and_prepare(download_config=_beam_config(monkeypatch))
  assert len(caught.value.problems) == 9
  assert "train017: value 17 is cursed" in str(caught.value)
  assert "Fix: uncurse them" in str(caught.value)
  assert not list(tmp_path.glob("toy/*/*.tfrecord*"))


def test_local_build_reports_every_problem(tmp_path):
  with pytest.raises(problems.InvalidSourceError, match=r"9 problem\(s\) in toy source"):
    Toy(data_dir=tmp_path).download_and_prepare()
  assert not (tmp_path / "toy" / "1.0.0").exists()
