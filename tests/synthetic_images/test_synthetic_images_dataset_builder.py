"""synthetic_images: TFDS's builder checks, then exact round trips of every example."""

import hashlib
import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import cli_runs
import imagesets  # noqa: F401
from imagesets.building import duplicate_report
from imagesets.synthetic_images import synthetic_images_dataset_builder as synthetic
from imagesets.reports import dataset_card
from imagesets.analysis import duplicates
from imagesets.reports import report_page
from imagesets.reports import version_examples


class TinyBuilderTest(tfds.testing.DatasetBuilderTestCase):
  DATASET_CLASS = synthetic.Builder
  BUILDER_CONFIG_NAMES_TO_TEST = ["tiny"]
  SPLITS = {"train": 12, "test": 4}


def _config(name):
  return synthetic.Builder.builder_configs[name]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return tmp_path_factory.mktemp("tfds")


@pytest.mark.parametrize("config_name", ["tiny", "variable", "default"])
def test_round_trip_equals_the_generator(config_name, data_dir):
  config = _config(config_name)
  builder = tfds.builder(f"synthetic_images/{config_name}", data_dir=data_dir)
  builder.download_and_prepare()
  for split_id, (split, count) in enumerate([("train", config.num_train), ("test", config.num_test)]):
    assert builder.info.splits[split].num_examples == count
    ds = tfds.load(f"synthetic_images/{config_name}", split=split, data_dir=data_dir,
                   download=False, with_info=False)
    # TFDS stores examples in hashed-key order: match them by content.
    by_content = {loaded["image"].tobytes(): loaded for loaded in tfds.as_numpy(ds)}
    seen = 0
    for index in range(count):
      expected = synthetic.make_example(config, split_id, index)
      pixels = tf.io.decode_png(expected["image"]).numpy()
      loaded = by_content.pop(pixels.tobytes())
      assert loaded["label"] == expected["label"]
      assert (loaded["height"], loaded["width"]) == pixels.shape[:2] == (expected["height"], expected["width"])
      seen += 1
    assert seen == count and not by_content
  # The page, drawn from the build's own fingerprints, is the one the version's stored
  # examples give, example by example in stored order across the shards.
  assert len(builder.info.splits["train"].filenames) > 1
  out = data_dir / f"{config_name}.html"
  assert cli_runs.in_process("report", f"synthetic_images/{config_name}", "--data-dir",
                             data_dir, "--recompute", "--out", out).returncode == 0
  assert out.read_bytes() == (builder.data_path / report_page.PAGE_FILE).read_bytes()


def test_variable_config_draws_sizes_from_its_range():
  config = _config("variable")
  shapes = {synthetic.make_example(config, 0, i)["height"] for i in range(config.num_train)}
  assert min(shapes) >= config.height[0] and max(shapes) <= config.height[1]
  assert len(shapes) > 20  # really variable
  assert synthetic.Builder(config="variable").info.features["image"].shape == (None, None, 3)


def test_default_config_matches_the_tutorial_dataset():
  info = synthetic.Builder(config="default").info
  assert info.features["image"].shape == (224, 224, 3)
  assert info.features["label"].num_classes == 10
  config = _config("default")
  assert config.num_train + config.num_test == 1000
  labels = {synthetic.make_example(config, 0, i)["label"] for i in range(200)}
  assert labels == set(range(10))


def test_examples_do_not_depend_on_global_random_state():
  config = _config("tiny")
  np.random.seed(1)
  first = synthetic.make_example(config, 0, 3)
  np.random.seed(2)
  assert synthetic.make_example(config, 0, 3) == first
  assert synthetic.make_example(config, 0, 4) != first
  assert synthetic.make_example(config, 1, 3) != first


def test_a_build_of_distinct_random_images_reports_no_duplicates(tiny_data_dir):
  """Every build's report and card, beside dataset_info.json: the 16 seeded random images
  of `tiny` are all different, and the report says so."""
  builder = tfds.builder("synthetic_images/tiny", data_dir=tiny_data_dir)
  report = json.loads((builder.data_path / duplicates.REPORT_FILE).read_text())
  assert (report["groups"], report["num_images"], report["num_cross_split"],
          report["num_label_conflicts"], report["dropped"]) == ([], 16, 0, 0, [])
  card = (builder.data_path / dataset_card.CARD_FILE).read_text()
  assert "duplicates: none among 16 images." in card, card
  assert "| **total** | 12 | 4 |" in card and "Formats: png 16" in card, card


def test_the_build_fingerprints_its_images_report_and_card_beside_dataset_info(
    tmp_path, monkeypatch):
  """Like every builder's: test image 0 made a copy of train image 0 (the generator never
  repeats one) is found as an exact group across splits (leakage), in the report, the card
  and the build's closing line (a warning, as a leak is)."""
  make_example = synthetic.make_example
  monkeypatch.setattr(synthetic, "make_example", lambda config, split_id, index: make_example(
      config, 0 if (split_id, index) == (1, 0) else split_id, index))
  said = []
  monkeypatch.setattr(duplicate_report.logging, "warning",
                      lambda message, *args: said.append(message % args))
  read_again = []  # the page takes the build's fingerprints: none computed from the version
  fingerprints = version_examples.fingerprints
  monkeypatch.setattr(version_examples, "fingerprints",
                      lambda source: read_again.append(1) or fingerprints(source))
  builder = tfds.builder("synthetic_images/tiny", data_dir=tmp_path)
  builder.download_and_prepare()
  assert read_again == []
  # ... and draws the page the version's own examples give (`report --recompute`).
  out = tmp_path / "page.html"
  result = cli_runs.in_process("report", "synthetic_images/tiny", "--data-dir", tmp_path,
                               "--recompute", "--out", out)
  assert result.returncode == 0 and read_again == [1], result.stderr[-3000:]
  assert out.read_bytes() == (builder.data_path / report_page.PAGE_FILE).read_bytes()
  assert 'train[0]' in out.read_text() and 'test[0]' in out.read_text()
  report = json.loads((builder.data_path / duplicates.REPORT_FILE).read_text())
  assert report["num_images"] == 16 and report["num_cross_split"] == 1
  assert [[(m["split"], m["file_name"]) for m in g["members"]] for g in report["groups"]] == [
      [("train", "0"), ("test", "0")]]
  card = (builder.data_path / dataset_card.CARD_FILE).read_text()
  assert "## Examples per split and class" in card and "png 16" in card, card
  assert "1 group(s) (1 exact, 0 near) among 16 images; 1 cross splits" in card, card
  assert said == ["synthetic_images/tiny/1.0.0: duplicates: 1 group(s) (1 exact, 0 near) "
                  "among 16 images; 1 cross splits (leakage): train/0 = test/0; no quality findings"], said


def test_shards_are_the_bytes_of_the_builder_yielding_its_examples_to_tfds(tmp_path):
  """Made on the workers through `generation`, the records are the ones synthetic_images
  wrote when it yielded its examples to TFDS (tests/building/test_prepared_records.py: those
  are TFDS's own writer's bytes), shard by shard."""
  import yielding_synthetic

  def shards(builder):
    builder.download_and_prepare()
    return {path.name: path.read_bytes()
            for path in sorted(pathlib.Path(builder.data_dir).glob("*.tfrecord-*"))}

  ours = shards(tfds.builder("synthetic_images/tiny", data_dir=tmp_path / "ours"))
  assert len(ours) == 8
  assert ours == shards(yielding_synthetic.Builder(config="tiny", data_dir=tmp_path / "yielded"))


def test_the_examples_of_a_version_never_change(tmp_path):
  """synthetic_images/tiny 1.0.0's examples, as every build since its first has made them
  (pixels, labels, sizes, in stored order), pinned: a change of seed, order or size rule is a
  new version. Decoded pixels, so that another PNG encoder's bytes would not fail it."""
  builder = tfds.builder("synthetic_images/tiny", data_dir=tmp_path)
  builder.download_and_prepare()
  digest = hashlib.sha256()
  for split in ("train", "test"):
    for example in tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)):
      digest.update(f"{split} {example['label']} {example['height']} {example['width']} "
                    .encode() + example["image"].tobytes())
  assert digest.hexdigest() == (
      "aa4945e4c2eff238df908049cc4ebca5181e1c86e2bb5e3bce8022244c4eab46")
