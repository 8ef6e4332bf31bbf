"""Builds synthetic_images/tiny into DATA_DIR, stopping mid-generation until GO_FILE exists.

    held_build.py DATA_DIR GO_FILE

Prints "generating" once the build is under way (its incomplete folder written to), so a
test can kill it there (SIGKILL) or start a second build of the same version beside it.
"""

import pathlib
import sys
import time

import tensorflow_datasets as tfds

import imagesets  # noqa: F401
from imagesets.synthetic_images import synthetic_images_dataset_builder as synthetic

data_dir, go_file = sys.argv[1], pathlib.Path(sys.argv[2])
generate = synthetic.Builder._generate_examples


def held(self, split_id, count):
  for index, (key, example) in enumerate(generate(self, split_id, count)):
    if split_id == 1 and index == 2:  # train is written; test half done
      print("generating", flush=True)
      while not go_file.exists():
        time.sleep(0.05)
    yield key, example


synthetic.Builder._generate_examples = held
tfds.builder("synthetic_images/tiny", data_dir=data_dir).download_and_prepare()
print("built", flush=True)
