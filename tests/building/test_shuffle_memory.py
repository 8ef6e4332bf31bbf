"""shuffle_memory: TFDS spills to disk beyond the limit, and writes the same shards."""

import contextlib
import pathlib

from tensorflow_datasets.core import shuffle

from conftest import shard_bytes
from imagesets.building import prepared_records
from imagesets.building import shuffle_memory
from imagesets_testing import sample_images
from imagesets.class_folders import class_folders_dataset_builder as class_folders


def test_limit_is_restored_and_never_raised():
  before = shuffle.MAX_MEM_BUFFER_SIZE, shuffle.BUCKETS_NUMBER
  with shuffle_memory.limit(1234):
    assert (shuffle.MAX_MEM_BUFFER_SIZE, shuffle.BUCKETS_NUMBER) == (1234, shuffle_memory.BUCKETS)
  with shuffle_memory.limit(before[0] * 2):
    assert shuffle.MAX_MEM_BUFFER_SIZE == before[0]
  assert (shuffle.MAX_MEM_BUFFER_SIZE, shuffle.BUCKETS_NUMBER) == before


def test_spilling_to_disk_writes_the_same_shards(tmp_path, monkeypatch):
  # TFDS's writer, as builds whose examples are not made by `generation` use it (class
  # folders builds write prepared records, which spill on their own: test_prepared_records).
  monkeypatch.setattr(prepared_records, "writing", contextlib.nullcontext)
  root = tmp_path / "photos"
  for i in range(12):
    path = root / f"c{i % 2}" / f"{i}.jpg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(sample_images.jpeg(30, 40, seed=i))
  config = dict(name="spill", root=str(root), split_proportions={"train": 1.0})
  spills = []
  original = shuffle.Shuffler._add_to_bucket
  monkeypatch.setattr(shuffle.Shuffler, "_add_to_bucket",
                      lambda self, *a: spills.append(1) or original(self, *a))
  built = {}
  for limit in (1 << 30, 10_000):  # 10 kB: spills after a few photos (into 100 buckets)
    monkeypatch.setattr(shuffle_memory, "DEFAULT_LIMIT", limit)
    builder = class_folders.Builder(config=class_folders.ClassFoldersConfig(**config),
                              data_dir=tmp_path / str(limit))
    builder.download_and_prepare()
    built[limit] = shard_bytes(pathlib.Path(builder.data_dir))
    assert bool(spills) == (limit == 10_000)
  assert built[1 << 30] == built[10_000]
