"""imagesets lives in other people's processes: importing it, building and reading change
nothing of TFDS, TensorFlow or absl, nor sys.meta_path or fd 2; two builds at once in one
process do not share state."""

import pathlib
import sys
import threading

from conftest import run, shard_bytes
from imagesets_testing import sample_images

# Runs in a fresh process: snapshot, then everything a user does with imagesets, then compare.
_SNAPSHOT_SCRIPT = r'''
import inspect, logging, os, sys, tempfile, pathlib
import absl.logging
import tensorflow as tf
import tensorflow_datasets as tfds

WATCHED = ("tensorflow", "tensorflow_datasets", "absl", "keras")


def watched(name):
  return name.split(".")[0] in WATCHED


def snapshot():
  found = {}
  for name, module in list(sys.modules.items()):
    if module is None or not watched(name):
      continue
    for key, value in list(vars(module).items()):
      found[(name, key)] = id(value)
      if (inspect.isclass(value) and watched(getattr(value, "__module__", "") or "")
          and value.__module__ == name):
        for attr, member in list(vars(value).items()):
          found[(name, f"{key}.{attr}")] = id(member)
  absl_logger = logging.getLogger("absl")
  found[("logging", "absl level")] = absl_logger.level
  found[("logging", "absl filters")] = tuple(map(id, absl_logger.filters))
  found[("sys", "meta_path")] = tuple(map(id, sys.meta_path))
  found[("sys", "path_hooks")] = tuple(map(id, sys.path_hooks))
  stat = os.fstat(2)
  found[("fd", "2")] = (stat.st_dev, stat.st_ino, os.readlink("/proc/self/fd/2"))
  found[("env", "TF_CPP_MIN_LOG_LEVEL")] = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
  return found


# TensorFlow's own lazily made state (eager context, flags): made by any first use.
tf.constant(0)
tf.data.Dataset.range(1).map(lambda x: x + 1).get_single_element()
# TFDS's usage-logging registry and call counter change on its API calls, whoever calls.
OWN_STATE = {("tensorflow_datasets.core.logging", "_registered_loggers"),
             ("tensorflow_datasets.core.logging.call_metadata", "_NEXT_SESSION_ID")}
before = snapshot()
modules_before = set(sys.modules)

import imagesets
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
changed = sorted(f"{module}: {key}" for (module, key), value in before.items()
                 if module in modules_before or module in ("logging", "sys", "fd", "env")
                 if after.get((module, key), "<gone>") != value
                 and (module, key) not in OWN_STATE)
print("CHANGED", len(changed))
for line in changed:
  print(line)
'''


def _photo_tree(root: pathlib.Path, count: int, classes: int, seed: int = 0) -> pathlib.Path:
  for i in range(count):
    path = root / f"class{i % classes}" / f"{i:03d}.jpg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(sample_images.jpeg(40 + i % 7, 50 + i % 5, seed=seed + i))
  return root


def test_import_build_and_read_change_nothing_of_tfds_tf_absl_or_the_process(tmp_path):
  root = _photo_tree(tmp_path / "photos", 12, 3)
  result = run([sys.executable, "-c", _SNAPSHOT_SCRIPT, str(tmp_path / "data"), str(root)])
  lines = result.stdout.strip().splitlines()
  report = lines[lines.index(next(l for l in lines if l.startswith("CHANGED"))):]
  assert report == ["CHANGED 0"], "\n".join(report)


def _build(root, name, data_dir):
  from imagesets.class_folders import class_folders_dataset_builder as class_folders
  builder = class_folders.Builder(
      config=class_folders.ClassFoldersConfig(name=name, root=str(root)), data_dir=data_dir)
  builder.download_and_prepare()
  return pathlib.Path(builder.data_dir)


def test_two_builds_at_once_in_two_threads_write_what_one_after_the_other_writes(tmp_path):
  trees = {"a": _photo_tree(tmp_path / "a", 60, 3, seed=0),
           "b": _photo_tree(tmp_path / "b", 48, 4, seed=100)}
  alone = {name: shard_bytes(_build(root, name, tmp_path / "alone")) for name, root in trees.items()}
  together, errors = {}, []

  def build(name):
    try:
      together[name] = shard_bytes(_build(trees[name], name, tmp_path / "together"))
    except BaseException as error:  # pylint: disable=broad-except
      errors.append(f"{name}: {type(error).__name__}: {error}")

  threads = [threading.Thread(target=build, args=(name,)) for name in trees]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert errors == []
  assert len(alone["a"]) >= 9 and together == alone
