"""imagesets lives in other people's processes: importing it, building and reading change
nothing of TFDS, TensorFlow or absl, nor sys.meta_path or fd 2; two builds at once in one
process do not share state."""

import importlib
import pathlib
import sys
import tempfile
import threading
import time

import pytest

import imagesets
from conftest import ENVIRONMENT_AT_START, run, shard_bytes
from imagesets_testing import sample_images

# Runs in a fresh process: snapshot, then everything a user does with imagesets, then compare.
_SNAPSHOT_SCRIPT = r'''
import gc, inspect, logging, os, sys, warnings
FIRST = sys.argv[4] == "imagesets first"
if FIRST:  # a script that imports imagesets before TensorFlow: what it changes is then
  import imagesets  # in the snapshot below: our code in TFDS's modules and finders of ours
  # in sys.meta_path show it (TensorFlow sets environment variables of its own when it loads)

# What a training script has loaded before it imports imagesets: TensorFlow, TFDS, absl,
# Grain, OpenCV, used once (TensorFlow and TFDS make some state on first use, whoever uses
# them). The snapshot is taken now, BEFORE any imagesets import, so that a change made when
# imagesets is imported is seen too.
import absl.logging
import cv2
import grain.python
import tensorflow as tf
import tensorflow_datasets as tfds
tf.constant(0)
tf.data.Dataset.range(1).map(lambda x: x + 1).get_single_element()
tf.image.resize(tf.io.decode_jpeg(tf.io.encode_jpeg(tf.zeros((4, 4, 3), tf.uint8))), (2, 2))


class UsersOwn(tfds.core.GeneratorBasedBuilder):
  # The user's own dataset, built and read before imagesets comes in: TFDS loads the modules
  # of building and reading lazily, and only modules loaded now are in the snapshot.
  VERSION = tfds.core.Version("1.0.0")

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
        {"image": tfds.features.Image(shape=(4, 4, 3)), "label": tfds.features.ClassLabel(num_classes=2)}))

  def _split_generators(self, dl_manager):
    return {"train": self._generate_examples()}

  def _generate_examples(self):
    for i in range(4):
      yield i, {"image": np.zeros((4, 4, 3), np.uint8), "label": i % 2}


import numpy as np
users_own = UsersOwn(data_dir=os.path.join(sys.argv[1], "users_own"))
users_own.download_and_prepare()
assert len(list(users_own.as_dataset(split="train"))) == 4

WATCHED = ("tensorflow", "tensorflow_datasets", "absl", "keras", "tf_keras")
OURS = os.path.dirname(os.path.abspath(sys.argv[3])) + os.sep  # the imagesets package


def watched(name):
  return name.split(".")[0] in WATCHED


def process_state():
  stat = os.fstat(2)
  absl_logger = logging.getLogger("absl")
  return {"meta_path": tuple(map(id, sys.meta_path)), "path_hooks": tuple(map(id, sys.path_hooks)),
          "fd 2": (stat.st_dev, stat.st_ino, os.readlink("/proc/self/fd/2")),
          "environment": dict(os.environ),
          "warnings.filters": (id(warnings.filters), tuple(warnings.filters)),
          "warnings.showwarning": id(warnings.showwarning),
          "sys.stderr": id(sys.stderr), "sys.stdout": id(sys.stdout),
          "sys.excepthook": id(sys.excepthook), "threading.excepthook": id(__import__("threading").excepthook),
          "gc freeze count": gc.get_freeze_count(), "gc thresholds": gc.get_threshold(),
          "opencv threads": cv2.getNumThreads(),
          "absl level": absl_logger.level, "absl filters": tuple(map(id, absl_logger.filters)),
          "absl handlers": tuple(map(id, absl_logger.handlers)),
          "absl logger class": type(absl_logger).__name__,
          "root logger": (logging.root.level, tuple(map(id, logging.root.handlers)))}


def ours(value) -> bool:
  # A function (or a module loader's bound method) whose code is in this repo's files.
  if inspect.ismethod(value):
    value = value.__func__
  return (inspect.isfunction(value)
          and os.path.abspath(value.__code__.co_filename).startswith(OURS))


def snapshot():
  # Every loaded module of TFDS, TensorFlow, absl and Keras (all their submodules), each
  # global and each attribute of the classes defined there, by identity.
  found = {}
  for name, module in list(sys.modules.items()):
    if module is None or not watched(name):
      continue
    loader = getattr(getattr(module, "__spec__", None), "loader", None)
    # (set on the loader instance only when someone swapped it)
    found[(name, "__spec__.loader.exec_module")] = getattr(loader, "__dict__", {}).get("exec_module")
    for key, value in list(vars(module).items()):
      found[(name, key)] = value
      if (inspect.isclass(value) and watched(getattr(value, "__module__", "") or "")
          and value.__module__ == name):
        for attr, member in list(vars(value).items()):
          found[(name, f"{key}.{attr}")] = member
  return found


# TFDS's usage-logging registry and call counter change on its API calls, whoever calls.
OWN_STATE = {("tensorflow_datasets.core.logging", "_registered_loggers"),
             ("tensorflow_datasets.core.logging.call_metadata", "_NEXT_SESSION_ID"),
             ("tensorflow_datasets.core.utils.lazy_imports_utils", "_ensure_tf_version_called")}
process_before = process_state()
before = snapshot()

import imagesets
process_imported = process_state()
imported = snapshot()
finders_imported = [type(finder).__module__ for finder in sys.meta_path]
from imagesets.class_folders import class_folders_dataset_builder as class_folders
from imagesets.reading import grain_pipeline

data_dir = sys.argv[1]
builder = class_folders.Builder(
    config=class_folders.ClassFoldersConfig(name="snap", root=sys.argv[2],
                                            split_proportions={"train": 0.5, "test": 0.5}),
    data_dir=data_dir)
builder.download_and_prepare()
synthetic = tfds.builder("synthetic_images/tiny", data_dir=data_dir)   # by name, through TFDS
synthetic.download_and_prepare()
ds = tfds.load("synthetic_images/tiny", split="train", data_dir=data_dir, download=False)
assert len(list(ds)) == 12
train = imagesets.classification_eval(builder, split="train", batch_size=2, image_size=32)
assert (sum(int(batch["label"].shape[0]) for batch in train)
        == builder.info.splits["train"].num_examples)

after = snapshot()
changed = [f"{module}: {key} changed by import imagesets" for (module, key), value in before.items()
           if imported.get((module, key), "<gone>") is not value and (module, key) not in OWN_STATE]
changed += [f"{module}: {key} changed by the build or read" for (module, key), value in imported.items()
            if after.get((module, key), "<gone>") is not value and (module, key) not in OWN_STATE]
changed += [f"{module}: {key} is our code" for (module, key), value in after.items() if ours(value)]


def difference(key, was, now):
  if key == "environment":  # the variables that differ
    return {name: (was.get(name), now.get(name)) for name in set(was) | set(now)
            if was.get(name) != now.get(name)}
  if key == "warnings.filters":
    return {"same list": was[0] == now[0], "added": [f for f in now[1] if f not in was[1]],
            "removed": [f for f in was[1] if f not in now[1]]}
  return f"{was} -> {now}"


# `import imagesets` changes nothing of the process; the imports of TFDS's own modules add
# import finders of their own, but no finder of ours is ever in sys.meta_path.
changed += [f"process: import imagesets changed {key}: {difference(key, value, process_imported[key])}"
            for key, value in process_before.items()
            if key != "meta_path" and process_imported[key] != value]
changed += [f"process: import imagesets put a finder of {module} in sys.meta_path"
            for module in finders_imported if module.startswith("imagesets")]
process_after = process_state()
changed += [f"process: {key} {difference(key, value, process_after[key])}"
            for key, value in process_before.items()
            if key != "meta_path" and process_after[key] != value]
changed += [f"process: a finder of ours in sys.meta_path: {finder!r}" for finder in sys.meta_path
            if type(finder).__module__.startswith("imagesets")]
print("CHANGED", len(changed))
for line in sorted(changed):
  print(line[:300])
'''


def _photo_tree(root: pathlib.Path, count: int, classes: int, seed: int = 0) -> pathlib.Path:
  for i in range(count):
    path = root / f"class{i % classes}" / f"{i:03d}.jpg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(sample_images.jpeg(40 + i % 7, 50 + i % 5, seed=seed + i))
  return root


@pytest.mark.parametrize("order", ["tensorflow first", "imagesets first"])
def test_import_build_and_read_change_nothing_of_tfds_tf_absl_or_the_process(tmp_path, order):
  root = _photo_tree(tmp_path / "photos", 12, 3)
  result = run([sys.executable, "-c", _SNAPSHOT_SCRIPT, str(tmp_path / "data"), str(root),
                str(pathlib.Path(imagesets.__file__)), order],
               env={**ENVIRONMENT_AT_START, "TMPDIR": tempfile.gettempdir()})  # (the run's)
  lines = result.stdout.strip().splitlines()
  report = lines[lines.index(next(l for l in lines if l.startswith("CHANGED"))):]
  assert report == ["CHANGED 0"], "\n".join(report)


# Per-build state that crosses if two builds share it: each build has its own shard count.
_SHARDS = {"a": 3, "b": 5}


def _build(root, name, data_dir, before_splits=None):
  import tensorflow_datasets as tfds
  from imagesets.class_folders import class_folders_dataset_builder as class_folders
  builder = class_folders.Builder(
      config=class_folders.ClassFoldersConfig(name=name, root=str(root),
                                              split_proportions={"train": 0.5, "test": 0.5}),
      data_dir=data_dir)
  if before_splits:  # a hook inside the build, where TFDS's split generation starts
    split_generators = builder._split_generators  # pylint: disable=protected-access

    def held(dl_manager):
      before_splits()
      return split_generators(dl_manager)

    builder._split_generators = held  # pylint: disable=protected-access
  builder.download_and_prepare(
      download_config=tfds.download.DownloadConfig(num_shards=_SHARDS[name]))
  return pathlib.Path(builder.data_dir)


def _process_objects():
  """What a build must not replace, read cheaply enough to poll while builds run: TFDS's
  writer, shuffler, hasher, builder classes and their modules, and the process's streams,
  hooks and warning filters."""
  import warnings
  modules = [importlib.import_module(f"tensorflow_datasets.core.{name}") for name in (
      "split_builder", "shuffle", "hashing", "writer", "dataset_builder", "example_serializer",
      "file_adapters", "naming", "registered")]
  namespaces = [vars(module) for module in modules]
  namespaces += [vars(value) for module in modules for value in list(vars(module).values())
                 if isinstance(value, type) and value.__module__ == module.__name__]
  return namespaces, lambda: (sys.stderr, sys.excepthook, warnings.filters, warnings.showwarning)


def test_two_builds_at_once_in_two_threads_write_what_one_after_the_other_writes(tmp_path):
  trees = {"a": _photo_tree(tmp_path / "a", 36, 3, seed=0),
           "b": _photo_tree(tmp_path / "b", 60, 4, seed=100)}
  alone = {name: shard_bytes(_build(root, name, tmp_path / "alone")) for name, root in trees.items()}
  assert [len(alone[name]) for name in "ab"] == [2 * 3, 2 * 5]  # 2 splits each
  together, errors, windows = {}, [], {}
  namespaces, process = _process_objects()
  state = [dict(namespace) for namespace in namespaces]
  process_state = process()
  seen_changes, done = [], threading.Event()
  # Both builds wait here, inside the build, until the other one got there too: their
  # split generation and writing run at the same time, whatever the scheduler does.
  both_inside = threading.Barrier(2, timeout=120)

  def watch():  # TFDS's classes and globals stay TFDS's, also while our builds run
    while not done.wait(0.002):
      seen_changes.extend(key for namespace, was in zip(namespaces, state)
                          for key, value in list(namespace.items()) if was.get(key) is not value)
      seen_changes.extend(f"process object {i}" for i, (now, was)
                          in enumerate(zip(process(), process_state)) if now is not was)

  def build(name):
    try:
      windows[name] = [None, None]

      def inside():
        both_inside.wait()
        windows[name][0] = time.monotonic()

      together[name] = shard_bytes(_build(trees[name], name, tmp_path / "together", inside))
      windows[name][1] = time.monotonic()
    except BaseException as error:  # pylint: disable=broad-except
      errors.append(f"{name}: {type(error).__name__}: {error}")

  watcher = threading.Thread(target=watch)
  watcher.start()
  threads = [threading.Thread(target=build, args=(name,)) for name in trees]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  done.set()
  watcher.join()
  assert errors == []
  (a_start, a_end), (b_start, b_end) = windows["a"], windows["b"]
  assert max(a_start, b_start) < min(a_end, b_end)  # the two builds overlapped
  assert together == alone  # each build wrote its own shards, with its own shard count
  assert sorted(set(seen_changes)) == []
  # and the process builds as before afterwards
  assert shard_bytes(_build(trees["a"], "a", tmp_path / "after")) == alone["a"]
