"""image_dataset_from_directory: keras parity on the same tree (format "tf" and "grain"),
the fingerprint cache (reuse, one walk a call, rebuild on an added, removed, renamed or
edited file, the content check for same-size same-mtime replacements, old builds removed),
storage of exactly what keras returns."""

import hashlib
import os
import pathlib
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from conftest import warm
import imagesets
from imagesets.building import build_lock
from imagesets.building import class_folders_tree
from imagesets.building import generation
from imagesets.building import keras_pixels
from imagesets.building import problems
from imagesets.class_folders import cache_use
from imagesets.class_folders import from_directory
from imagesets.class_folders import named_build
from imagesets_testing import sample_images
from imagesets_testing.trees import write_tree

SIZE = (24, 36)  # the files' shorter sides are all below 36: kept as they came


def small_files(classes=("ant", "bee", "cow")) -> dict[str, bytes]:
  files = {f"{name}/{i:02d}.jpg": sample_images.jpeg(18 + i, 26 + 2 * c, seed=10 * c + i)
           for c, name in enumerate(classes) for i in range(7)}
  files[f"{classes[0]}/drawing.png"] = sample_images.encode(sample_images.photo(20, 30, 1), "PNG")
  return files


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
  return write_tree(tmp_path_factory.mktemp("animals"), small_files())


@pytest.fixture
def cache(tmp_path):
  return tmp_path / "cache"


def both(directory, cache_dir, **kwargs):
  ours = imagesets.image_dataset_from_directory(directory, cache_dir=cache_dir, verbose=False,
                                                **kwargs)
  theirs = keras.utils.image_dataset_from_directory(directory, verbose=False, **kwargs)
  return ours, theirs


def pixels_and_labels(ds) -> list[tuple[np.ndarray, bytes | None]]:
  """(float32 image, label bytes) of every element of a tf.data or grain dataset, unbatched."""
  out = []
  for element in ds:
    image, label = element if isinstance(element, tuple) else (element, None)
    image, label = np.asarray(image), None if label is None else np.asarray(label)
    if image.ndim == 4:
      out += [(one, None if label is None else l.tobytes())
              for one, l in zip(image, label if label is not None else [None] * len(image))]
    else:
      out.append((image, None if label is None else label.tobytes()))
  return out


def assert_as_keras(ours, theirs, tolerance=0.5):
  """Every element of `ours` is one of keras' (any order): the same label and shape, pixels
  keras' float32 values rounded (keras' values clipped to 0-255 first: ringing)."""
  mine, remaining = pixels_and_labels(ours), pixels_and_labels(theirs)
  assert len(mine) == len(remaining)
  for image, label in mine:
    distance = [np.abs(image - np.clip(k, 0, 255)).max()
                if k.shape == image.shape and kl == label else np.inf for k, kl in remaining]
    best = int(np.argmin(distance))
    assert distance[best] <= tolerance, (label, distance[best])
    remaining.pop(best)


def elements(ds) -> list:
  """(image bytes hash, label) of every element, sorted: order-free comparison."""
  out = []
  image_rank = len((ds.element_spec[0] if isinstance(ds.element_spec, tuple)
                    else ds.element_spec).shape)
  for element in (ds.unbatch() if image_rank == 4 else ds):
    image, label = element if isinstance(element, tuple) else (element, None)
    digest = hashlib.sha256(image.numpy().tobytes()).hexdigest()
    out.append((digest, None if label is None else label.numpy().tobytes()))
  return sorted(out, key=lambda e: (e[0], e[1] or b""))


@pytest.mark.parametrize("kwargs", [
    dict(),
    dict(label_mode="categorical", class_names=["cow", "ant", "bee"]),
    dict(labels=None, shuffle=False),
    dict(label_mode=None, crop_to_aspect_ratio=True, interpolation="bicubic"),
    dict(pad_to_aspect_ratio=True, batch_size=None, interpolation="area"),
    dict(data_format="channels_first", batch_size=5, shuffle=False, interpolation="nearest"),
    dict(crop_to_aspect_ratio=True, interpolation="nearest"),
    dict(pad_to_aspect_ratio=True, interpolation="nearest", label_mode="categorical"),
    dict(color_mode="grayscale", interpolation="lanczos3"),
    dict(interpolation="lanczos5", crop_to_aspect_ratio=True),
    dict(interpolation="mitchellcubic"),
    dict(interpolation="gaussian", image_size=(7, 50)),
    dict(interpolation="lanczos5", pad_to_aspect_ratio=True, image_size=(40, 12)),
])
def test_same_specs_class_names_and_pixels_as_keras(tree, cache, kwargs):
  ours, theirs = both(tree, cache, **{"image_size": SIZE, **kwargs})
  assert ours.element_spec == theirs.element_spec
  assert ours.class_names == theirs.class_names
  assert_as_keras(ours, theirs)  # keras' images rounded, the same labels


def test_rgba_as_keras_and_jpegs_refused_as_keras_fails_on_them(tmp_path, cache):
  pngs = {f"{name}/{i}.png": sample_images.encode(sample_images.photo(20 + i, 30, seed=i), "PNG")
          for name in ("x", "y") for i in range(3)}
  ours, theirs = both(write_tree(tmp_path / "pngs", pngs), cache, image_size=SIZE,
                      color_mode="rgba", crop_to_aspect_ratio=True)
  assert ours.element_spec == theirs.element_spec
  assert_as_keras(ours, theirs)
  with pytest.raises(problems.InvalidSourceError, match=r"ant/00.jpg: TensorFlow cannot "
                     r"decode it: JPEG does not support 4 channels\n"):
    imagesets.image_dataset_from_directory(tmp_path_tree(tmp_path), color_mode="rgba",
                                           cache_dir=cache, verbose=False)


def tmp_path_tree(tmp_path):
  return write_tree(tmp_path / "animals", small_files())


def test_binary_labels_and_its_two_class_rule(tmp_path, cache, monkeypatch):
  two = write_tree(tmp_path / "two", small_files(("no", "yes")))
  ours, theirs = both(two, cache, image_size=SIZE, label_mode="binary")
  assert ours.element_spec == theirs.element_spec
  assert_as_keras(ours, theirs)
  three = write_tree(tmp_path / "three", small_files())
  builds = counted(monkeypatch, named_build, "build")
  with pytest.raises(ValueError, match="exactly 2"):
    imagesets.image_dataset_from_directory(three, label_mode="binary", cache_dir=cache)
  assert not builds  # refused before the folder is built, as keras refuses at once


@pytest.mark.parametrize("split", [0.2, 0.35])
def test_subsets_have_keras_sizes_disjoint_and_complete(tree, cache, split):
  ours, theirs = both(tree, cache, image_size=SIZE, validation_split=split, subset="both",
                      seed=7)
  for mine, keras_subset in zip(ours, theirs):
    assert len(list(mine.unbatch())) == len(list(keras_subset.unbatch()))
    assert mine.element_spec == keras_subset.element_spec
  assert not set(ours[0].file_paths) & set(ours[1].file_paths)
  assert sorted(ours[0].file_paths + ours[1].file_paths) == sorted(
      theirs[0].file_paths + theirs[1].file_paths)
  alone = imagesets.image_dataset_from_directory(
      tree, image_size=SIZE, validation_split=split, subset="validation", seed=7,
      cache_dir=cache, verbose=False)
  assert alone.file_paths == ours[1].file_paths  # the same build, the same subset
  assert elements(alone) == elements(ours[1])


def label_of_path(ds, root, path):
  return ds.class_names.index(class_folders_tree.label_of(os.path.relpath(path, root)))


# grain: keras' grain route decodes JPEGs with PIL, ours serves TensorFlow's decode (see
# docs/class_folders.md): a few levels apart, so element i is matched at that tolerance.
@pytest.mark.parametrize("fmt, tolerance", [("tf", 0.5), ("grain", 8)])
def test_unshuffled_output_is_keras_order_and_the_order_of_file_paths(tmp_path, cache, fmt,
                                                                      tolerance):
  # keras' idiom: zip(ds.file_paths, model.predict(ds)) with shuffle=False; nested folders
  # sort as keras walks them (a folder's files before its subfolders' files).
  files = small_files()
  files["bee/sub/00.jpg"] = files.pop("bee/03.jpg")
  root = write_tree(tmp_path / "tree", files)
  ours, theirs = both(root, cache, image_size=SIZE, shuffle=False, batch_size=None,
                      format=fmt)
  mine, keras_elements = pixels_and_labels(ours), pixels_and_labels(theirs)
  assert [os.path.relpath(p, root) for p in ours.file_paths] == [
      os.path.relpath(p, root) for p in theirs.file_paths]
  labels = [int(np.frombuffer(label, np.int32)[0]) for _, label in mine]
  assert labels == [label_of_path(ours, root, path) for path in ours.file_paths]
  for (image, label), (k_image, k_label) in zip(mine, keras_elements):
    assert label == k_label
    assert np.abs(image - np.clip(k_image, 0, 255)).max() <= tolerance


@pytest.mark.parametrize("seed", [1, 7, 1337])
@pytest.mark.parametrize("shuffle", [True, False])
def test_subsets_hold_the_files_keras_puts_in_them(tree, cache, seed, shuffle):
  ours, theirs = both(tree, cache, image_size=SIZE, validation_split=0.3, subset="both",
                      seed=seed, shuffle=shuffle)
  for mine, keras_subset in zip(ours, theirs):
    # with shuffle, file_paths are keras' pre-buffer order: the seeded shuffle of the list
    assert [os.path.relpath(p, tree) for p in mine.file_paths] == [
        os.path.relpath(p, tree) for p in keras_subset.file_paths]


def test_the_files_keras_reads_are_the_files_read(tmp_path, cache):
  # keras' index_directory: __MACOSX is a class, hidden files and folders inside a class
  # are read, .jpe is not an image suffix, a symlinked class folder is walked.
  files = small_files(("ant", "bee"))
  png = files["ant/drawing.png"]
  files.update({"ant/.hid/h.png": png, "ant/.hidden.png": png, "__MACOSX/ant/m.png": png,
                "bee/x.jpe": files["bee/00.jpg"]})
  root = write_tree(tmp_path / "tree", files)
  outside = write_tree(tmp_path / "outside", {"cow/0.png": png, "cow/1.png": png})
  os.symlink(os.path.join(outside, "cow"), os.path.join(root, "cow"))
  ours, theirs = both(root, cache, image_size=SIZE, shuffle=False)
  assert ours.class_names == theirs.class_names == ["__MACOSX", "ant", "bee", "cow"]
  assert [os.path.relpath(p, root) for p in ours.file_paths] == [
      os.path.relpath(p, root) for p in theirs.file_paths]
  assert_as_keras(ours, theirs)


def test_file_paths_are_keras_file_paths_under_the_folder_as_given(tmp_path, cache,
                                                                   monkeypatch):
  # keras joins the directory as given: relative stays relative, a symlink is not resolved
  root = write_tree(tmp_path / "photos", small_files(("ant", "bee")))
  os.symlink(root, tmp_path / "link")
  monkeypatch.chdir(tmp_path)
  for given in ("photos", "link/", pathlib.Path("photos")):
    ours, theirs = both(given, cache, image_size=SIZE, shuffle=False)
    assert ours.file_paths == theirs.file_paths


# labels=None (or label_mode=None): keras walks the root, folders sorted by path ("a-b"
# before "a/x", "-" sorting before "/"), not each class folder in turn.
@pytest.mark.parametrize("kwargs", [dict(labels=None), dict(label_mode=None)])
def test_unlabeled_files_are_in_keras_root_walk_order(tmp_path, cache, kwargs):
  files = small_files(("a", "a-b"))
  files["a/x/00.jpg"] = files.pop("a/03.jpg")
  root = write_tree(tmp_path / "tree", files)
  ours, theirs = both(root, cache, image_size=SIZE, shuffle=False, **kwargs)
  assert ours.file_paths == theirs.file_paths
  ours, theirs = both(root, cache, image_size=SIZE, validation_split=0.3, subset="both",
                      seed=5, **kwargs)
  assert [ds.file_paths for ds in ours] == [ds.file_paths for ds in theirs]
  labelled = imagesets.image_dataset_from_directory(root, image_size=SIZE, shuffle=False,
                                                    cache_dir=cache, verbose=False)
  assert labelled.file_paths == keras_view(root).file_paths  # each class folder in turn


def test_class_names_a_subset_reads_only_those_classes_as_keras(tree, cache):
  ours, theirs = both(tree, cache, image_size=SIZE, class_names=["cow", "ant"], shuffle=False)
  assert ours.class_names == theirs.class_names == ["cow", "ant"]
  assert [os.path.relpath(p, tree) for p in ours.file_paths] == [
      os.path.relpath(p, tree) for p in theirs.file_paths]
  assert_as_keras(ours, theirs)
  every = imagesets.image_dataset_from_directory(tree, image_size=SIZE, cache_dir=cache,
                                                 verbose=False)
  assert len(every.file_paths) > len(ours.file_paths)  # another build, not the subset's


@pytest.mark.parametrize("added", ["aardvark/notes.txt", "aardvark/0.jpg"])
def test_a_folder_added_beside_a_class_names_subset_keeps_the_labels(tmp_path, cache, added):
  # the build of the subset is reused (its files are unchanged), its labels stay keras'
  files = small_files()
  root = write_tree(tmp_path / "tree", files)
  call(root, cache, class_names=["cow", "ant"])
  write_tree(root, {added: files["ant/00.jpg"]})
  ours = call(root, cache, class_names=["cow", "ant"], batch_size=None)
  theirs = keras.utils.image_dataset_from_directory(
      root, image_size=SIZE, shuffle=False, verbose=False, class_names=["cow", "ant"])
  assert [int(label) for _, label in ours] == [
      int(label) for _, labels in theirs for label in labels]


def test_a_seed_gives_the_same_batches_and_epochs_reshuffle(tree, cache):
  def batches(ds):
    return [labels.numpy().tolist() for _, labels in ds]
  first = imagesets.image_dataset_from_directory(tree, image_size=SIZE, seed=3, batch_size=4,
                                                 cache_dir=cache, verbose=False)
  again = imagesets.image_dataset_from_directory(tree, image_size=SIZE, seed=3, batch_size=4,
                                                 cache_dir=cache, verbose=False)
  assert batches(first) == batches(again)
  assert batches(first) != batches(first)  # each epoch in a new order


@pytest.mark.parametrize("kwargs", [dict(), dict(batch_size=None, shuffle=False),
                                    dict(validation_split=0.3, subset="both", seed=1)])
def test_tf_datasets_start_no_autotune_thread(tree, cache, kwargs):
  # Issue 53: with tf.data's autotuning on, deleting an epoch's iterator (the end of every
  # `for batch in ds` loop and keras epoch) waited for its optimisation thread's next
  # wake-up, 10, 30, 70, ... ms after the iterator started: up to the epoch's own time.
  # Off for the datasets returned, and for what a user chains after them.
  made = imagesets.image_dataset_from_directory(tree, image_size=SIZE, cache_dir=cache,
                                                verbose=False, **kwargs)
  for ds in made if isinstance(made, list) else [made]:
    assert ds.options().autotune.enabled is False
    chained = ds.map(lambda *element: element, num_parallel_calls=tf.data.AUTOTUNE).prefetch(
        tf.data.AUTOTUNE)
    assert chained.options().autotune.enabled is False
    assert len(pixels_and_labels(chained)) == len(ds.file_paths)


def test_the_records_of_several_shards_are_read_file_after_file(tmp_path):
  paths = []
  for shard in range(3):
    paths.append(tmp_path / f"x.tfrecord-{shard:05d}-of-00003")
    with tf.io.TFRecordWriter(str(paths[-1])) as writer:
      for i in range(4 + shard):
        writer.write(f"{shard}-{i}".encode())
  read = [record.decode() for record in from_directory._records(paths).as_numpy_iterator()]
  assert read == [f"{shard}-{i}" for shard in range(3) for i in range(4 + shard)]


def call(root, cache, **kwargs):
  return imagesets.image_dataset_from_directory(root, image_size=SIZE, cache_dir=cache,
                                                shuffle=False, verbose=False, **kwargs)


def keras_view(root):
  return keras.utils.image_dataset_from_directory(root, image_size=SIZE, shuffle=False,
                                                  verbose=False)


def counted(monkeypatch, module, name) -> list:
  """Calls of module.name, which still runs."""
  calls, real = [], getattr(module, name)
  monkeypatch.setattr(module, name, lambda *a, **k: calls.append(a) or real(*a, **k))
  return calls


def test_each_call_walks_the_tree_once_and_splits_it_once(tmp_path, cache, monkeypatch):
  root = write_tree(tmp_path / "photos", small_files())
  walks = counted(monkeypatch, class_folders_tree, "keras_scan")
  assignments = counted(monkeypatch, from_directory, "keras_listing")
  first = imagesets.image_dataset_from_directory(
      root, image_size=SIZE, cache_dir=cache, validation_split=0.3, subset="both", seed=1,
      verbose=False)
  assert (len(walks), len(assignments)) == (1, 1)  # the build reuses the caller's listing
  again = imagesets.image_dataset_from_directory(
      root, image_size=SIZE, cache_dir=cache, validation_split=0.3, subset="both", seed=1,
      verbose=False)
  assert (len(walks), len(assignments)) == (2, 2)
  assert [ds.file_paths for ds in again] == [ds.file_paths for ds in first]
  assert sum(len(ds.file_paths) for ds in first) == len(small_files())


def test_later_calls_read_the_build_without_building(tmp_path, cache, monkeypatch):
  root = write_tree(tmp_path / "photos", small_files())
  first = call(root, cache)
  builds = counted(monkeypatch, named_build, "build")
  for content_check in (False, True):
    assert elements(call(root, cache, content_check=content_check)) == elements(first)
  assert not builds and len(list(cache.glob("folder_*"))) == 1


def _add(root):
  (root / "bee" / "new.jpg").write_bytes(sample_images.jpeg(21, 28, seed=999))


def _remove(root):
  (root / "bee" / "03.jpg").unlink()


def _rename(root):  # into another class: same bytes, size and mtime, another label
  (root / "bee" / "03.jpg").rename(root / "cow" / "03b.jpg")


def _edit(root):  # what an editor does: new bytes, a new mtime
  (root / "bee" / "03.jpg").write_bytes(sample_images.jpeg(21, 28, seed=999))


@pytest.mark.parametrize("change", [_add, _remove, _rename, _edit])
def test_a_changed_tree_is_rebuilt_and_the_old_build_removed(tmp_path, cache, change):
  root = pathlib.Path(write_tree(tmp_path / "photos", small_files()))
  first = elements(call(root, cache))
  (old_build,) = cache.glob("folder_*")
  stat = (root / "bee" / "03.jpg").stat()
  change(root)
  if change is _edit:  # mtimes can be coarser than two writes: make the new one visible
    os.utime(root / "bee" / "03.jpg", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
  changed = call(root, cache)
  assert elements(changed) != first
  assert_as_keras(changed, keras_view(root))
  assert sorted(changed.file_paths) == sorted(keras_view(root).file_paths)
  assert old_build.exists()  # this process may still read `first`'s build
  ended(cache)  # as if the process that read it had ended
  call(root, cache)
  (new_build,) = cache.glob("folder_*")
  assert new_build != old_build and not old_build.exists()


def test_a_same_size_same_mtime_replacement_is_seen_by_the_content_check(tmp_path, cache):
  # BMP: the file size depends only on the image size, as when a photo is replaced by
  # another of the same size with its mtime kept (cp -p, rsync -t, unpacking an archive).
  files = {**small_files(), "cow/scan.bmp": sample_images.encode(
      sample_images.photo(20, 30, seed=1), "BMP")}
  root = pathlib.Path(write_tree(tmp_path / "photos", files))
  first = elements(call(root, cache))
  target = root / "cow" / "scan.bmp"
  before = target.stat()
  target.write_bytes(sample_images.encode(sample_images.photo(20, 30, seed=2), "BMP"))
  os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
  assert (target.stat().st_size, target.stat().st_mtime_ns) == (before.st_size,
                                                               before.st_mtime_ns)
  # The quick check (paths, sizes, mtimes) cannot see it: documented, and the reason for
  # the option.
  assert elements(call(root, cache)) == first
  fresh = elements(call(root, cache, content_check=True))
  assert fresh != first
  assert_as_keras(call(root, cache), keras_view(root))
  assert len(list(cache.glob("folder_*"))) == 1
  assert elements(call(root, cache)) == fresh  # the rebuilt cache from now on


def ended(cache):
  """Lets go of this process's holds on the cache's builds, as a process that ends does."""
  for build in cache.glob("folder_*"):
    cache_use.release(build)


def test_the_cache_keeps_the_most_recently_used_builds(tmp_path, cache, monkeypatch):
  monkeypatch.setattr(from_directory, "MAX_CACHED_BUILDS", 2)
  roots = {name: write_tree(tmp_path / name, small_files(("ant", "bee")))
           for name in ("one", "two", "three")}
  built = lambda: sorted(entry.name.split("_")[1] for entry in cache.glob("folder_*"))  # noqa: E731
  call(roots["one"], cache)
  call(roots["two"], cache)
  assert built() == ["one", "two"]
  call(roots["one"], cache)  # used again: now "two" is the least recently used
  ended(cache)
  call(roots["three"], cache)
  assert built() == ["one", "three"]
  # Other options of the same folder are another build, kept beside it.
  ended(cache)
  imagesets.image_dataset_from_directory(roots["three"], image_size=(8, 8), cache_dir=cache,
                                         verbose=False)
  assert built() == ["three", "three"]


def test_a_build_a_dataset_of_this_process_reads_is_never_evicted(tmp_path, cache):
  root = write_tree(tmp_path / "photos", small_files(("ant", "bee")))
  first = imagesets.image_dataset_from_directory(root, image_size=(8, 8), cache_dir=cache,
                                                 verbose=False, batch_size=4)
  before = elements(first)
  for side in range(9, 9 + from_directory.MAX_CACHED_BUILDS):  # the 5th call evicted it
    imagesets.image_dataset_from_directory(root, image_size=(side, side), cache_dir=cache,
                                           verbose=False)
  assert elements(first) == before


_CALL = """
import sys, imagesets
ds = imagesets.image_dataset_from_directory(sys.argv[1], image_size=(24, 36), cache_dir=sys.argv[2],
                                            shuffle=False)
print("elements", len(list(ds.unbatch())), flush=True)
"""


def test_a_second_process_waits_for_the_build_under_way_and_reuses_it(tmp_path, cache):
  root = write_tree(tmp_path / "photos", small_files(("ant", "bee")))
  call(root, tmp_path / "built")  # what the first process's build makes
  (made,) = (tmp_path / "built").glob("folder_*")
  with build_lock.hold(cache / made.name / "1.0.0", made.name):  # this process is building
    second = subprocess.Popen([warm("python"), "-u", "-c", _CALL, str(root), str(cache)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines = []
    while not (lines and lines[-1].startswith(("Waiting for", "elements"))):
      line = second.stdout.readline()
      assert line, f"ended before waiting: {lines}"
      lines.append(line.strip())
    assert lines[-1].startswith(f"Waiting for pid {os.getpid()} ")
    shutil.copytree(made / "1.0.0", cache / made.name / "1.0.0")  # the build finishes
  rest = second.communicate(timeout=120)[0].splitlines()
  assert second.returncode == 0
  assert rest[-1] == "elements 15"
  assert not any(line.startswith("Building") for line in rest)  # reused, not built again


_HOLD_BUILD_LOCK = """
import fcntl, pathlib, sys, time
build = pathlib.Path(sys.argv[1])
(build / "incomplete.ABCDEF_1.0.0").mkdir(parents=True)
lock = open(build / ".1.0.0.lock", "a")
fcntl.flock(lock, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


def test_a_build_under_way_in_another_process_is_never_evicted(tmp_path, cache, monkeypatch):
  monkeypatch.setattr(from_directory, "MAX_CACHED_BUILDS", 1)
  building = cache / "folder_other_0123abcd_0123456789abcdef"
  builder = subprocess.Popen([sys.executable, "-c", _HOLD_BUILD_LOCK, str(building)],
                             stdout=subprocess.PIPE, text=True)
  try:
    assert builder.stdout.readline().strip() == "locked"
    root = write_tree(tmp_path / "photos", small_files(("ant", "bee")))
    call(root, cache)
    assert (building / "incomplete.ABCDEF_1.0.0").is_dir()
  finally:
    builder.kill()
    builder.wait()
  ended(cache)
  call(root, cache)  # its builder died: the folder is a leftover, evicted as any other
  assert not building.exists()


def test_large_photos_are_stored_as_keras_returns_them(tmp_path, cache):
  files = {"a/big.jpg": sample_images.jpeg(600, 800, seed=1),
           "b/big.jpg": sample_images.jpeg(900, 500, seed=2),
           "b/small.jpg": sample_images.jpeg(60, 80, seed=3),
           "b/drawing.png": sample_images.encode(sample_images.photo(300, 200, seed=4), "PNG")}
  root = write_tree(tmp_path / "big", files)
  ours, theirs = both(root, cache, image_size=(64, 96), shuffle=False)
  (build,) = cache.glob("folder_*")
  stored = tfds.builder_from_directory(build / "1.0.0")
  assert stored.info.metadata["keras_image"] == {
      "height": 64, "width": 96, "interpolation": "bilinear", "fit": "stretch",
      "color_mode": "rgb"}
  # Raw uint8 pixels of keras' output shape: a later epoch neither decodes nor resizes.
  assert stored.info.features["image"].shape == (64, 96, 3)
  assert stored.info.features["image"].np_dtype == np.uint8
  assert stored.info.file_format == tfds.core.FileFormat.TFRECORD  # uncompressed: cheap
  assert stored.info.splits["train"].num_examples == len(files)
  assert_as_keras(ours, theirs)
  # Another image_size, interpolation or format is another build beside it.
  imagesets.image_dataset_from_directory(root, image_size=(64, 96), interpolation="area",
                                         cache_dir=cache, verbose=False)
  grain = imagesets.image_dataset_from_directory(root, image_size=(64, 96), format="grain",
                                                 cache_dir=cache, verbose=False)
  assert len(list(cache.glob("folder_*"))) == 3
  assert_as_keras(grain, theirs)


def test_files_tensorflow_cannot_decode_are_the_bad_files(tmp_path, cache):
  # keras' condition: what its epoch would crash on. A damaged but decodable JPEG (a
  # corrupted byte in the entropy-coded data) is kept, as keras keeps it.
  damaged = bytearray(sample_images.jpeg(60, 80, seed=5))
  damaged[len(damaged) // 2] ^= 0x55
  files = {**small_files(), "ant/damaged.jpg": bytes(damaged), "bee/empty.jpg": b"",
           "cow/text.png": b"not a picture at all"}
  root = write_tree(tmp_path / "bad", files)
  with pytest.raises(problems.InvalidSourceError) as error:
    imagesets.image_dataset_from_directory(root, image_size=SIZE, cache_dir=cache)
  assert "bee/empty.jpg" in str(error.value) and "cow/text.png" in str(error.value)
  assert "damaged" not in str(error.value)


def test_store_resized_is_refused_with_what_to_do(tree, cache):
  with pytest.raises(ValueError, match="store_resized was removed.*leave the argument out"):
    imagesets.image_dataset_from_directory(tree, cache_dir=cache, store_resized=False)


def test_bad_files_are_named_on_the_first_call_or_skipped(tmp_path, cache):
  files = {**small_files(), "cow/cut.jpg": sample_images.jpeg(60, 80)[:400]}
  root = write_tree(tmp_path / "bad", files)
  with pytest.raises(problems.InvalidSourceError, match="cow/cut.jpg"):
    imagesets.image_dataset_from_directory(root, image_size=SIZE, cache_dir=cache)
  ds = imagesets.image_dataset_from_directory(root, image_size=SIZE, cache_dir=cache,
                                              skip_bad_files=True, verbose=False)
  assert len(list(ds.unbatch())) == len(files) - 1
  assert not any(path.endswith("cut.jpg") for path in ds.file_paths)


def test_the_skipped_files_warning_names_the_users_folder(tmp_path, cache, caplog):
  # Not the cache's internal build name (folder_bad_<options>_<tree>).
  root = write_tree(tmp_path / "bad", {**small_files(), "cow/cut.jpg": b"junk"})
  imagesets.image_dataset_from_directory(root, image_size=SIZE, cache_dir=cache,
                                         skip_bad_files=True, verbose=False)
  warnings = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
  assert len(warnings) == 1 and "folder_" not in warnings[0], warnings
  assert warnings[0].startswith(f"{pathlib.Path(root).resolve()}: skipped 1 bad file(s):")
  assert "cow/cut.jpg" in warnings[0]


def test_a_split_left_empty_by_skipped_files_is_named_with_them(tmp_path, cache):
  """With seed 1, keras' validation 17 % of these 6 files is the one bad file alone."""
  files = {f"c/{i}.jpg": sample_images.jpeg(30, 30, seed=i) for i in range(5)}
  root = write_tree(tmp_path / "allbad", {**files, "c/5.jpg": b"junk"})
  with pytest.raises(ValueError, match=r"split 'validation' has no examples left: 1 bad "
                     r"file\(s\) skipped \(c/5.jpg\); repair"):
    imagesets.image_dataset_from_directory(
        root, image_size=(8, 8), validation_split=0.17, subset="both", seed=1,
        skip_bad_files=True, cache_dir=cache, verbose=False)


def test_every_split_left_empty_by_skipped_files_is_named_in_the_one_error(tmp_path, cache):
  """TFDS stops at the first empty split; the others are checked and named with it."""
  root = write_tree(tmp_path / "junk", {f"c/{i}.jpg": b"junk%d" % i for i in range(4)})
  with pytest.raises(generation.EmptySplitError) as error:
    imagesets.image_dataset_from_directory(
        root, image_size=(8, 8), validation_split=0.5, subset="both", seed=1,
        skip_bad_files=True, cache_dir=cache, verbose=False)
  assert str(error.value) == (
      "splits 'train', 'validation' have no examples left: train: 2 bad file(s) skipped "
      "(c/2.jpg, c/3.jpg); validation: 2 bad file(s) skipped (c/0.jpg, c/1.jpg); repair or "
      "replace them, add images, or change the split proportions or seed")
  assert error.value.__suppress_context__


def test_splits_all_bad_without_skipping_get_the_one_error_listing_every_file(tmp_path, cache):
  """Not "skipped": the build's one error, every bad file with its reason, and the way out."""
  root = write_tree(tmp_path / "junk", {f"c/{i}.jpg": b"junk%d" % i for i in range(4)})
  with pytest.raises(problems.InvalidSourceError) as error:
    imagesets.image_dataset_from_directory(
        root, image_size=(8, 8), validation_split=0.5, subset="both", seed=1,
        cache_dir=cache, verbose=False)
  assert [p.where for p in error.value.problems] == [f"c/{i}.jpg" for i in range(4)]
  assert "skip_bad_files=True" in str(error.value)
  assert error.value.__suppress_context__  # (a traceback does not open on "skipped")


@pytest.mark.parametrize("kwargs, says", [
    (dict(labels=[0, 1]), "labels as a list"),
    (dict(color_mode="cmyk"), "color_mode must be one of"),
    (dict(interpolation="box"), "interpolation must be one of"),
    (dict(data_format="channels_middle"), "data_format"),
    (dict(validation_split=0.2), "subset"),
    (dict(validation_split=0.2, subset="training"), "seed"),
    (dict(crop_to_aspect_ratio=True, pad_to_aspect_ratio=True), "only one"),
    (dict(format="torch"), "format must be 'tf'"),
    # keras' own refusal (smart_resize knows fewer methods), before anything is built
    (dict(crop_to_aspect_ratio=True, interpolation="gaussian"), "interpolation"),
    (dict(class_names=["x", "y", "z"]), "did not match"),
    (dict(class_names=["ant", "bee"], label_mode=None), "class_names` cannot be specified"),
])
def test_unsupported_or_wrong_arguments_say_what_to_do(tree, cache, kwargs, says):
  with pytest.raises(ValueError, match=says):
    imagesets.image_dataset_from_directory(tree, cache_dir=cache, **kwargs)


def structure(ds) -> list:
  """(type, shape, dtype) of every part of every element, in order."""
  parts = lambda element: element if isinstance(element, tuple) else (element,)  # noqa: E731
  return [[(type(x), tuple(x.shape), str(x.dtype)) for x in parts(element)] for element in ds]


@pytest.mark.parametrize("label_mode", ["int", "categorical", "binary", None])
@pytest.mark.parametrize("subset", [None, "training", "validation", "both"])
def test_format_grain_returns_what_keras_returns(tmp_path, cache, label_mode, subset):
  root = write_tree(tmp_path / "two", small_files(("no", "yes")))
  split = dict(validation_split=0.3, subset=subset, seed=4) if subset else {}
  ours, theirs = both(root, cache, image_size=SIZE, format="grain", batch_size=4,
                      label_mode=label_mode, **split)
  ours, theirs = (list(ours), list(theirs)) if subset == "both" else ([ours], [theirs])
  as_tf = imagesets.image_dataset_from_directory(
      root, image_size=SIZE, batch_size=4, label_mode=label_mode, cache_dir=cache,
      verbose=False, **split)
  as_tf = list(as_tf) if subset == "both" else [as_tf]
  for mine, keras_subset, tf_subset in zip(ours, theirs, as_tf):
    assert type(mine) is type(keras_subset)
    assert mine.class_names == keras_subset.class_names
    assert structure(mine) == structure(keras_subset)  # batches, shapes, dtypes, types
    assert_as_keras(mine, tf_subset, tolerance=0)  # the same stored pixels as format="tf"
  # keras' grain route decodes with PIL: a few levels from TensorFlow's decoder, and so
  # from ours, on the same files.
  if not subset:
    assert_as_keras(ours[0], theirs[0], tolerance=8)


def test_format_grain_nearest_is_float32_as_keras_grain(tree, cache):
  # keras' grain route resizes float32 with keras.ops for every interpolation
  ours, theirs = both(tree, cache, image_size=SIZE, format="grain", batch_size=4,
                      interpolation="nearest", shuffle=False)
  assert structure(ours) == structure(theirs)


def test_format_grain_shuffles_by_seed(tree, cache):
  def labels(ds):
    return [np.asarray(label).tolist() for _, label in ds]
  first = imagesets.image_dataset_from_directory(tree, image_size=SIZE, seed=3, batch_size=4,
                                                 format="grain", cache_dir=cache, verbose=False)
  again = imagesets.image_dataset_from_directory(tree, image_size=SIZE, seed=3, batch_size=4,
                                                 format="grain", cache_dir=cache, verbose=False)
  assert labels(first) == labels(again)
  other = imagesets.image_dataset_from_directory(tree, image_size=SIZE, seed=4, batch_size=4,
                                                 format="grain", cache_dir=cache, verbose=False)
  assert labels(other) != labels(first)


def test_data_format_none_follows_keras_configured_image_data_format(tree, cache):
  before = keras.config.image_data_format()
  keras.config.set_image_data_format("channels_first")
  try:
    ours, theirs = both(tree, cache, image_size=SIZE, shuffle=False)
  finally:
    keras.config.set_image_data_format(before)
  assert ours.element_spec == theirs.element_spec
  assert ours.element_spec[0].shape[1:] == (3, *SIZE)
  assert_as_keras(ours, theirs)


def test_data_format_in_any_case_as_keras(tree, cache):
  ours, theirs = both(tree, cache, image_size=SIZE, shuffle=False, data_format="Channels_First")
  assert ours.element_spec == theirs.element_spec
  assert ours.element_spec[0].shape[1:] == (3, *SIZE)


def test_the_build_decodes_in_a_tf_data_map_not_per_file(tmp_path, cache, monkeypatch):
  # keras_pixels.PixelFeed makes every good file's pixels; the per-file eager route only
  # says why a file is bad.
  files = {**small_files(), "cow/cut.jpg": sample_images.jpeg(60, 80)[:400]}
  root = write_tree(tmp_path / "photos", files)
  eager = counted(monkeypatch, keras_pixels, "pixels")
  ds = imagesets.image_dataset_from_directory(root, image_size=SIZE, cache_dir=cache,
                                              skip_bad_files=True, verbose=False)
  assert len(eager) == 1  # cow/cut.jpg
  assert len(list(ds.unbatch())) == len(files) - 1
  assert not any(path.endswith("cut.jpg") for path in ds.file_paths)


def test_a_folder_that_does_not_exist_is_one_line_saying_what_to_give(tmp_path, cache):
  # Issue 37: it was "[Errno 2] No such file or directory", naming no fix.
  missing = tmp_path / "photoz"
  with pytest.raises(FileNotFoundError) as error:
    imagesets.image_dataset_from_directory(missing, image_size=SIZE, cache_dir=cache)
  assert str(error.value) == (f"{str(missing)!r} is not a folder: give the folder that holds "
                              "one sub-folder of images per class (root/<class>/<image files>)")
  assert not cache.exists()  # nothing built or cached
