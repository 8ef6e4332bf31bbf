"""named_build and `imagesets build PATH --name NAME`: a team's folder as its own dataset,
loaded by name without our code, published and fetched by that name, never rebuilt from
other content under the same version."""

import json
import os
import pathlib
import shutil
import subprocess

import pytest
import tensorflow_datasets as tfds

import cli_runs
import imagesets  # noqa: F401
from conftest import beam_download_config, records_by_split, shard_bytes, warm
from imagesets.building import class_folders_builder
from imagesets.building import parallel_map
from imagesets.class_folders import named_build
from imagesets.class_folders import class_folders_dataset_builder as class_folders
from imagesets.storage import fetch
from imagesets.publishing import publish
from imagesets_testing import sample_images
from imagesets_testing.trees import write_tree

ABOUT = ('description = "Our two pets, photographed at home."\n'
         'citation = """@misc{pets, title = {Pets}}"""\n'
         'homepage = "https://example.com/pets"\n')


def pet_files() -> dict[str, bytes]:
  files = {f"{name}/{i:02d}.jpg": sample_images.jpeg(40 + i, 56, seed=10 * c + i)
           for c, name in enumerate(["cat", "dog"]) for i in range(12)}
  files["dog/grey.jpg"] = sample_images.encode(sample_images.photo(30, 40, 3)[..., 0], "JPEG")
  files["cat/cut.jpg"] = sample_images.jpeg(60, 80, seed=1)[:500]
  files["imagesets.toml"] = ABOUT.encode()
  return files


# The first build is the installed command's, in its own process; later calls check what
# the command says and decides, in this process.
run_cli = cli_runs.in_process


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
  return write_tree(tmp_path_factory.mktemp("pets"), pet_files())


@pytest.fixture(scope="module")
def data_dir(tree, tmp_path_factory):
  data_dir = tmp_path_factory.mktemp("tfds")
  result = cli_runs.command("build", tree, "--name", "pets", "--version", "1.2.0",
                            "--data-dir", data_dir, "--skip-bad-files", "--seed", "5")
  assert result.returncode == 0, result.stderr
  # First what it builds, last what it built, naming the skipped file, and how to read it.
  lines = result.stdout.strip().splitlines()
  assert lines[0] == (f"building pets:1.2.0: 26 images in 2 class folders of {tree}, "
                      f"into {data_dir / 'pets' / '1.2.0'}")
  assert "pets:1.2.0 in" in lines[-4] and "(1 skipped, 1 re-encoded" in lines[-4]
  assert lines[-3].startswith("  skipped cat/cut.jpg: ")
  assert lines[-2] == f"its page: {data_dir / 'pets' / '1.2.0' / 'report.html'} (open it in a browser)"
  assert 'tfds.load("pets:1.2.0"' in lines[-1]
  assert "Unknown size" not in result.stdout + result.stderr
  return data_dir


def test_the_dataset_has_the_users_name_version_and_card(data_dir, tree):
  builder = tfds.builder_from_directory(data_dir / "pets" / "1.2.0")
  info = builder.info
  assert (info.name, str(info.version), info.config_name) == ("pets", "1.2.0", "")
  assert info.description == "Our two pets, photographed at home."
  assert info.citation == "@misc{pets, title = {Pets}}" and info.homepage == "https://example.com/pets"
  assert "Flowers" not in json.dumps(info.as_json)  # never another dataset's card
  metadata = info.metadata
  assert metadata["source"] == tree
  assert metadata["class_names"] == ["cat", "dog"]
  assert metadata["num_examples_per_class"] == {"cat": 12, "dog": 13}
  assert list(metadata["skipped_files"]) == ["cat/cut.jpg"]
  assert list(metadata["converted_files"]) == ["dog/grey.jpg"]
  assert metadata["ignored_files"] == ["imagesets.toml"]
  assert metadata["seed"] == 5 and len(metadata["content_fingerprint"]) == 64
  assert sum(s.num_examples for s in info.splits.values()) == 25


def test_loads_by_name_in_a_process_that_never_imports_imagesets(data_dir):
  script = (
      "import sys, tensorflow_datasets as tfds\n"
      f"ds = tfds.load('pets:1.2.0', data_dir={str(data_dir)!r}, split='all', download=False)\n"
      "labels = sorted(int(e['label']) for e in tfds.as_numpy(ds))\n"
      "assert not any(m.startswith('imagesets') for m in sys.modules)\n"
      "print(labels.count(0), labels.count(1))\n")
  result = subprocess.run([warm("python"), "-c", script], capture_output=True, text=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
  assert result.returncode == 0, result.stderr
  assert result.stdout.split() == ["12", "13"]
  # And with the package loaded, in this process.
  ds = tfds.load("pets:1.2.0", data_dir=data_dir, split="train", download=False)
  assert len(list(ds)) == tfds.builder_from_directory(
      data_dir / "pets" / "1.2.0").info.splits["train"].num_examples


def test_same_content_is_a_no_op_and_other_content_is_refused(data_dir, tree, tmp_path):
  moved = shutil.copytree(tree, tmp_path / "copy")  # other folder, other mtimes, same bytes
  again = run_cli("build", moved, "--name", "pets", "--version", "1.2.0", "--data-dir",
                  data_dir, "--skip-bad-files", "--seed", "5")
  assert again.returncode == 0, again.stderr
  assert "already built from this content" in again.stdout
  assert f'tfds.load("pets:1.2.0", split="train", data_dir="{data_dir}")' in again.stdout
  before = records_by_split(data_dir / "pets" / "1.2.0")
  (moved / "dog" / "00.jpg").write_bytes(sample_images.jpeg(40, 56, seed=999))
  (moved / "cat" / "00.jpg").unlink()
  (moved / "cat" / "new.jpg").write_bytes(sample_images.jpeg(40, 56, seed=998))
  for changed, says in [
      ([moved], "1 file(s) added: cat/new.jpg; 1 file(s) removed: cat/00.jpg; "
                "1 file(s) changed: dog/00.jpg)"),
      ([tree, "--seed", "6"], "(options changed: seed 5 -> 6)")]:
    refused = run_cli("build", *changed, "--name", "pets", "--version", "1.2.0",
                      "--data-dir", data_dir, "--skip-bad-files", *(
                          ["--seed", "5"] if len(changed) == 1 else []))
    assert refused.returncode == 4 and "Traceback" not in refused.stderr  # (refused)
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("imagesets: error: pets:1.2.0 in") and (
        "build a new version (the latest there is 1.2.0: --version 1.3.0), or delete" in last), last
    assert says in last, last
  assert records_by_split(data_dir / "pets" / "1.2.0") == before  # untouched


def test_bad_names_and_bad_files_are_one_line_errors(tree, tmp_path):
  for name, says, status in [("Pets!", "lower case letters", 2),  # (usage)
                             ("mnist", "registered TFDS builder", 4)]:  # (refused)
    result = run_cli("build", tree, "--name", name, "--data-dir", tmp_path)
    assert result.returncode == status and says in result.stderr.strip().splitlines()[-1]
  strict = run_cli("build", tree, "--name", "pets", "--data-dir", tmp_path)
  assert strict.returncode == 4 and "Traceback" not in strict.stderr
  assert "cat/cut.jpg" in strict.stderr and "--skip-bad-files" in strict.stderr
  assert "skip_bad_files=True in Python" in strict.stderr  # what a Python caller passes
  assert not (tmp_path / "pets").exists()   # a failed first build leaves no empty folder


def test_publish_and_fetch_by_the_users_name(data_dir, bucket_url, tmp_path):
  publish.publish("pets:1.2.0", data_dir, bucket_url, progress=False)
  fetched = fetch.fetch(bucket_url, "pets:1.2.0", cache_dir=tmp_path / "cache", progress=False)
  assert (records_by_split(pathlib.Path(fetched) / "pets" / "1.2.0")
          == records_by_split(data_dir / "pets" / "1.2.0"))
  for kept in ("duplicates.json", "README.md"):  # the duplicate report and the card travel too
    assert ((pathlib.Path(fetched) / "pets" / "1.2.0" / kept).read_bytes()
            == (data_dir / "pets" / "1.2.0" / kept).read_bytes())


def test_same_records_as_class_folders_and_on_beam(tree, tmp_path):
  """One code path: the stock-CLI builder and a Beam build write the same examples."""
  options = class_folders.ClassFoldersConfig(name="pets", root=tree, skip_bad_files=True)
  named = named_build.build(tree, "pets", data_dir=tmp_path / "named", options=options)
  stock = class_folders.Builder(config=options, data_dir=tmp_path / "stock")
  stock.download_and_prepare()
  assert records_by_split(named.data_path) == records_by_split(stock.data_path)
  beam = named_build.build(tree, "pets", data_dir=tmp_path / "beam", options=options,
                           beam_options=beam_download_config(multi_processing=False).beam_options)
  assert records_by_split(beam.data_path) == records_by_split(named.data_path)
  assert dict(beam.info.metadata) == dict(named.info.metadata)


def test_array_record_builds_hold_the_same_examples(tree, tmp_path):
  options = class_folders.ClassFoldersConfig(name="pets", skip_bad_files=True)
  records = named_build.build(tree, "pets", data_dir=tmp_path / "rec", options=options)
  arrays = named_build.build(tree, "pets", data_dir=tmp_path / "arr", options=options,
                             file_format="array_record")
  assert list(arrays.data_path.glob("*.array_record-*"))
  for split in records.info.splits:
    source = tfds.data_source("pets:1.0.0", split=split, data_dir=tmp_path / "arr")
    stored = sorted(e["file_name"] for e in source)
    assert stored == sorted(e["file_name"] for e in tfds.as_numpy(
        records.as_dataset(split=split, decoders={"image": tfds.decode.SkipDecoding()})))


def test_image_size_counts_in_the_fingerprint_only_when_set():
  # Builds made before the option existed keep their fingerprints (no VersionExistsError).
  default = named_build.fingerprint_options(class_folders_builder.ClassFoldersConfig(name="a"),
                                            "tfrecord")
  sized = named_build.fingerprint_options(
      class_folders_builder.ClassFoldersConfig(name="a", image_size=224), "tfrecord")
  assert "image_size" not in default and "shorter_side" in default
  assert sized == {**default, "image_size": 224}


def test_leakage_counts_in_the_fingerprint_only_when_it_drops_examples():
  def options(leakage):
    return named_build.fingerprint_options(
        class_folders_builder.ClassFoldersConfig(name="a", leakage=leakage), "tfrecord")
  assert options("") == options("warn") == options("error") == options("off")
  assert "leakage" not in options("warn")
  assert options("drop") == {**options(""), "leakage": "drop"}


def test_options_added_later_leave_older_fingerprints_as_they_were():
  # The options a default build was fingerprinted with before image_size (issue 22) and
  # keras_image (issue 29) existed: the same keys, so the same fingerprints.
  default = named_build.fingerprint_options(class_folders_builder.ClassFoldersConfig(name="a"),
                                            "tfrecord")
  assert set(default) == {"split_proportions", "seed", "skip_bad_files", "shorter_side",
                          "exact_split_sizes", "follow_links", "file_format"}
  keras_image = {"height": 224, "width": 224, "interpolation": "bilinear", "fit": "stretch",
                 "color_mode": "rgb"}
  stored_as_keras = named_build.fingerprint_options(
      class_folders_builder.ClassFoldersConfig(name="a", keras_image=keras_image), "tfrecord")
  assert stored_as_keras == {**default, "keras_image": keras_image}


def test_a_build_runs_frozen_from_its_name_lookup_on_and_thaws_after(tree, tmp_path,
                                                                     monkeypatch):
  """The objects that exist when a build starts are left out of garbage collection until
  it ends, with young collections batched (parallel_map.frozen_gc), from the name's lookup
  (which imports TFDS's builders) to the file-hash cache's save; the process is as
  before."""
  import gc
  from imagesets.building import fingerprints
  seen = []

  def recorded(function):
    return lambda *args, **kwargs: seen.append(
        (function.__name__, gc.get_freeze_count() > 0, gc.get_threshold()[0])) or function(
            *args, **kwargs)

  monkeypatch.setattr(named_build, "check_name", recorded(named_build.check_name))
  hashes = fingerprints.cached_file_hashes

  def cached_file_hashes(*args, **kwargs):
    hashed = recorded(hashes)(*args, **kwargs)
    monkeypatch.setattr(hashed, "save", recorded(hashed.save))
    return hashed

  monkeypatch.setattr(fingerprints, "cached_file_hashes", cached_file_hashes)
  before = gc.get_threshold()
  assert gc.get_freeze_count() == 0
  options = class_folders_builder.ClassFoldersConfig(name="frozen", skip_bad_files=True)
  named_build.build(tree, "frozen", data_dir=str(tmp_path), options=options)
  batched = parallel_map.YOUNG_COLLECTION
  assert seen == [("check_name", True, batched), ("cached_file_hashes", True, batched),
                  ("save", True, batched)]
  assert gc.get_freeze_count() == 0 and gc.get_threshold() == before


@pytest.mark.skipif(parallel_map.available_cores() < 2, reason="one core: no worker processes")
def test_the_workers_take_the_stats_then_warm_up_and_make_every_photo(
    tree, tmp_path, monkeypatch):
  """A build's worker processes take its photos' stats (`stat_cache.stat_on`) while the
  base is read, and are asked to warm up (`image_hashes.warm_up`) once the stats are in,
  not before; the builder makes its photos on them (not on a pool of its own), handed
  out in chunks sized for the photos there are (`parallel_map.chunk_sizes`), and the
  grouping may use them (`duplicates.begin`)."""
  import contextlib
  from imagesets.analysis import image_hashes
  from imagesets.building import fingerprints
  pools, seen, totals = [], [], []
  executor, hashes, sizes = parallel_map.executor, fingerprints.cached_file_hashes, (
      parallel_map.chunk_sizes)

  @contextlib.contextmanager
  def recorded_executor(*args, **kwargs):
    with executor(*args, **kwargs) as pool:
      pools.append((kwargs, pool))
      yield pool

  def cached_file_hashes(*args, **kwargs):  # (workers forked by now, the stats theirs)
    seen.append((len(pools[-1][1]._processes), len(kwargs["stats"].chunks)))
    return hashes(*args, **kwargs)

  warmed, warm = [], parallel_map.warm
  monkeypatch.setattr(parallel_map, "warm", lambda pool, fn: warmed.append(
      (pool, fn, len(seen))) or warm(pool, fn))

  monkeypatch.setattr(parallel_map, "executor", recorded_executor)
  monkeypatch.setattr(fingerprints, "cached_file_hashes", cached_file_hashes)
  monkeypatch.setattr(parallel_map, "chunk_sizes", lambda *args: totals.append(args[2]) or
                      sizes(*args))
  from imagesets.analysis import duplicates
  grouped_on, begin = [], duplicates.begin
  monkeypatch.setattr(duplicates, "begin", lambda *args, pool=None: grouped_on.append(pool) or
                      begin(*args, pool=pool))
  options = class_folders_builder.ClassFoldersConfig(name="warm", skip_bad_files=True)
  built = named_build.build(tree, "warm", data_dir=str(tmp_path), options=options)
  # (the photos' stats taken by the workers: a run a core beside the build's)
  assert [kwargs for kwargs, _ in pools] == [{}]
  cores = parallel_map.available_cores()
  assert seen == [(cores, cores - 1)]  # (every worker forked; a run a core beside the build's)
  assert warmed == [(pools[0][1], image_hashes.warm_up, 1)]  # (after the stats were in)
  assert built.generation.pool is pools[0][1] and grouped_on == [pools[0][1]]
  assert type(built).POOL is None  # (shut down with the build: not the builder's later)
  assert totals == [26]  # (every photo of the tree, the bad one too, in one stream)
  assert built.info.splits.total_num_examples == 25


def test_a_later_build_of_a_tree_reads_only_its_new_photos_to_hash_them(tmp_path, monkeypatch):
  """A build on a base takes hashes from the name's stat cache for photos unchanged since
  the last build (stat_cache; its rules are tested in tests/building/test_stat_cache.py);
  a full build (`--full`) reads every photo. The name is looked up among TFDS's builders by
  the first build only (tests/building/test_named_versions.py)."""
  import time
  from imagesets.building import duplicate_report, fingerprints, stat_cache
  from imagesets_testing import tfds_names
  looked = tfds_names.count_lookups(monkeypatch)
  # (the builds 10 s after the photos were written: none is "racy")
  monkeypatch.setattr(stat_cache, "_now_ns", lambda: time.time_ns() + 10 * 10**9)
  read, sha256 = [], fingerprints._file_sha256
  monkeypatch.setattr(fingerprints, "_file_sha256", lambda root, path: read.append(path)
                      or sha256(root, path))
  tree = write_tree(tmp_path / "pets", pet_files())
  options = class_folders_builder.ClassFoldersConfig(name="pets", skip_bad_files=True)
  # (the cache is encoded while the build groups its photos, and written after it)
  events, finish, encode = [], duplicate_report.finish, stat_cache.Hashed.encode

  def finishing(*args, **kwargs):
    events.append("grouping")
    try:
      return finish(*args, **kwargs)
    finally:
      events.append("grouped")
  monkeypatch.setattr(duplicate_report, "finish", finishing)
  monkeypatch.setattr(stat_cache.Hashed, "encode", lambda self: (  # (not the shards' hashes)
      self.cache.name == stat_cache.FILE and events.append("encode")) or encode(self))

  def build(version, from_version=named_build.LATEST):
    read.clear()
    events.clear()
    return named_build.build(tree, "pets", version=version, data_dir=str(tmp_path / "tfds"),
                             options=options, versioned=True, from_version=from_version)
  first = build("1.0.0")
  assert len(read) == 26 and (tmp_path / "tfds" / "pets" / stat_cache.FILE).is_file()
  assert events == ["grouping", "encode", "grouped", "encode"]  # (the last: `save`'s)
  assert type(first).WHILE_GROUPING is None
  write_tree(tree, {"cat/new.jpg": sample_images.jpeg(50, 50, seed=77),
                    "dog/new.jpg": sample_images.jpeg(52, 50, seed=78)})
  second = build("1.1.0")
  assert sorted(read) == ["cat/new.jpg", "dog/new.jpg"]
  assert events == ["grouping", "encode", "grouped", "encode"]
  assert second.info.splits.total_num_examples == first.info.splits.total_num_examples + 2
  build("1.2.0", named_build.FULL)
  assert len(read) == 28 and looked == ["pets"]


def test_split_key_and_min_shards_count_in_the_fingerprint_only_when_not_the_old_ones():
  def options(**fields):
    return named_build.fingerprint_options(
        class_folders_builder.ClassFoldersConfig(name="a", **fields), "tfrecord")
  assert options() == options(split_key="path") == options(min_shards=4)
  assert options(split_key="content", min_shards=32) == {
      **options(), "split_key": "content", "min_shards": 32}


def test_imagesets_builds_are_the_class_folders_builds_of_its_recipe(tree, tmp_path):
  """`imagesets build` (versioned) writes what the stock-CLI builder writes with
  split_key "content" and min_shards 32, shard for shard; without them, other splits."""
  named = named_build.build(tree, "pets", data_dir=tmp_path / "named", versioned=True,
                            options=class_folders.ClassFoldersConfig(name="pets",
                                                                     skip_bad_files=True))
  assert named.info.metadata["split_key"] == "content" and named.info.metadata["min_shards"] == 32
  recipe = dict(named_build.LATEST_RECIPE)
  stock = class_folders.Builder(config=class_folders.ClassFoldersConfig(
      name="pets", root=tree, skip_bad_files=True, **recipe), data_dir=tmp_path / "stock")
  stock.download_and_prepare()
  assert records_by_split(named.data_path) == records_by_split(stock.data_path)
  assert sorted(shard_bytes(named.data_path).values()) == sorted(
      shard_bytes(stock.data_path).values())
  by_path = named_build.build(tree, "pets", data_dir=tmp_path / "path", options=(
      class_folders.ClassFoldersConfig(name="pets", skip_bad_files=True)))
  assert records_by_split(by_path.data_path) != records_by_split(named.data_path)
