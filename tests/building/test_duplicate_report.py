"""Duplicates at every build: the report and card beside dataset_info.json, the closing line,
and leakage="warn" | "error" | "drop" | "off" (CLI and config)."""

import json

import pytest
import tensorflow_datasets as tfds

import cli_runs
from conftest import records_by_split
from gated_pool import GatedPool
from imagesets.building import class_folders_builder
from imagesets.building import prepared_records
from imagesets.building import splits
from imagesets.class_folders import named_build
from imagesets.analysis import duplicates
from imagesets_testing import planted_copies
from imagesets_testing import sample_images
from imagesets_testing.trees import write_tree

PROPORTIONS = {"train": 0.5, "test": 0.5}


def _name_in(split: str, stem: str) -> str:
  """A file name of class cat that the seeded split hash puts in `split`."""
  for n in range(100):
    name = f"cat/{stem}_{n}.jpg"
    if name in splits.assign([name, "cat/x.jpg"], PROPORTIONS, seed=0)[split]:
      return name
  raise AssertionError


def _tree(tmp_path):
  """8 distinct photos; photo 0 copied (same pixels, other bytes) into the split it is not
  in, photo 1 (a dog) re-encoded at quality 60 under the cat label in its own split."""
  photos = {f"{label}/{i}.jpg": sample_images.photo(90 + 4 * i, 120, seed=70 + i)
            for i, label in enumerate(["cat", "dog"] * 4)}
  files = {name: planted_copies.original(pixels) for name, pixels in photos.items()}
  assigned = splits.assign(list(files), PROPORTIONS, seed=0)
  home = next(s for s, names in assigned.items() if "cat/0.jpg" in names)
  other = "test" if home == "train" else "train"
  leak = _name_in(other, "leak")
  files[leak] = planted_copies.exact(photos["cat/0.jpg"])
  dog_split = next(s for s, names in assigned.items() if "dog/1.jpg" in names)
  files[_name_in(dog_split, "conflict")] = planted_copies.jpeg_q60(photos["dog/1.jpg"])
  return write_tree(tmp_path / "tree", files), home, other, leak


def _build(root, data_dir, leakage=""):
  options = class_folders_builder.ClassFoldersConfig(
      name="pets", split_proportions=PROPORTIONS, leakage=leakage)
  return named_build.build(root, "pets", data_dir=str(data_dir), options=options)


def test_warn_stores_the_report_and_card_and_the_closing_line_names_the_leak(tmp_path):
  root, home, other, leak = _tree(tmp_path)
  # (the tree plants its leak by the path split key: versions before split keys)
  result = cli_runs.in_process("build", root, "--name", "pets", "--splits",
                               "train=0.5,test=0.5", "--data-dir", tmp_path / "d",
                               "--split-key", "path")
  assert result.returncode == 0, result.stderr
  closing = result.stdout.strip().splitlines()[-3]   # (then its page, and how to load it)
  assert closing.startswith("pets:1.0.0 in") and closing.endswith(
      f"; duplicates: 2 group(s) (1 exact, 1 near) among 10 images; 1 cross splits (leakage): "
      f"{home}/cat/0.jpg = {other}/{leak}; 1 label conflict(s) (duplicates.json); "
      # (the generated photos are smooth colour fields: one has too few edges for a photo)
      "1 quality finding: 1 blurry (quality.json)")
  version = tmp_path / "d" / "pets" / "1.0.0"
  report = json.loads((version / duplicates.REPORT_FILE).read_text())
  assert sorted((g["kind"], g["cross_split"], g["label_conflict"]) for g in report["groups"]) == [
      ("exact", True, False), ("near", False, True)]
  card = (version / "README.md").read_text()
  assert "## Examples per split and class" in card and "1 label conflict(s)" in card
  metadata = tfds.builder_from_directory(version).info.metadata
  assert metadata["duplicates"]["num_cross_split"] == 1
  assert sum(s.num_examples for s in tfds.builder_from_directory(version).info.splits.values()) == 10


def test_error_stops_the_build_naming_both_files_before_any_record_is_written(
    tmp_path, monkeypatch):
  root, home, other, leak = _tree(tmp_path)
  written = []  # every record that reached the writer (it runs in this process)
  add = prepared_records._Spill.add
  monkeypatch.setattr(prepared_records._Spill, "add",
                      lambda spill, record: (written.append(len(record)), add(spill, record)))
  with pytest.raises(duplicates.LeakageError,
                     match=f"pets/1.0.0: 1 picture.*\n  {home}/cat/0.jpg = {other}/{leak}\n"):
    _build(root, tmp_path / "d", leakage="error")
  assert written == []
  assert not list((tmp_path / "d").rglob("*.tfrecord*"))
  assert not list((tmp_path / "d").glob("pets/*/dataset_info.json"))


def test_drop_keeps_the_earliest_splits_copy_and_lists_the_dropped(tmp_path):
  root, home, other, leak = _tree(tmp_path)
  builder = _build(root, tmp_path / "d", leakage="drop")
  version = tmp_path / "d" / "pets" / "1.0.0"
  report = json.loads((version / duplicates.REPORT_FILE).read_text())
  dropped = "cat/0.jpg" if home == "test" else leak
  assert report["dropped"] == [{"split": "test", "file_name": dropped, "label": "cat"}]
  stored = tfds.as_numpy(builder.as_dataset("test"))
  names = {example["file_name"].decode() for example in stored}
  assert dropped not in names and len(names) == builder.info.splits["test"].num_examples
  assert builder.info.splits["train"].num_examples + len(names) == 9
  assert builder.info.metadata["num_examples_per_class"] == {"cat": 5, "dog": 4}
  # The report and the card describe the version, not the tree it was built from.
  assert report["num_images"] == 9 and report["num_cross_split"] == 0
  card = (version / "README.md").read_text()
  assert (f"| **total** | {builder.info.splits['train'].num_examples} | {len(names)} |" in card
          and "jpeg 9" in card), card


def test_a_drop_that_would_empty_a_split_says_which(tmp_path):
  photos = [sample_images.photo(90, 120, seed=80 + i) for i in range(4)]
  files = {f"cat/{i}.jpg": planted_copies.original(p) for i, p in enumerate(photos)}
  files[_name_in("test", "copy")] = planted_copies.exact(photos[0])
  train_only = {n: b for n, b in files.items()
                if n.endswith("copy_0.jpg") or n.startswith("cat/copy")
                or n in splits.assign(list(files), PROPORTIONS, seed=0)["train"]}
  for name in set(files) - set(train_only):
    del files[name]
  root = write_tree(tmp_path / "tree", files)
  with pytest.raises(duplicates.LeakageError,
                     match="leakage=drop would leave split 'test' empty: its 1 image"):
    _build(root, tmp_path / "d", leakage="drop")


def test_off_fingerprints_nothing_and_a_bad_value_is_refused(tmp_path):
  root, *_ = _tree(tmp_path)
  _build(root, tmp_path / "d", leakage="off")
  assert not (tmp_path / "d" / "pets" / "1.0.0" / duplicates.REPORT_FILE).exists()
  with pytest.raises(ValueError, match="leakage='maybe': use one of warn, error, drop, off"):
    class_folders_builder.ClassFoldersConfig(name="x", root=root, leakage="maybe")


def _copies_tree(tmp_path, *, cross_split: bool) -> str:
  """12 distinct photos in c0/c1 and an exact copy of 6 of them (`N.jpg` and `Na.jpg`: next
  to each other in key order); `cross_split=False` keeps only the copies in their
  original's split."""
  photos = {i: sample_images.photo(40, 48, seed=100 + i) for i in range(12)}
  files = {f"c{i % 2}/{i}.jpg": planted_copies.original(photos[i]) for i in photos}
  copies = {f"c{i % 2}/{i}a.jpg": planted_copies.exact(photos[i]) for i in range(6)}
  if not cross_split:
    of = lambda name: splits.split_of(name, PROPORTIONS, 3)
    copies = {name: data for name, data in copies.items()
              if of(name) == of(name.replace("a.jpg", ".jpg"))}
  return write_tree(tmp_path / "tree", files | copies)


@pytest.mark.parametrize("leakage", ["drop", "warn", "error"])
def test_a_capped_build_stores_the_report_of_the_examples_it_stored(tmp_path, leakage):
  """--max_examples_per_split: TFDS stops each split after 4 examples; the report, the card
  and the metadata describe those, and `imagesets duplicates` reads the report back."""
  from imagesets.class_folders import class_folders_dataset_builder
  root = _copies_tree(tmp_path, cross_split=leakage != "error")
  builder = class_folders_dataset_builder.Builder(
      config=class_folders_dataset_builder.ClassFoldersConfig(
          name="capped", root=root, leakage=leakage, split_proportions=PROPORTIONS, seed=3),
      data_dir=tmp_path / "d")
  builder.download_and_prepare(
      download_config=tfds.download.DownloadConfig(max_examples_per_split=4))
  counts = {name: split.num_examples for name, split in builder.info.splits.items()}
  assert counts == {"train": 4, "test": 4}
  stored = {f"{split}/{example['file_name'].decode()}" for split in counts
            for example in tfds.as_numpy(builder.as_dataset(split))}
  # (seed 3 puts 0, 0a, 4, 4a first in train; 10, 2, 2a, 8 in test)
  pairs = {"train/c0/0.jpg", "train/c0/0a.jpg", "train/c0/4.jpg", "train/c0/4a.jpg",
           "test/c0/2.jpg", "test/c0/2a.jpg"}
  assert pairs < stored
  summary = duplicates.stored_summary(builder.data_path, counts)
  assert summary.startswith("duplicates: 3 group(s) (3 exact, 0 near) among 8 images; 0 cross")
  assert summary.endswith("; dropped 1 leaked example(s)") == (leakage == "drop")
  assert builder.info.metadata["duplicates"]["num_images"] == 8
  card = (builder.data_path / "README.md").read_text()
  assert "| **total** | 4 | 4 |" in card, card
  result = cli_runs.in_process("duplicates", "class_folders/capped:1.0.0", "--data-dir",
                               tmp_path / "d")
  assert result.returncode == 0, result.stderr
  lines = result.stdout.splitlines()
  assert {line.split()[0] for line in lines if line.startswith(("  train/", "  test/"))} == pairs
  dropped = [line.split()[4] for line in lines if line.startswith("dropped by the build: ")]
  assert len(dropped) == (leakage == "drop") and not set(dropped) & stored


def test_a_leak_past_the_cap_still_stops_an_error_build(tmp_path):
  """Under a cap, error decides on the whole source (docs/know_your_data.md): the capped
  version would hold no copy across splits (as its warn build shows), and it still stops."""
  from imagesets.class_folders import class_folders_dataset_builder
  root = _copies_tree(tmp_path, cross_split=True)
  capped = tfds.download.DownloadConfig(max_examples_per_split=4)

  def builder(leakage):
    return class_folders_dataset_builder.Builder(
        config=class_folders_dataset_builder.ClassFoldersConfig(
            name=f"capped{leakage}", root=root, leakage=leakage,
            split_proportions=PROPORTIONS, seed=3),
        data_dir=tmp_path / "d")

  warned = builder("warn")
  warned.download_and_prepare(download_config=capped)
  counts = {name: split.num_examples for name, split in warned.info.splits.items()}
  assert counts == {"train": 4, "test": 4}
  assert ("; 0 cross splits (leakage)"
          in duplicates.stored_summary(warned.data_path, counts))  # the leak is past the cap
  stored = {f"{split}/{example['file_name'].decode()}" for split in counts
            for example in tfds.as_numpy(warned.as_dataset(split))}
  assert not {"train/c1/3a.jpg", "test/c1/3.jpg"} & stored
  stopped = builder("error")
  with pytest.raises(duplicates.LeakageError, match=r"class_folders/cappederror/1.0.0: 1 pict.*\n"
                                                    r"  train/c1/3a.jpg = test/c1/3.jpg\n"):
    stopped.download_and_prepare(download_config=capped)
  assert not stopped.data_path.exists()


@pytest.mark.parametrize("versioned", [False, True])
def test_error_on_beam_stops_the_build_naming_both_files_from_the_workers_groups(
    tmp_path, monkeypatch, versioned):
  """On Beam the workers group the images (`beam_report`); the driver stops on their
  groups once the pipeline is done, before a version of a line (`versioned`) runs its
  record index's pipeline, and the failed build leaves no version nor folder."""
  from conftest import beam_download_config
  from imagesets.building import beam_index
  indexed = []
  monkeypatch.setattr(beam_index, "write", lambda *args, **kwargs: indexed.append(args) or {})
  root, home, other, leak = _tree(tmp_path)
  options = class_folders_builder.ClassFoldersConfig(
      name="pets", split_proportions=PROPORTIONS, leakage="error")
  with pytest.raises(duplicates.LeakageError) as stopped:
    named_build.build(root, "pets", data_dir=str(tmp_path / "d"), options=options,
                      versioned=versioned,
                      beam_options=beam_download_config(multi_processing=False).beam_options)
  # (a version of a line splits by content: the copy and its original change places)
  said = [f"{home}/cat/0.jpg = {other}/{leak}", f"{home}/{leak} = {other}/cat/0.jpg"]
  assert str(stopped.value).startswith("pets/1.0.0: 1 picture")
  assert f"\n  {said[versioned]}\n" in str(stopped.value)
  assert not list((tmp_path / "d").glob("pets/*/dataset_info.json"))
  assert not list((tmp_path / "d").glob("pets/*/*")) and not indexed


def test_drop_on_beam_writes_the_version_a_local_build_writes(tmp_path):
  """The workers decide what to drop and leave it out before TFDS's writers: the same
  records, report and card as the local build's."""
  from conftest import beam_download_config
  root, *_ = _tree(tmp_path)
  local = _build(root, tmp_path / "local", leakage="drop")
  options = class_folders_builder.ClassFoldersConfig(
      name="pets", split_proportions=PROPORTIONS, leakage="drop")
  on_beam = named_build.build(root, "pets", data_dir=str(tmp_path / "beam"), options=options,
                              beam_options=beam_download_config(workers=2).beam_options)
  assert records_by_split(on_beam.data_path) == records_by_split(local.data_path)
  for name in (duplicates.REPORT_FILE, "quality.json", "README.md"):
    assert (on_beam.data_path / name).read_bytes() == (local.data_path / name).read_bytes()
  assert len(json.loads((on_beam.data_path / duplicates.REPORT_FILE).read_text())["dropped"]) == 1
  assert on_beam.info.metadata["duplicates"] == local.info.metadata["duplicates"]


def test_a_drop_on_beam_that_would_empty_a_split_says_which(tmp_path):
  from conftest import beam_download_config
  photos = [sample_images.photo(90, 120, seed=80 + i) for i in range(4)]
  files = {f"cat/{i}.jpg": planted_copies.original(p) for i, p in enumerate(photos)}
  files[_name_in("test", "copy")] = planted_copies.exact(photos[0])
  for name in set(files) - {n for n in files if "copy" in n
                            or n in splits.assign(list(files), PROPORTIONS, seed=0)["train"]}:
    del files[name]
  root = write_tree(tmp_path / "tree", files)
  options = class_folders_builder.ClassFoldersConfig(
      name="pets", split_proportions=PROPORTIONS, leakage="drop")
  with pytest.raises(duplicates.LeakageError,
                     match="leakage=drop would leave split 'test' empty: its 1 image"):
    named_build.build(root, "pets", data_dir=str(tmp_path / "d"), options=options,
                      beam_options=beam_download_config(multi_processing=False).beam_options)
  assert not list((tmp_path / "d").glob("pets/*/dataset_info.json"))


@pytest.mark.parametrize("action", ["warn", "off"])
def test_the_callers_work_is_done_once_while_the_workers_group(tmp_path, monkeypatch, action):
  """`finish(meanwhile=)` (a build's record index, its file-hash cache): run once, with the
  bands handed to the workers and none of their work done; the reports are then those of
  a finish without workers, from the workers' picks (60 crops of two real photos, in
  bursts: groups)."""
  from imagesets.analysis import image_hashes
  from imagesets.building import duplicate_report
  from imagesets.building import generation
  from imagesets_testing import photo_crops
  images = [(duplicates.Member(("train", "test")[i % 2], f"{picture.scene}/{i:02d}.jpg",
                               picture.scene), image_hashes.of_bytes(data))
            for i, (picture, data) in enumerate(photo_crops.jpegs(60, seed=3, scenes=2,
                                                                   size=(160, 107)))]
  report = generation.Report([], {}, images)
  monkeypatch.setattr(duplicates, "_PICKED_APART", 10)
  pool, calls = GatedPool(), []

  def meanwhile():
    calls.append(list(pool.sent))
    pool.gate.set()

  (tmp_path / "pooled").mkdir()
  (tmp_path / "alone").mkdir()
  alone = duplicate_report.finish(report, tmp_path / "alone", action=action, title="t")
  picked = duplicates._picked  # (the workers' picks are the ones taken)
  monkeypatch.setattr(duplicates, "_picked", lambda *args: pytest.fail("picked here"))
  try:
    found = duplicate_report.finish(report, tmp_path / "pooled", action=action, title="t",
                                    pool=pool, meanwhile=meanwhile)
  finally:
    pool.gate.set()
    monkeypatch.setattr(duplicates, "_picked", picked)
  pool.threads.shutdown()
  if action == "off":
    assert calls == [[]] and found is None and not list((tmp_path / "pooled").iterdir())
    return
  assert calls == [["_picked_in", "_picked_in"]]  # (once, the picking handed out)
  assert pool.sent == ["_picked_in", "_picked_in"]
  assert found.groups == alone.groups and len(found.groups) >= 2
  for name in sorted(p.name for p in (tmp_path / "alone").iterdir()):
    assert (tmp_path / "pooled" / name).read_bytes() == (tmp_path / "alone" / name).read_bytes()
