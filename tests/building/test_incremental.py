"""incremental: a version built on the one before keeps what did not change, byte for byte,
makes only the photos that did, and reads as a full build of the same tree would."""

import io
import json
import pathlib
import shutil

import numpy as np
import PIL.Image
import pytest
import tensorflow_datasets as tfds

import imagesets  # noqa: F401
from imagesets.building import class_folders_builder
from imagesets.building import incremental
from imagesets.building import record_index
from imagesets.class_folders import named_build
from imagesets.verifying import round_trip
from imagesets_testing import photo_crops
from imagesets_testing import sample_images

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


def examples(version_dir: pathlib.Path) -> dict[str, set]:
  """{split: {(file name, label, image bytes)}} as stock TFDS reads the version."""
  builder = tfds.builder_from_directory(str(version_dir))
  label = builder.info.features["label"]
  out = {}
  for split in builder.info.splits:
    ds = builder.as_dataset(split, decoders={"image": tfds.decode.SkipDecoding()})
    out[split] = {(e["file_name"].decode(), label.int2str(int(e["label"])), e["image"])
                  for e in tfds.as_numpy(ds)}
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
          key for key, _, _ in record_index.read(version_dir, name, split["name"])}:
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


def test_a_new_version_makes_only_what_changed_and_reads_as_a_full_build(base, tmp_path):
  root, data_dir, change = grown(base, tmp_path)
  builder = build(root, data_dir, "1.1.0")
  v1, v2 = data_dir / "pets" / "1.0.0", data_dir / "pets" / "1.1.0"
  # Only the changed photos were made: 4 added, the relabelled one, the edited one.
  assert made(builder) == 6
  # What stock TFDS reads equals a full build of the same tree, split by split.
  full = build(root, tmp_path / "full", "1.1.0", from_version=named_build.FULL)
  assert made(full) == PHOTOS + 4 - 1
  assert examples(v2) == examples(tmp_path / "full" / "pets" / "1.1.0")
  assert round_trip.verify(v2, str(root)).ok
  # The base's shards without a changed photo are shards of the new version, byte for byte;
  # the shards that held the relabelled, removed or edited photo are not.
  touched = holding(v1, {change["relabelled"], change["removed"], change["edited"]})
  old, new = set(shards(v1).values()), set(shards(v2).values())
  assert touched and not touched & new
  assert old - touched == old & new
  assert len(old & new) >= len(old) - 3
  # The new version's own index matches its shards, so it can be built on in turn.
  later = incremental.load(v2)
  assert sum(len(s.records) for shards_ in later.splits.values() for s in shards_) == PHOTOS + 3


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


def test_a_base_shard_changed_after_its_build_stops_the_build_naming_it(base, tmp_path):
  root, data_dir, _ = grown(base, tmp_path)
  version = data_dir / "pets" / "1.0.0"
  victim = sorted(shards(version))[-1]
  with open(version / victim, "ab") as out:
    out.write(b"\0" * 10)
  with pytest.raises(incremental.NotABase, match=f"{victim}.*--full"):
    build(root, data_dir, "1.1.0")
  assert not (data_dir / "pets" / "1.1.0").exists()


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
  read = lambda b: {s: sorted(e["file_name"] for e in b.as_data_source(s))
                    for s in b.info.splits}
  assert read(builder) == read(full)
