"""Helpers the publishing and CLI tests share: the tiny version, its examples, a version
made by hand, a killed publish."""

import json
import pathlib
import subprocess
import sys

import tensorflow_datasets as tfds

from conftest import REPO

TINY = "synthetic_images/tiny:1.0.0"
FOLDER = "synthetic_images/tiny/1.0.0"


def examples(data_dir, name=TINY):
  """Every example of every split, as comparable tuples, in file order."""
  return {split: [(e["image"].tobytes(), int(e["label"]), int(e["height"]), int(e["width"]))
                  for e in tfds.as_numpy(tfds.load(name, split=split, data_dir=str(data_dir),
                                                   download=False))]
          for split in ("train", "test")}


def small_version(data_dir, spec="ds/cfg:1.0.0", extra=None) -> pathlib.Path:
  """A prepared version of `spec` (NAME/CONFIG:VERSION) made by hand in `data_dir`, without
  TFDS: one split of one shard, and `extra` ({name: bytes}) besides; its folder. Enough for
  publish, list and fetch, which never load TensorFlow."""
  name, rest = spec.split("/")
  folder = pathlib.Path(data_dir, name, *rest.split(":"))
  folder.mkdir(parents=True, exist_ok=True)
  info = {"name": name, "fileFormat": "tfrecord",
          "splits": [{"name": "train", "shardLengths": ["2"]}]}
  (folder / "dataset_info.json").write_text(json.dumps(info))
  (folder / "features.json").write_text("{}")
  (folder / f"{name}-train.tfrecord-00000-of-00001").write_bytes(b"shard bytes" * 10)
  for file_name, data in (extra or {}).items():
    (folder / file_name).write_bytes(data)
  return folder


def kill_publisher_after(uploads, spec, data_dir, url, cwd, signal="KILL", preexec_fn=None):
  """Publishes `spec` in a process that sends itself `signal` when upload uploads + 1
  starts (`kill_after.py`); `preexec_fn` sets up the process before it starts."""
  result = subprocess.run(
      [sys.executable, str(REPO / "tests" / "kill_after.py"), str(uploads), signal, "publish",
       spec, "--data-dir", str(data_dir), "--to", url, "--quiet"],
      capture_output=True, text=True, cwd=cwd, preexec_fn=preexec_fn)
  if signal == "KILL":
    assert result.returncode == -9, result.stderr[-3000:]
  return result
