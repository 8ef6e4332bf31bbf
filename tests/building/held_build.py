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
from imagesets.building import prepared_records

data_dir, go_file = sys.argv[1], pathlib.Path(sys.argv[2])
write_split = prepared_records.write_split


def held(split, records, *args, **kwargs):
  """The build's split writer (in this process), held at the third record of test."""
  return write_split(split, _held(records) if split == "test" else records, *args, **kwargs)


def _held(records):
  for index, record in enumerate(records):
    if index == 2:  # train is written; test half done
      print("generating", flush=True)
      while not go_file.exists():
        time.sleep(0.05)
    yield record


prepared_records.write_split = held
tfds.builder("synthetic_images/tiny", data_dir=data_dir).download_and_prepare()
print("built", flush=True)
