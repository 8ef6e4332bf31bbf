"""Training straight from a team bucket: a published version read shard by shard.

`open_builder` gives a TFDS builder made from the version's small files (downloaded at
once into the shard cache, `publishing.shard_cache`); `records` gives the serialized
examples of a split in the streaming order, as `tf.data`; `RecordReader` reads them by
position for Grain. Both work on TFRecord and ArrayRecord builds.

The streaming order (docs/training_from_a_bucket.md): each epoch the worker's shards are
put in a seeded random order and read in windows of `window_shards` shards; the records of
a window are shuffled together. The cache needs only the window being read and the next
one, so a global shuffle, which touches every shard at once, is traded for shuffling within
a window (plus the pipelines' shuffle buffer on top). Without shuffling (evaluation), shards
are read in stored order. The order depends only on the seed, the epoch and the worker, so
a restored `tf.data` checkpoint or Grain iterator continues with the same examples.
"""

import dataclasses
import os
import pathlib
import struct
import threading

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from imagesets.publishing import shard_cache as shard_cache_lib

DEFAULT_WINDOW_SHARDS = 4   # shards whose records are shuffled together
_READ_BATCH = 64            # records read per call into Python
_STREAM_ATTRIBUTE = "_imagesets_shard_cache"


def is_bucket_url(data_dir) -> bool:
  """s3://, gs:// and file:// data_dirs are buckets (streamed); plain paths are TFDS data_dirs."""
  return data_dir is not None and "://" in str(data_dir)


_caches: dict[tuple, shard_cache_lib.ShardCache] = {}
_caches_lock = threading.Lock()


def shard_cache(url: str, spec: str, *, cache_dir=None, cache_limit=None
                ) -> shard_cache_lib.ShardCache:
  """One shard cache per (bucket, version, cache folder, limit) in a process."""
  key = (str(url), spec, str(cache_dir), cache_limit)
  with _caches_lock:
    if key not in _caches:
      _caches[key] = shard_cache_lib.ShardCache(url, spec, cache_dir=cache_dir,
                                                limit=cache_limit)
    return _caches[key]


def open_builder(spec: str, url: str, *, cache_dir=None, cache_limit=None):
  """A read-only TFDS builder of the published version `spec` at bucket `url`, whose
  shards are streamed (`records`)."""
  cache = shard_cache(url, spec, cache_dir=cache_dir, cache_limit=cache_limit)
  builder = tfds.builder_from_directory(str(cache.folder))
  setattr(builder, _STREAM_ATTRIBUTE, cache)
  return builder


def cache_of(builder) -> shard_cache_lib.ShardCache | None:
  """The shard cache of a streamed builder; None for a local one."""
  return getattr(builder, _STREAM_ATTRIBUTE, None)


@dataclasses.dataclass(frozen=True)
class Shard:
  name: str
  skip: int   # first record of the shard read (split slices such as train[:10%])
  take: int   # records read from it


@dataclasses.dataclass
class Plan:
  """The streaming order of one worker's shards: windows and record positions per epoch."""

  shards: list[Shard]
  window_shards: int
  shuffle: bool
  seed: int

  @property
  def windows_per_epoch(self) -> int:
    return -(-len(self.shards) // self.window_shards)

  @property
  def records_per_epoch(self) -> int:
    return sum(shard.take for shard in self.shards)

  def _shard_order(self, epoch: int) -> np.ndarray:
    if not self.shuffle:
      return np.arange(len(self.shards))
    return np.random.default_rng([self.seed, epoch]).permutation(len(self.shards))

  def windows(self, epoch: int) -> list[list[str]]:
    order = self._shard_order(epoch)
    return [[self.shards[i].name for i in order[start:start + self.window_shards]]
            for start in range(0, len(order), self.window_shards)]

  def positions(self, epoch: int) -> np.ndarray:
    """int64 [records_per_epoch, 3]: (shard index, record index, window of the run)."""
    order = self._shard_order(epoch)
    rng = np.random.default_rng([self.seed, epoch, 1]) if self.shuffle else None
    parts = []
    for window, start in enumerate(range(0, len(order), self.window_shards)):
      rows = np.concatenate([
          np.stack([np.full(self.shards[i].take, i),
                    np.arange(self.shards[i].skip, self.shards[i].skip + self.shards[i].take),
                    np.full(self.shards[i].take, epoch * self.windows_per_epoch + window)], 1)
          for i in order[start:start + self.window_shards]])
      parts.append(rng.permutation(rows) if rng is not None else rows)
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros([0, 3], np.int64)


def plan_for(builder, split: str, *, shuffle: bool, seed: int | None, input_context=None,
             shard_index: int = 0, shard_count: int = 1,
             window_shards: int = DEFAULT_WINDOW_SHARDS) -> Plan:
  """The worker's shards of `split` (every n-th, as TFDS's ReadConfig(input_context) does)."""
  if input_context is not None:
    shard_index, shard_count = input_context.input_pipeline_id, input_context.num_input_pipelines
  shards = [Shard(os.path.basename(i.filename), i.skip, i.take)
            for i in builder.info.splits[split].file_instructions if i.take]
  if len(shards) < shard_count:
    raise ValueError(
        f"{builder.info.full_name} split {split!r} has {len(shards)} shard file(s), fewer "
        f"than the {shard_count} input pipelines reading it: rebuild with --num_shards "
        f"{shard_count} or more")
  cache = cache_of(builder)
  window = cache.window_size_for(window_shards) if cache else window_shards
  return Plan(shards[shard_index::shard_count], window, shuffle, seed or 0)


class RecordReader:
  """Serialized records of a streamed split by (shard, record), read from the cache."""

  def __init__(self, cache: shard_cache_lib.ShardCache, plan: Plan, file_format: str,
               num_epochs: int | None):
    self.cache, self.plan, self.file_format = cache, plan, file_format
    self._offsets: dict[str, np.ndarray] = {}   # TFRecord: byte offset of every record
    self._lock = threading.Lock()
    self._read_plan = cache.add_reader(plan.windows, plan.windows_per_epoch, num_epochs)

  def read(self, positions: np.ndarray) -> list[bytes]:
    """Records at rows (shard index, record index, window) of `Plan.positions`."""
    out = [b""] * len(positions)
    for row in np.unique(positions[:, [2, 0]], axis=0):   # by window, then shard
      window, shard = int(row[0]), int(row[1])
      rows = np.flatnonzero((positions[:, 0] == shard) & (positions[:, 2] == window))
      name = self.plan.shards[shard].name
      records = self._read_shard(name, window, positions[rows, 1].tolist())
      for row_index, record in zip(rows, records):
        out[row_index] = record
    return out

  def _read_shard(self, name: str, window: int, indices: list[int]) -> list[bytes]:
    with self.cache.reading(name, self._read_plan, window) as path:
      if self.file_format == "array_record":
        from array_record.python import array_record_module
        # Opened per read: a reader kept open would hold an evicted shard's disk space.
        reader = array_record_module.ArrayRecordReader(str(path), "readahead_buffer_size:0")
        try:
          return reader.read(indices)
        finally:
          reader.close()
      return _read_tfrecords(path, self._tfrecord_offsets(name, path), indices)

  def _tfrecord_offsets(self, name: str, path: pathlib.Path) -> np.ndarray:
    with self._lock:
      offsets = self._offsets.get(name)
    if offsets is None:
      offsets = _tfrecord_offsets(path)
      with self._lock:
        self._offsets[name] = offsets
    return offsets


def _tfrecord_offsets(path: pathlib.Path) -> np.ndarray:
  """Start offsets of the records of a TFRecord file (each: u64 length, u32 CRC, data,
  u32 CRC). The file was checked against its SHA-256, so the CRCs are not re-checked."""
  offsets, position, size = [], 0, path.stat().st_size
  with open(path, "rb") as f:
    while position < size:
      offsets.append(position)
      f.seek(position)
      (length,) = struct.unpack("<Q", f.read(8))
      position += 16 + length
  return np.asarray(offsets, np.int64)


def _read_tfrecords(path: pathlib.Path, offsets: np.ndarray, indices: list[int]) -> list[bytes]:
  out = []
  with open(path, "rb") as f:
    for index in indices:
      f.seek(int(offsets[index]))
      (length,) = struct.unpack("<Q", f.read(8))
      f.seek(4, os.SEEK_CUR)
      out.append(f.read(length))
  return out


def records(builder, split: str, *, shuffle: bool, seed: int | None, num_epochs: int | None,
            input_context=None, deterministic: bool = True,
            window_shards: int = DEFAULT_WINDOW_SHARDS) -> tf.data.Dataset:
  """Serialized examples of a streamed split, `num_epochs` times (None: forever), as
  tf.data. Checkpointable: the positions come from the epoch number alone."""
  cache = cache_of(builder)
  plan = plan_for(builder, split, shuffle=shuffle, seed=seed, input_context=input_context,
                  window_shards=window_shards)
  reader = RecordReader(cache, plan, builder.info.file_format.value, num_epochs)

  def epoch_positions(epoch):
    rows = tf.numpy_function(lambda e: plan.positions(int(e)), [epoch], tf.int64,
                             stateful=False)
    rows.set_shape([None, 3])
    return tf.data.Dataset.from_tensor_slices(rows)

  def read_batch(rows):
    data = tf.numpy_function(lambda r: np.array(reader.read(r), dtype=object), [rows],
                             tf.string, stateful=False)
    data.set_shape([None])
    return data

  epochs = tf.data.Dataset.range(num_epochs if num_epochs is not None else np.iinfo(np.int64).max)
  ds = epochs.flat_map(epoch_positions).batch(_READ_BATCH).map(
      read_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic).unbatch()
  options = tf.data.Options()
  options.deterministic = deterministic
  # The numpy functions are pure functions of their inputs (the cache only makes files
  # appear), so iterator checkpoints may leave them out.
  options.experimental_external_state_policy = (
      tf.data.experimental.ExternalStatePolicy.IGNORE)
  return ds.with_options(options)


def load(dataset: str, split: str, data_dir: str, *, shuffle: bool = False,
         seed: int | None = None, num_epochs: int | None = 1, cache_dir=None, cache_limit=None,
         input_context=None, decoders=None) -> tf.data.Dataset:
  """Plain examples, as `tfds.load(dataset, split=split, data_dir=...)` gives them, of a
  version published at bucket `data_dir`, streamed. `decoders`: TFDS's (e.g.
  `{"image": tfds.decode.SkipDecoding()}`); `shuffle`: the streaming order by `seed`."""
  builder = open_builder(dataset, data_dir, cache_dir=cache_dir, cache_limit=cache_limit)
  features = builder.info.features
  ds = records(builder, split, shuffle=shuffle, seed=seed, num_epochs=num_epochs,
               input_context=input_context, deterministic=True)
  return ds.map(lambda record: features.deserialize_example(record, decoders=decoders),
                num_parallel_calls=tf.data.AUTOTUNE)


class PositionSource:
  """Records of a streamed split by position in the streaming order (epoch after epoch),
  for Grain: a sequential sampler over it reads the windowed order, and Grain's iterator
  state (the last position) resumes it exactly. Pickled to Grain's worker processes, where
  each opens the same shard cache (shared through its file locks)."""

  def __init__(self, url: str, spec: str, split: str, *, shuffle: bool, seed: int,
               num_epochs: int | None, shard_index: int = 0, shard_count: int = 1,
               cache_dir=None, cache_limit=None, window_shards: int = DEFAULT_WINDOW_SHARDS):
    self._args = dict(locals())
    del self._args["self"]
    self._open()

  def _open(self):
    args = self._args
    builder = open_builder(args["spec"], args["url"], cache_dir=args["cache_dir"],
                           cache_limit=args["cache_limit"])
    self.plan = plan_for(builder, args["split"], shuffle=args["shuffle"], seed=args["seed"],
                         shard_index=args["shard_index"], shard_count=args["shard_count"],
                         window_shards=args["window_shards"])
    self.reader = RecordReader(cache_of(builder), self.plan, builder.info.file_format.value,
                               args["num_epochs"])
    self._epoch, self._rows = None, None

  def __getstate__(self):
    return self._args

  def __setstate__(self, args):
    self._args = args
    self._open()

  def __repr__(self) -> str:  # Grain checks a restored state against it
    args = ", ".join(f"{k}={v!r}" for k, v in sorted(self._args.items()))
    return f"PositionSource({args})"

  def __len__(self) -> int:
    epochs = self._args["num_epochs"]
    return self.plan.records_per_epoch * (epochs if epochs is not None else 10**9)

  def __getitem__(self, position: int) -> bytes:
    epoch, within = divmod(int(position), self.plan.records_per_epoch)
    if epoch != self._epoch:
      self._epoch, self._rows = epoch, self.plan.positions(epoch)
    return self.reader.read(self._rows[within:within + 1])[0]
