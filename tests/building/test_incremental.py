"""incremental: a version built on the one before keeps what did not change, byte for byte,
makes only the photos that did, and reads as a full build of the same tree would."""

import html
import io
import json
import os
import pathlib
import re
import shutil
import time

import numpy as np
import PIL.Image
import PIL.ImageOps
import pytest
import tensorflow_datasets as tfds

import imagesets  # noqa: F401
from imagesets.analysis import beam_components
from imagesets.building import builder_base
from imagesets.building import class_folders_builder
from imagesets.building import incremental
from imagesets.building import prepared_records
from imagesets.building import record_index
from imagesets.building import shard_hashes
from imagesets.building import stat_cache
from imagesets.class_folders import named_build
from imagesets.reports import report_page
from imagesets.verifying import round_trip
from imagesets.reports import version_diff
from imagesets.reports import version_examples
from imagesets.reports import version_report
from imagesets_testing import photo_crops
from imagesets_testing import sample_images

from conftest import beam_download_config

PHOTOS = 160


def decode(data: bytes) -> np.ndarray:
  return np.asarray(PIL.Image.open(io.BytesIO(data)).convert("RGB"))


def write_crops(root: pathlib.Path, count: int, seed: int, prefix: str) -> list[pathlib.Path]:
  """`count` real-photo crops (bursts of near copies among them), one class per scene."""
  paths = []
  for i, (picture, data) in enumerate(photo_crops.jpegs(count, seed=seed, size=(200, 150))):
    path = root / picture.scene / f"{prefix}_{i:04d}.jpg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    paths.append(path)
  return paths


def build(root, data_dir, version, **kwargs):
  return named_build.build(root, "pets", version=version, data_dir=str(data_dir),
                           versioned=True, from_version=kwargs.pop("from_version", named_build.LATEST),
                           **kwargs)


def examples(version_dir: pathlib.Path) -> dict[str, list]:
  """{split: sorted [(file name, label, image bytes)]} as stock TFDS reads the version
  (a list: a record written twice would show)."""
  builder = tfds.builder_from_directory(str(version_dir))
  label = builder.info.features["label"]
  out = {}
  for split in builder.info.splits:
    if builder.info.file_format == tfds.core.FileFormat.ARRAY_RECORD:
      rows = builder.as_data_source(split, decoders={"image": tfds.decode.SkipDecoding()})
    else:
      rows = tfds.as_numpy(builder.as_dataset(
          split, decoders={"image": tfds.decode.SkipDecoding()}))
    out[split] = sorted((e["file_name"].decode(), label.int2str(int(e["label"])),
                         bytes(e["image"])) for e in rows)
    assert len(out[split]) == builder.info.splits[split].num_examples
  return out


def shards(version_dir: pathlib.Path) -> dict[str, bytes]:
  return {p.name: p.read_bytes() for p in sorted(version_dir.glob("pets-*.tfrecord-*"))}


def holding(version_dir: pathlib.Path, keys: set[str]) -> set[bytes]:
  """The bytes of the shards whose records include one of `keys`."""
  info = json.loads((version_dir / "dataset_info.json").read_text())
  found = set()
  for split in info["splits"]:
    for name in shards(version_dir):
      if f"-{split['name']}." in name and keys & {
          key for key, _, _ in record_index.read(version_dir, name, split["name"]).records}:
        found.add((version_dir / name).read_bytes())
  return found


def made(builder) -> int:
  return sum(len(builder.generation.written(split)) for split in builder.info.splits)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
  """pets:1.0.0 of PHOTOS crops, and its tree."""
  root = tmp_path_factory.mktemp("tree")
  write_crops(root, PHOTOS, seed=3, prefix="img")
  data_dir = tmp_path_factory.mktemp("data")
  builder = build(root, data_dir, "1.0.0")
  assert made(builder) == PHOTOS
  return root, data_dir


def grown(base, tmp_path) -> tuple[pathlib.Path, pathlib.Path, dict]:
  """A copy of the base's tree and data dir, the tree changed: 4 photos added, one
  relabelled (moved to another class folder), one removed, one edited (re-encoded)."""
  root, data_dir = tmp_path / "tree", tmp_path / "data"
  shutil.copytree(base[0], root)
  shutil.copytree(base[1], data_dir)
  files = sorted(root.rglob("img_*.jpg"))
  added = write_crops(root, 4, seed=77, prefix="new")
  relabelled = files[5]
  other = next(p for p in sorted(root.iterdir()) if p.name != relabelled.parent.name)
  relabelled.rename(other / relabelled.name)
  files[40].unlink()
  edited = files[90]
  edited.write_bytes(sample_images.encode(
      decode(edited.read_bytes())[::-1], "JPEG"))  # upside down
  rel = lambda p: p.relative_to(root).as_posix()
  return root, data_dir, {
      "added": [rel(p) for p in added], "relabelled": rel(relabelled),
      "relabelled_to": f"{other.name}/{relabelled.name}", "removed": rel(files[40]),
      "edited": rel(edited)}


def test_a_new_version_makes_only_what_changed_and_reads_as_a_full_build(
    base, tmp_path, monkeypatch):
  root, data_dir, change = grown(base, tmp_path)
  drawn = []
  thumbnail = report_page.thumbnail
  monkeypatch.setattr(report_page, "thumbnail", lambda *a: drawn.append(a) or thumbnail(*a))
  builder = build(root, data_dir, "1.1.0")
  drawn_on_base, drawn[:] = len(drawn), []
  v1, v2 = data_dir / "pets" / "1.0.0", data_dir / "pets" / "1.1.0"
  # Only the changed photos were made: 4 added, the relabelled one, the edited one.
  assert made(builder) == 6
  # What stock TFDS reads equals a full build of the same tree, split by split.
  full = build(root, tmp_path / "full", "1.1.0", from_version=named_build.FULL)
  assert made(full) == PHOTOS + 4 - 1
  # The base's page pictures are not drawn again; the full build draws every one.
  assert len(drawn) >= len(set(re.findall(r"data:image/jpeg;[^\"]+",
                                          (v2 / "report.html").read_text()))) > 20
  assert drawn_on_base <= len(drawn) // 4
  assert examples(v2) == examples(tmp_path / "full" / "pets" / "1.1.0")
  assert round_trip.verify(v2, str(root)).ok
  # Know-your-data says what a full build says: the same groups and links, findings, card
  # and page.
  for name in ("duplicates.json", "quality.json", "README.md", "report.html"):
    assert (v2 / name).read_bytes() == (tmp_path / "full" / "pets" / "1.1.0" / name
                                        ).read_bytes(), name
  # The base's shards without a changed photo are shards of the new version, byte for byte;
  # the shards that held the relabelled, removed or edited photo are not.
  touched = holding(v1, {change["relabelled"], change["removed"], change["edited"]})
  old, new = set(shards(v1).values()), set(shards(v2).values())
  assert touched and not touched & new
  assert old - touched == old & new
  assert len(old & new) >= len(old) - 3
  # `imagesets diff` shows exactly the change (the edit turned the photo upside down).
  entries = lambda version: [
      version_diff.Entry.of(split, name, label, image)
      for split, rows in examples(version).items() for name, label, image in rows]
  changes = version_diff.diff(entries(v1), entries(v2)).splits
  count = lambda kind: sum(len(c[kind]) for c in changes.values())
  assert {kind: count(kind) for kind in version_diff.KINDS} == {
      "added": 4, "removed": 1, "changed": 1, "relabelled": 1, "renamed": 0,
      "moved_in": 0, "moved_out": 0}
  # The new version's own index matches its shards, so it can be built on in turn.
  later = incremental.load(v2)
  assert sum(len(s.records) for shards_ in later.splits.values() for s in shards_) == PHOTOS + 3


def test_on_beam_a_new_version_fingerprints_only_the_new_photos_and_reports_as_a_full_build(
    base, tmp_path, monkeypatch):
  """Built on a base on Beam's workers (2 processes): only the changed photos are made and
  fingerprinted (counted), the base's fingerprints are read from its record index, and the
  version reads and reports as a full build of the same tree; the base's unchanged shards
  are its shards, byte for byte. It records its shards' hashes with their stats, as a
  local build does (shard_hashes): the next build reads none of those it kept; its new
  shards, written after the check its record goes with, are read once (as a local
  build's)."""
  root, data_dir, change = grown(base, tmp_path)
  an_hour_ago = time.time_ns() - 3600 * 10**9  # (1.0.0's shards: written well before)
  for path in (data_dir / "pets" / "1.0.0").glob("pets-*"):
    os.utime(path, ns=(an_hour_ago, an_hour_ago))
  # (the builds' clock 1 s behind the true one: a shard written after a check is newer)
  later(monkeypatch, seconds=int(stat_cache.RACY_SECONDS) - 1)
  builder = build(root, data_dir, "1.1.0",
                  beam_options=beam_download_config(workers=2).beam_options)
  assert builder.PLAN is not None
  counters = builder.generation.beam_counters
  assert counters["fingerprinted"] == 6  # 4 added, relabelled, edited
  # (the components' rounds stated for the images grouped: the kept and the made)
  assert max(int(name.rsplit("_", 1)[1]) for name in counters if name.startswith(
      "changed_")) + 1 == beam_components.rounds_for(PHOTOS + 3) < beam_components.ROUNDS
  v1, v2 = data_dir / "pets" / "1.0.0", data_dir / "pets" / "1.1.0"
  full = build(root, tmp_path / "full", "1.1.0", from_version=named_build.FULL)
  assert examples(v2) == examples(full.data_path)
  assert round_trip.verify(v2, str(root)).ok
  for name in ("duplicates.json", "quality.json", "README.md"):
    assert (v2 / name).read_bytes() == (pathlib.Path(full.data_path) / name).read_bytes(), name
  report = json.loads((v2 / "duplicates.json").read_text())
  assert report["groups"] and report["num_images"] == PHOTOS + 3
  touched = holding(v1, {change["relabelled"], change["removed"], change["edited"]})
  old, new = set(shards(v1).values()), set(shards(v2).values())
  assert touched and not touched & new and old - touched == old & new
  # The shards on disk are those the version lists: the kept ones first, then the new
  # records in no more shards than the local writer would make of them (TFDS's Beam writer
  # is asked for that many: not the whole split's floor of shards).
  splits = builder.info.splits
  assert sorted(p.name for p in v2.glob("pets-*")) == sorted(
      name for split in splits.values() for name in split.filenames)
  for split, info in splits.items():
    plan = builder.PLAN.splits[split]
    new_lengths = info.shard_lengths[len(plan.shards):]
    new_bytes = info.num_bytes - sum(row[1] for rows in plan.layout for row in rows)
    asked = incremental.NewShardsConfig(target_bytes=plan.target_bytes).get_number_shards(
        new_bytes, sum(new_lengths))
    assert len(new_lengths) <= asked < 4, (split, new_lengths, asked)
  assert max(sum(info.shard_lengths[len(builder.PLAN.splits[split].shards):])
             for split, info in splits.items()) >= 2  # (where a whole split's floor differs)
  # Its record index (the new shards' made by the workers) lets the next version build on
  # it: only the photo added since is made, on Beam or locally.
  on_v2 = incremental.load(v2)
  assert sum(len(s.records) for shards_ in on_v2.splits.values() for s in shards_) == PHOTOS + 3
  assert {key: fingerprint.to_json() for shards_ in on_v2.splits.values() for s in shards_
          for key, _, fingerprint in s.records} == {
      key: fingerprint.to_json() for shards_ in incremental.load(full.data_path).splits.values()
      for s in shards_ for key, _, fingerprint in s.records}
  # 1.2.0, one photo removed: no split has a new record (TFDS's Beam writer is given none,
  # the pipeline runs the report alone), and the Beam build on 1.1.0 equals the local one.
  sorted(root.rglob("img_*.jpg"))[60].unlink()
  again = tmp_path / "again"
  shutil.copytree(data_dir, again)
  hashed = counted_hashes(monkeypatch)
  assert build(root, data_dir, "1.2.0", beam_options=beam_download_config(workers=2).beam_options
               ).generation.beam_counters["fingerprinted"] == 0
  assert sorted(p.name for p in hashed if p.parent == v2) == sorted(
      name for name, data in shards(v2).items() if data not in old)
  assert made(build(root, again, "1.2.0")) == 0
  v3, local = data_dir / "pets" / "1.2.0", again / "pets" / "1.2.0"
  assert examples(v3) == examples(local)
  for name in ("duplicates.json", "quality.json", "README.md"):
    assert (v3 / name).read_bytes() == (local / name).read_bytes(), name


def test_a_version_built_on_beam_in_full_is_not_read_by_the_next_build(
    base, tmp_path, monkeypatch):
  """A version of a line built on Beam in full records its shards' hashes (made by the
  workers that index them) with the driver's stats before: the next build reads none."""
  root, data_dir = tmp_path / "tree", tmp_path / "data"
  shutil.copytree(base[0], root)
  later(monkeypatch)
  build(root, data_dir, "1.0.0", beam_options=beam_download_config().beam_options)
  built = data_dir / "pets" / "1.0.0"
  assert not list(built.glob("_imagesets_*"))
  hashed = counted_hashes(monkeypatch)
  write_crops(root, 1, seed=11, prefix="new11")
  lines = []
  builder = build(root, data_dir, "1.1.0", log=lines.append)
  assert made(builder) == 1 and builder.PLAN is not None, lines
  assert not [p for p in hashed if p.parent == built]


def test_a_beam_build_stopped_by_a_bad_file_indexes_nothing_and_keeps_the_shards_record(
    base, tmp_path, monkeypatch):
  """Bad files stop a Beam build of a line before its record index's pipeline, and the
  record of the last version's shards (shard_hashes) stays as it was."""
  from imagesets.building import beam_index
  from imagesets.building import problems
  root, data_dir, _ = grown(base, tmp_path)
  record = data_dir / "pets" / shard_hashes.FILE
  before = record.read_bytes()
  indexed = []
  monkeypatch.setattr(beam_index, "write", lambda *args, **kwargs: indexed.append(args) or {})
  bad = sorted(root.iterdir())[0] / "cut.jpg"
  bad.write_bytes(sorted(root.rglob("img_*.jpg"))[0].read_bytes()[:300])
  with pytest.raises(problems.InvalidSourceError, match="cut.jpg"):
    build(root, data_dir, "1.1.0", beam_options=beam_download_config().beam_options)
  assert not indexed and record.read_bytes() == before
  assert not (data_dir / "pets" / "1.1.0").exists()


def test_on_beam_a_split_whose_new_photos_are_all_bad_is_said(base, tmp_path):
  """Skipping bad files, a split whose new files are all bad has no new record for TFDS's
  Beam writer, which refuses an empty split: the build stops saying so and naming them,
  and builds locally."""
  options = class_folders_builder.ClassFoldersConfig(name="pets", skip_bad_files=True)
  root, data_dir = tmp_path / "tree", tmp_path / "data"
  shutil.copytree(base[0], root)
  build(root, data_dir, "1.0.0", options=options)
  bad = sorted(root.iterdir())[0] / "cut.jpg"
  bad.write_bytes(sorted(root.rglob("img_*.jpg"))[0].read_bytes()[:300])  # cut short
  with pytest.raises(ValueError, match=r"its new files are all bad \(1 bad file\(s\) "
                     r"skipped \(.*cut.jpg\)\).*build this version locally"):
    build(root, data_dir, "1.1.0", options=options,
          beam_options=beam_download_config().beam_options)
  assert not (data_dir / "pets" / "1.1.0").exists()
  builder = build(root, data_dir, "1.1.0", options=options)
  assert sum(s.num_examples for s in builder.info.splits.values()) == PHOTOS


def test_a_base_index_replaced_after_the_plan_is_not_taken_into_the_version(
    base, tmp_path, monkeypatch):
  """The index of a base shard kept whole is linked into the new version only while it is
  the index the build planned from: one replaced since (other fingerprints, the shard's
  SHA-256 kept) stops the build, and no version is left."""
  root, data_dir, _ = grown(base, tmp_path)
  v1 = data_dir / "pets" / "1.0.0"
  write_index = builder_base.ImageSetBuilder._write_record_index

  def replaced_first(self, *args, **kwargs):
    kept = next(shard for split in self.PLAN.splits for position in range(32)
                if (shard := self.PLAN.kept_shard(split, position)) is not None)
    path = record_index.path_of(v1, kept.name)
    index = json.loads(path.read_text())
    rows = index["records"]
    rows[0][2], rows[1][2] = rows[1][2], rows[0][2]  # two photos' fingerprints swapped
    path.unlink()  # (replaced, as an editor saves: the base's links keep the old bytes)
    path.write_text(json.dumps(index, sort_keys=True, separators=(",", ":")))
    return write_index(self, *args, **kwargs)

  monkeypatch.setattr(builder_base.ImageSetBuilder, "_write_record_index", replaced_first)
  with pytest.raises(record_index.RecordIndexError, match="changed during the build"):
    build(root, data_dir, "1.1.0")
  assert not (data_dir / "pets" / "1.1.0").exists()


def test_the_same_base_and_tree_give_the_same_bytes(base, tmp_path):
  root, data_dir, _ = grown(base, tmp_path)
  again = tmp_path / "again"
  shutil.copytree(data_dir, again)
  build(root, data_dir, "1.1.0")
  build(root, again, "1.1.0")
  first, second = data_dir / "pets" / "1.1.0", again / "pets" / "1.1.0"
  names = sorted(p.relative_to(first).as_posix() for p in first.rglob("*") if p.is_file())
  assert names == sorted(p.relative_to(second).as_posix() for p in second.rglob("*")
                         if p.is_file())
  differ = [n for n in names if (first / n).read_bytes() != (second / n).read_bytes()]
  assert differ == []


def test_new_photos_are_checked_against_every_old_photo(base, tmp_path):
  """A near copy of an old photo added to the tree is grouped with it, from the stored
  fingerprints (the old photos are not decoded again)."""
  root, data_dir = tmp_path / "tree", tmp_path / "data"
  shutil.copytree(base[0], root)
  shutil.copytree(base[1], data_dir)
  old = sorted(root.rglob("img_*.jpg"))[7]
  pixels = decode(old.read_bytes())
  copy = old.parent / "new_copy.png"  # the same pixels, other bytes: a near or pixel copy
  copy.write_bytes(sample_images.encode(pixels, "PNG"))
  builder = build(root, data_dir, "1.1.0")
  assert made(builder) == 1
  report = json.loads((data_dir / "pets" / "1.1.0" / "duplicates.json").read_text())
  names = [{m["file_name"] for m in group["members"]} for group in report["groups"]]
  rel = old.relative_to(root).as_posix()
  assert any({rel, f"{old.parent.name}/new_copy.png"} <= group for group in names)
  assert report["num_images"] == PHOTOS + 1


def test_a_relabel_or_rename_keeps_the_split_a_path_recipe_does_not(tmp_path):
  root = tmp_path / "tree"
  paths = write_crops(root, 60, seed=5, prefix="img")
  listing = lambda key: class_folders_builder.list_tree(
      str(root), class_folders_builder.ClassFoldersConfig(name="x", split_key=key))
  split_of = lambda listing_, path: next(s for s, ps in listing_.by_split.items() if path in ps)
  before = {key: listing(key) for key in ("content", "path")}
  moved_by_path = 0
  for i, path in enumerate(paths[:30]):
    other = next(p for p in sorted(root.iterdir()) if p.name != path.parent.name)
    target = other / f"renamed_{i}.jpg"
    path.rename(target)
    after = {key: listing(key) for key in ("content", "path")}
    old, new = path.relative_to(root).as_posix(), target.relative_to(root).as_posix()
    assert split_of(after["content"], new) == split_of(before["content"], old)
    moved_by_path += split_of(after["path"], new) != split_of(before["path"], old)
    target.rename(path)
  assert moved_by_path > 0  # what the content key fixes: with the path, relabels move photos


def test_a_base_of_other_options_or_without_an_index_gives_a_full_build_saying_why(
    base, tmp_path):
  root, data_dir, _ = grown(base, tmp_path)
  lines = []
  options = class_folders_builder.ClassFoldersConfig(name="pets", seed=1)
  builder = build(root, data_dir, "1.1.0", options=options, log=lines.append)
  assert made(builder) == PHOTOS + 3
  assert any("in full, not on pets:1.0.0" in line and "seed 0 -> 1" in line for line in lines)
  shutil.rmtree(data_dir / "pets" / "1.0.0" / record_index.INDEX_FOLDER)
  lines.clear()
  builder = build(root, data_dir, "1.2.0", from_version="1.0.0", log=lines.append)
  assert made(builder) == PHOTOS + 3
  assert any("no usable record index" in line for line in lines)


@pytest.mark.parametrize("shard", ["kept whole", "rewritten"])
def test_a_base_shard_changed_after_its_build_gives_a_full_build_naming_it(base, tmp_path,
                                                                           shard):
  """One byte of an image changed, the size kept: the shard's SHA-256 is not its index's,
  found before any photo is made; nothing of the changed shard reaches the new version."""
  root, data_dir, change = grown(base, tmp_path)
  version = data_dir / "pets" / "1.0.0"
  touched = holding(version, {change["relabelled"], change["removed"], change["edited"]})
  victim = next(name for name, data in shards(version).items()
                if (data in touched) == (shard == "rewritten"))
  data = bytearray((version / victim).read_bytes())
  data[len(data) // 2] ^= 1
  (version / victim).write_bytes(bytes(data))
  lines = []
  assert made(build(root, data_dir, "1.1.0", log=lines.append)) == PHOTOS + 3
  assert any("in full, not on pets:1.0.0" in line and victim in line for line in lines)


def test_a_base_shard_removed_after_its_build_gives_a_full_build_naming_it(base, tmp_path):
  root, data_dir, change = grown(base, tmp_path)
  version = data_dir / "pets" / "1.0.0"
  touched = holding(version, {change["relabelled"], change["removed"], change["edited"]})
  victim = next(name for name, data in shards(version).items() if data not in touched)
  (version / victim).unlink()
  lines = []
  assert made(build(root, data_dir, "1.1.0", log=lines.append)) == PHOTOS + 3
  assert any("in full, not on pets:1.0.0" in line and victim in line
             and "unreadable: No such file or directory" in line for line in lines), lines


def test_an_index_that_does_not_describe_its_shard_gives_a_full_build(base, tmp_path):
  """Two rows of a shard's index swapped (sizes kept in place), then the photo the index
  now puts first removed: a shard to rewrite has each record's name and label read."""
  root, data_dir = tmp_path / "tree", tmp_path / "data"
  shutil.copytree(base[0], root)
  shutil.copytree(base[1], data_dir)
  version = data_dir / "pets" / "1.0.0"
  name = sorted(shards(version))[0]
  path = record_index.path_of(version, name)
  raw = json.loads(path.read_text())
  (a, *_), (b, *_) = raw["records"][:2]
  raw["records"][0][0], raw["records"][1][0] = b, a
  path.write_text(json.dumps(raw))
  (root / b).unlink()
  lines = []
  builder = build(root, data_dir, "1.1.0", log=lines.append)
  assert made(builder) == PHOTOS - 1
  assert any("index does not describe the shard" in line for line in lines)
  assert b not in {name for rows in examples(builder.data_path).values() for name, _, _ in rows}


def test_an_index_listing_a_photo_twice_gives_a_full_build(base, tmp_path):
  """A row of a shard kept whole renamed to the key of a photo another kept shard holds (the
  shard's SHA-256 kept): its rows are not read, so the build on it kept that photo's key
  twice and made the renamed photo again, its record in the version twice. The base is
  built on in full, saying why."""
  root, data_dir = tmp_path / "tree", tmp_path / "data"
  shutil.copytree(base[0], root)
  shutil.copytree(base[1], data_dir)
  version = data_dir / "pets" / "1.0.0"
  first, second = sorted(name for name in shards(version) if "-train." in name)[:2]
  path = record_index.path_of(version, first)
  raw = json.loads(path.read_text())
  other = record_index.read(version, second, "train").records[-1][0]
  raw["records"][-1][0] = other
  path.write_text(json.dumps(raw, sort_keys=True, separators=(",", ":")))
  write_crops(root, 1, seed=77, prefix="new")
  lines = []
  builder = build(root, data_dir, "1.1.0", log=lines.append)
  assert made(builder) == PHOTOS + 1
  assert any("in full, not on pets:1.0.0" in line and f"lists {other} twice" in line
             for line in lines), lines
  full = build(root, tmp_path / "full", "1.1.0", from_version=named_build.FULL)
  assert examples(builder.data_path) == examples(full.data_path)


@pytest.mark.parametrize("fingerprint", [[], ["x", "zz", 1, 1, "jpeg", "", []], "x"])
def test_an_index_with_a_malformed_fingerprint_gives_a_full_build(base, tmp_path,
                                                                  fingerprint):
  root, data_dir, _ = grown(base, tmp_path)
  version = data_dir / "pets" / "1.0.0"
  path = record_index.path_of(version, sorted(shards(version))[0])
  raw = json.loads(path.read_text())
  raw["records"][0][2] = fingerprint
  path.write_text(json.dumps(raw))
  lines = []
  assert made(build(root, data_dir, "1.1.0", log=lines.append)) == PHOTOS + 3
  assert any("no usable record index" in line for line in lines)


def test_a_base_whose_index_an_older_imagesets_wrote_gives_a_full_build(base, tmp_path):
  """Index format 2 held five quality measures a fingerprint: kept photos judged by other
  rules than the new ones. The base is built on in full, once, saying why."""
  root, data_dir, _ = grown(base, tmp_path)
  version = data_dir / "pets" / "1.0.0"
  for name in shards(version):
    path = record_index.path_of(version, name)
    raw = json.loads(path.read_text())
    raw["format"] = 2
    for row in raw["records"]:
      row[2][6] = row[2][6][:5]
    path.write_text(json.dumps(raw))
  lines = []
  assert made(build(root, data_dir, "1.1.0", log=lines.append)) == PHOTOS + 3
  assert any("index format 2 by another imagesets" in line for line in lines), lines


def test_a_base_whose_records_an_older_imagesets_made_gives_a_full_build(tmp_path, monkeypatch):
  """Before 2a20187 an RGBA PNG with an EXIF orientation was stored sideways (turned after
  its conversion to RGB, which drops the EXIF block): a version built on such a base kept
  that record, where a full build of the same tree stores the photo upright. A base that
  records no `incremental.RECORDS` (or another) is built on in full, saying why."""
  root, data_dir = tmp_path / "tree", tmp_path / "data"
  write_crops(root, 60, seed=3, prefix="img")
  pixels = decode(sorted(root.rglob("*.jpg"))[0].read_bytes())
  rgba = np.dstack([np.rot90(pixels, k=1), np.full(pixels.shape[1::-1], 255, np.uint8)])
  photo = sorted(root.iterdir())[0] / "phone.png"
  photo.write_bytes(sample_images.encode(rgba, "PNG", orientation=6))
  with monkeypatch.context() as before:  # (how imagesets before 2a20187 stored it)
    before.setattr(PIL.ImageOps, "exif_transpose", lambda image, **_: image)
    build(root, data_dir, "1.0.0")
  path = data_dir / "pets" / "1.0.0" / "metadata.json"
  metadata = json.loads(path.read_text())
  assert metadata.pop(incremental.RECORDS_KEY) == incremental.RECORDS
  path.write_text(json.dumps(metadata))   # (as it wrote it: no records' rules recorded)
  write_crops(root, 1, seed=77, prefix="new")
  lines = []
  builder = build(root, data_dir, "1.1.0", log=lines.append)
  full = build(root, tmp_path / "full", "1.1.0", from_version=named_build.FULL)
  assert examples(builder.data_path) == examples(full.data_path)
  assert any("in full, not on pets:1.0.0" in line and "records were made by" in line
             for line in lines), lines
  # (a version of this imagesets is built on)
  assert made(build(root, data_dir, "1.2.0", from_version="1.1.0")) == 0


def test_a_line_built_by_path_keeps_its_recipe_when_built_in_full(tmp_path):
  """1.0.0 split by path (built before recipes were recorded: no index either): 1.1.0 is
  built in full, by path, and no photo changes split."""
  root, data_dir = tmp_path / "tree", tmp_path / "data"
  write_crops(root, 120, seed=6, prefix="img")
  named_build.build(root, "pets", version="1.0.0", data_dir=str(data_dir))
  write_crops(root, 3, seed=7, prefix="new")
  lines = []
  builder = build(root, data_dir, "1.1.0", log=lines.append)
  assert "split_key" not in builder.info.metadata
  assert any("splits by path" in line for line in lines)
  before = {name: split for split, rows in examples(data_dir / "pets" / "1.0.0").items()
            for name, _, _ in rows}
  after = {name: split for split, rows in examples(builder.data_path).items()
           for name, _, _ in rows}
  assert all(after[name] == split for name, split in before.items())
  # 1.2.0 is built on 1.1.0 (which has an index), by path still.
  later = build(root, data_dir, "1.2.0", log=lines.append)
  assert made(later) == 0 and "split_key" not in later.info.metadata


def test_naming_the_recipe_a_line_has_builds_on_it(base, tmp_path):
  root, data_dir, _ = grown(base, tmp_path)
  options = class_folders_builder.ClassFoldersConfig(name="pets", split_key="content")
  assert made(build(root, data_dir, "1.1.0", options=options)) == 6


@pytest.mark.parametrize("damage", [
    {"converted_files": ["x"]}, {"class_names": 5}, {"content_files": "x"}])
def test_a_base_with_malformed_metadata_gives_a_full_build_saying_why(base, tmp_path, damage):
  root, data_dir, _ = grown(base, tmp_path)
  path = data_dir / "pets" / "1.0.0" / "metadata.json"
  path.write_text(json.dumps({**json.loads(path.read_text()), **damage}))
  lines = []
  assert made(build(root, data_dir, "1.1.0", log=lines.append)) == PHOTOS + 3
  assert any("in full, not on pets:1.0.0" in line for line in lines)


def test_an_index_file_that_is_a_link_is_refused(base, tmp_path):
  version = tmp_path / "v"
  shutil.copytree(base[1] / "pets" / "1.0.0", version)
  name = sorted(shards(version))[0]
  path = record_index.path_of(version, name)
  path.unlink()
  path.symlink_to("/dev/zero")
  with pytest.raises(record_index.RecordIndexError):
    record_index.read(version, name, "train" if "-train." in name else name.split("-")[1])


def test_array_record_versions_are_built_on_too(tmp_path):
  root, data_dir = tmp_path / "tree", tmp_path / "data"
  write_crops(root, 80, seed=9, prefix="img")
  build(root, data_dir, "1.0.0", file_format="array_record")
  sorted(root.rglob("*.jpg"))[3].unlink()
  write_crops(root, 2, seed=10, prefix="new")
  builder = build(root, data_dir, "1.1.0", file_format="array_record")
  assert made(builder) == 2
  full = build(root, tmp_path / "full", "1.1.0", file_format="array_record",
               from_version=named_build.FULL)
  assert examples(builder.data_path) == examples(full.data_path)


def test_a_bad_new_photo_is_skipped_or_named_and_the_kept_ones_stay(base, tmp_path):
  root, data_dir = tmp_path / "tree", tmp_path / "data"
  shutil.copytree(base[0], root)
  shutil.copytree(base[1], data_dir)
  bad = sorted(root.iterdir())[0] / "cut.jpg"
  bad.write_bytes(sorted(root.rglob("img_*.jpg"))[0].read_bytes()[:300])  # cut short
  with pytest.raises(Exception, match="cut.jpg"):
    build(root, data_dir, "1.1.0")
  options = class_folders_builder.ClassFoldersConfig(name="pets", skip_bad_files=True)
  # Built with the option from the start, the bad photo alone is skipped, whatever split
  # it lands in: the split keeps its records from the base.
  skipping = tmp_path / "skipping"
  shutil.copytree(base[0], skipping / "tree")
  build(skipping / "tree", skipping / "data", "1.0.0", options=options)
  (skipping / "tree" / bad.relative_to(root)).write_bytes(bad.read_bytes())
  builder = build(skipping / "tree", skipping / "data", "1.1.0", options=options)
  assert made(builder) == 0
  assert list(builder.info.metadata["skipped_files"]) == [bad.relative_to(root).as_posix()]
  assert sum(s.num_examples for s in builder.info.splits.values()) == PHOTOS


def test_new_records_beyond_the_memory_limit_go_through_a_file_the_same(base, tmp_path,
                                                                         monkeypatch):
  root, data_dir, _ = grown(base, tmp_path)
  again = tmp_path / "again"
  shutil.copytree(data_dir, again)
  build(root, data_dir, "1.1.0")
  monkeypatch.setattr(prepared_records, "MEMORY_LIMIT", 1)
  build(root, again, "1.1.0")
  assert shards(data_dir / "pets" / "1.1.0") == shards(again / "pets" / "1.1.0")


@pytest.mark.parametrize("case", ["built on a base", "a first version in array_record"])
def test_the_page_from_the_record_index_is_the_page_read_from_the_records(base, tmp_path,
                                                                          monkeypatch, case):
  """A version of the line lists its examples from its record index and reads only the
  records its page pictures: the same page, byte for byte, as one read of every record."""
  reads = []
  for reader in ("_tfrecord_at", "_array_record_at"):
    monkeypatch.setattr(record_index, reader, lambda *args, real=getattr(
        record_index, reader): reads.append(args) or real(*args))
  if case == "built on a base":
    root, data_dir, _ = grown(base, tmp_path)
    builder = build(root, data_dir, "1.1.0")
  else:
    root, data_dir = tmp_path / "tree", tmp_path / "data"
    write_crops(root, 80, seed=12, prefix="img")
    builder = build(root, data_dir, "1.0.0", file_format="array_record")
  page = (builder.data_path / report_page.PAGE_FILE).read_text()
  folder = builder.data_path
  read_whole = version_report.content(version_examples.Folder(
      tfds.builder_from_directory(str(folder)), folder))
  assert report_page.render(read_whole) == page
  assert 0 < len(reads) <= page.count("data:image/jpeg")
  assert len(reads) < sum(s.num_examples for s in builder.info.splits.values())
  if case == "built on a base":  # (the base's pictures of the shards kept whole: not read)
    kept = {record_index.sha256_of(path)
            for path in (data_dir / "pets" / "1.0.0").glob("pets-*.tfrecord-*")}
    read_from = {record_index.sha256_of(folder / pathlib.Path(args[0]).name) for args in reads}
    assert read_from and not read_from & kept


@pytest.mark.parametrize("forgery", ["two pictured rows swapped",
                                     "a size before a pictured row changed"])
def test_a_base_index_that_no_longer_describes_its_shards_is_an_error_not_wrong_pictures(
    base, tmp_path, forgery):
  """A base index changed where its page pictured photos (the shard keeps its keys, so the
  build on it keeps the shard whole): the new page must not picture them from the last
  page's cache under what the wrong rows say (two rows swapped: each other's picture; a
  size changed before one: read elsewhere); their records are read, and the build stops,
  as it did before pictures were found by their records' places."""
  root, data_dir = tmp_path / "tree", tmp_path / "data"
  shutil.copytree(base[0], root)
  shutil.copytree(base[1], data_dir)
  version = data_dir / "pets/1.0.0"
  pictured = {html.unescape(name) for name in re.findall(
      r'<img alt="([^"]*)"', (version / report_page.PAGE_FILE).read_text())}
  changed = None
  for index in sorted((version / record_index.INDEX_FOLDER).glob("*.json")):
    raw = json.loads(index.read_text())
    rows = raw["records"]
    if forgery == "two pictured rows swapped":
      changed = next((p for p in range(len(rows) - 1)
                      if {rows[p][0], rows[p + 1][0]} <= pictured), None)
      if changed is not None:
        rows[changed], rows[changed + 1] = rows[changed + 1], rows[changed]
    else:  # (a row not pictured, with one pictured after it)
      changed = next((p for p in range(len(rows) - 1) if rows[p][0] not in pictured
                      and any(row[0] in pictured for row in rows[p + 1:])), None)
      if changed is not None:
        rows[changed][1] += 1
    if changed is not None:
      index.write_text(json.dumps(raw, sort_keys=True, separators=(",", ":")))
      break
  assert changed is not None
  write_crops(root, 1, seed=77, prefix="new")
  with pytest.raises(record_index.RecordIndexError, match="index"):
    build(root, data_dir, "1.1.0")


def test_a_record_read_for_another_photo_is_an_error_not_its_picture(base):
  version = base[1] / "pets" / "1.0.0"
  name = sorted(shards(version))[0]
  split = next(s for s in ("train", "validation", "test") if f"-{s}." in name)
  rows = record_index.read(version, name, split).records
  sizes = [size for _, size, _ in rows]
  read_first, read_second = (record_index.record_reader(
      version, name, "tfrecord", position, len(sizes), sizes[position],
      record_index.offsets(sizes)[position]) for position in (0, 1))
  label_ids = {n: i for i, n in enumerate(sorted(p.name for p in base[0].iterdir()))}
  label = lambda key: label_ids[key.split("/")[0]]
  first, second = rows[0][0], rows[1][0]
  assert builder_base._image_of(read_first, first, label(first))
  with pytest.raises(record_index.RecordIndexError, match=second):
    builder_base._image_of(read_first, second, label(second))


def test_kept_shards_are_judged_in_order_whatever_hash_ends_first(tmp_path, monkeypatch):
  """Hashed on threads, the first bad shard in the plan's order is the one named; a shard
  gone is named as unreadable."""
  import hashlib
  import threading
  names = [f"pets-train.tfrecord-{i:05d}-of-00012" for i in range(12)]
  for name in names:
    (tmp_path / name).write_bytes(name.encode())
  kept = [incremental.Shard(name, [], hashlib.sha256(name.encode()).hexdigest())
          for name in names]
  kept[3] = incremental.Shard(names[3], [], "0" * 64)  # other bytes
  (tmp_path / names[7]).unlink()                       # gone
  gone_tried = threading.Event()
  sha256_of = record_index.sha256_of

  def slow_for_the_first_bad(path):
    if path.name == names[3]:
      gone_tried.wait(10)  # (the gone shard fails first; on one core, a 10 s wait)
    elif path.name == names[7]:
      gone_tried.set()
    return sha256_of(path)

  monkeypatch.setattr(record_index, "sha256_of", slow_for_the_first_bad)
  with pytest.raises(incremental.NotABase, match=f"{names[3]} is not the shard.*other bytes"):
    incremental._check_bytes(tmp_path, kept)  # pylint: disable=protected-access
  with pytest.raises(incremental.NotABase, match=f"{names[7]} is not the shard.*unreadable"):
    incremental._check_bytes(tmp_path, kept[4:])  # pylint: disable=protected-access


def counted_hashes(monkeypatch) -> list[pathlib.Path]:
  """The shards hashed from now on (`record_index.sha256_of`)."""
  hashed = []
  sha256_of = record_index.sha256_of
  monkeypatch.setattr(record_index, "sha256_of",
                      lambda path: hashed.append(pathlib.Path(path)) or sha256_of(path))
  return hashed


def later(monkeypatch, seconds: int = 10) -> None:
  """The builds from now on come more than shard_hashes' racy margin after the shards so
  far were written, and those written `seconds` after (a simulated clock: no test sleeps)."""
  monkeypatch.setattr(shard_hashes, "_now_ns", lambda: time.time_ns() + seconds * 10**9)


def flip_a_byte_later(path: pathlib.Path) -> None:
  """One byte of `path` changed in place (the same inode and size), its modification time
  later than before (a write after the stat that went with its hash)."""
  data, stat = bytearray(path.read_bytes()), path.stat()
  data[len(data) // 2] ^= 1
  path.write_bytes(bytes(data))
  os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


def test_kept_shards_are_not_read_again_while_they_are_the_files_hashed(tmp_path, monkeypatch):
  """A build on a base checks its kept shards by the hashes recorded with them
  (shard_hashes) while each is the file hashed: a shard its base's build wrote just before
  recording it is read once by the next build, which records it anew; from then on none is
  read, in a chain of versions each linking the last one's shards. One rewritten since is
  read, and refused."""
  root, data_dir = tmp_path / "tree", tmp_path / "data"
  write_crops(root, 60, seed=5, prefix="img")
  build(root, data_dir, "1.0.0")
  later(monkeypatch)
  hashed = counted_hashes(monkeypatch)
  for version, seed in (("1.1.0", 6), ("1.2.0", 7), ("1.3.0", 8)):
    base = data_dir / "pets" / sorted(p.name for p in (data_dir / "pets").glob("1.*"))[-1]
    write_crops(root, 3, seed=seed, prefix=f"new{seed}")
    hashed[:] = []
    builder = build(root, data_dir, version)
    assert made(builder) == 3 and builder.PLAN is not None
    if version != "1.1.0":  # (1.0.0's shards were written within the margin of its record)
      assert not [p for p in hashed if p.parent == base]
      assert len({p.name for p in hashed}) == len(hashed) == len(  # (new shards: as written)
          {*shards(data_dir / "pets" / version).values()} - {*shards(base).values()}) > 0
  victim = data_dir / "pets" / "1.3.0" / sorted(shards(data_dir / "pets" / "1.3.0"))[0]
  flip_a_byte_later(victim)
  write_crops(root, 1, seed=9, prefix="new9")
  lines = []
  assert made(build(root, data_dir, "1.4.0", log=lines.append)) == 60 + 10
  assert any("in full, not on pets:1.3.0" in line and victim.name in line for line in lines)


@pytest.mark.parametrize("shard", ["kept", "new"])
def test_a_shard_changed_during_the_build_that_hashed_it_is_read_by_the_next(
    tmp_path, monkeypatch, shard):
  """The stat recorded with a shard's hash is the one taken before that hash (a kept
  shard's at the plan's check, a new one's before it is hashed as written): a change later
  in the build is seen by the next build, which refuses that base."""
  root, data_dir = tmp_path / "tree", tmp_path / "data"
  write_crops(root, 60, seed=5, prefix="img")
  build(root, data_dir, "1.0.0")
  later(monkeypatch)
  changed = []
  if shard == "kept":
    check_bytes = incremental._check_bytes  # pylint: disable=protected-access

    def then_changed(version_dir, shards_):
      checked = check_bytes(version_dir, shards_)
      changed.append(version_dir / shards_[0].name)
      flip_a_byte_later(changed[0])
      return checked
    monkeypatch.setattr(incremental, "_check_bytes", then_changed)
  else:
    write = record_index.write

    def then_changed(version_dir, shard_name, *args, **kwargs):
      digest = write(version_dir, shard_name, *args, **kwargs)
      if digest is not None and not changed:
        changed.append(shard_name)
        flip_a_byte_later(pathlib.Path(version_dir) / shard_name)
      return digest
    monkeypatch.setattr(record_index, "write", then_changed)
  write_crops(root, 3, seed=6, prefix="new6")
  assert made(build(root, data_dir, "1.1.0")) == 3
  monkeypatch.undo()
  later(monkeypatch)
  name = (changed[0].name if shard == "kept" else changed[0])
  victim = next(p for p in (data_dir / "pets" / "1.1.0").glob("pets-*")
                if shard == "new" and p.name == name or shard == "kept" and
                p.samefile(data_dir / "pets" / "1.0.0" / name))
  write_crops(root, 1, seed=7, prefix="new7")
  lines = []
  assert made(build(root, data_dir, "1.2.0", log=lines.append)) == 60 + 4
  assert any("in full, not on pets:1.1.0" in line and victim.name in line
             for line in lines), lines


def test_a_shard_whose_stat_failed_at_the_check_is_read_by_the_next_build(tmp_path,
                                                                          monkeypatch):
  """A stat that fails while the kept shards are checked (a shard replaced at that
  moment): each is read instead, the build goes on, and the shards without a stat are not
  recorded, so the next build reads them."""
  root, data_dir = tmp_path / "tree", tmp_path / "data"
  write_crops(root, 60, seed=5, prefix="img")
  build(root, data_dir, "1.0.0")
  later(monkeypatch)
  file_hashes, failed = stat_cache.file_hashes, []

  def once_failing(root_, paths, cache, *args, **kwargs):
    if pathlib.Path(cache).name == shard_hashes.FILE and not failed:
      failed.append(cache)
      raise FileNotFoundError(2, "replaced at that moment")
    return file_hashes(root_, paths, cache, *args, **kwargs)
  monkeypatch.setattr(stat_cache, "file_hashes", once_failing)
  write_crops(root, 3, seed=6, prefix="new6")
  builder = build(root, data_dir, "1.1.0")
  assert failed and made(builder) == 3 and builder.PLAN is not None
  hashed = counted_hashes(monkeypatch)
  base = data_dir / "pets" / "1.1.0"
  write_crops(root, 1, seed=7, prefix="new7")
  assert made(build(root, data_dir, "1.2.0")) == 1
  kept = {*shards(base).values()} & {*shards(data_dir / "pets" / "1.0.0").values()}
  assert len([p for p in hashed if p.parent == base]) == len(kept) > 0
