"""Local builds: the workers make each finished record; TFDS's writer thread only writes them.

TFDS's writer runs on one thread of the build process: per example it encodes the features,
builds the tf.train.Example in Python, serializes it, hashes its key (md5) for the shuffle,
and puts it in shuffle buckets that are written to disk and read back; our deterministic
writer then parsed and re-serialized every record. On two cores that thread cost about as
much as the workers' image check (docs/performance.md). Here, instead:

* the driver hashes each key once, with TFDS's own hasher and salt (the split name), and
  hands a split's items to the workers already in that order, which is the order of the
  shards: nothing is left to shuffle;
* each worker turns its example into the final record: TFDS's feature encoding and
  Example, serialized in protobuf's deterministic form (`RecordMaker`);
* the writer thread keeps the records in arrival order (in memory up to
  `shuffle_memory.DEFAULT_LIMIT`, then in one sequential spill file) and writes the shards
  TFDS would: the same shard count and boundaries (TFDS's `_get_shard_specs`), the same
  record bytes in the same order as TFDS's writer plus our deterministic writer, and as the
  Beam path (which is unchanged).

`writing()` routes, while our builder generates its splits, the splits that come from
`generation.Generation` locally (`LocalSplit`) to this writer; every other split generator
(and every other dataset) goes through TFDS's own code.
"""

import concurrent.futures
import contextlib
import itertools
import struct
import uuid
from typing import Callable, Iterable, Iterator

from etils import epath
import numpy as np
from tensorflow_datasets.core import example_serializer
from tensorflow_datasets.core import hashing
from tensorflow_datasets.core import split_builder as split_builder_lib
from tensorflow_datasets.core import splits as splits_lib
from tensorflow_datasets.core import writer as writer_lib
from tensorflow_datasets.core import file_adapters
from tensorflow_datasets.core import utils as tfds_utils
from tensorflow_datasets.core.features import feature as feature_lib
from tensorflow_datasets.core.utils import dtype_utils
from tensorflow_datasets.proto import tf_example_pb2
from tensorflow_datasets.proto import tf_feature_pb2
from tensorflow_datasets.core.utils import shard_utils

from imagesets.building import shuffle_memory

_LENGTH = struct.Struct("<Q")


def hashed_order(split: str, keys: Iterable[str]) -> list[tuple[int, int]]:
  """(TFDS's hashed key, position) of each key, in the order TFDS's shuffle writes a split."""
  hasher = hashing.Hasher(split)
  return sorted((hasher.hash_key(key), position) for position, key in enumerate(keys))


class RecordMaker:
  """A picklable `example -> record` for the workers: TFDS's encoding and Example, serialized
  deterministically (so shards are byte-identical across runs and machines).

  TFDS builds each tf.train.Feature through numpy and copies it into the Example (0.19 ms
  for a class-folder example); scalars that are already of their feature's type (the
  encoded bytes, labels, sizes, names) are set in the proto in place instead, giving the
  same proto (tested), and everything else goes through TFDS's own conversion.
  """

  def __init__(self, features):
    self._features = features
    self._specs = None

  def __getstate__(self):
    return {"_features": self._features, "_specs": None}

  def make(self, example: dict) -> bytes:
    if self._specs is None:
      self._specs = example_serializer.ExampleSerializer(
          self._features.get_serialized_info())._flat_example_specs  # pylint: disable=protected-access
    encoded = tfds_utils.flatten_nest_dict(self._features.encode_example(example))
    if (encoded.keys() != self._specs.keys()
        or not all(isinstance(spec, feature_lib.TensorInfo) and spec.sequence_rank <= 1
                   for spec in self._specs.values())):  # ragged: TFDS adds fields
      return example_serializer._dict_to_tf_example(  # pylint: disable=protected-access
          encoded, self._specs).SerializeToString(deterministic=True)
    record = tf_example_pb2.Example()
    features = record.features.feature
    for key, value in encoded.items():
      spec = self._specs[key]
      if value is None and spec.optional:
        continue  # TFDS leaves it out of the proto
      if not _put_scalar(features[key], value, spec):
        features[key].CopyFrom(example_serializer._item_to_tf_feature(  # pylint: disable=protected-access
            *example_serializer._add_ragged_fields(value, spec)))  # pylint: disable=protected-access
    return record.SerializeToString(deterministic=True)


def _put_scalar(feature: tf_feature_pb2.Feature, value, spec) -> bool:
  """Sets `feature` to what TFDS's `_item_to_tf_feature` makes of `value`, directly (in
  place, no numpy) when it is a scalar of the spec's own type; else False."""
  if spec.shape != ():
    return False
  dtype = spec.np_dtype
  exact = isinstance(value, np.ndarray) and value.shape == () and value.dtype == dtype
  if exact:
    value = value.item()
  if isinstance(value, str):
    value = value.encode("utf-8")
  if isinstance(value, bytes) and dtype_utils.is_string(dtype):
    feature.bytes_list.value.append(value)
    return True
  if (type(value) is int and dtype_utils.is_integer(dtype) and dtype != np.uint64  # pylint: disable=unidiomatic-typecheck
      and (exact or dtype == np.int64 and -(1 << 63) <= value < 1 << 63)):
    feature.int64_list.value.append(value)
    return True
  return False


class LocalSplit:
  """What `Generation.examples` returns for a local build: iterating gives TFDS's
  `(key, example)` pairs; `records()` gives `(hashed key, record)` in shard order."""

  def __init__(self, examples, records):
    self._examples, self._records = examples, records

  def __iter__(self):
    return self._examples()

  def records(self) -> Iterator[tuple[int, bytes]]:
    return self._records()


class _Spill:
  """Records in arrival order: in memory up to a limit, then in one sequential file."""

  def __init__(self, directory: epath.PathLike, limit: int):
    self._directory, self._limit = directory, limit
    self._memory, self._bytes, self._file, self._path = [], 0, None, None
    self.count = 0
    self.size = 0

  def add(self, record: bytes) -> None:
    self.count += 1
    self.size += len(record)
    if self._file is None and self._bytes + len(record) <= self._limit:
      self._memory.append(record)
      self._bytes += len(record)
      return
    if self._file is None:
      self._path = epath.Path(self._directory) / f"records_{uuid.uuid4().hex}.tmp"
      self._path.parent.mkdir(parents=True, exist_ok=True)
      self._file = self._path.open("wb")
    self._file.write(_LENGTH.pack(len(record)))
    self._file.write(record)

  def __iter__(self) -> Iterator[bytes]:
    yield from self._memory
    self._memory = []
    if self._file is None:
      return
    self._file.close()
    with self._path.open("rb") as spilled:
      while header := spilled.read(_LENGTH.size):
        yield spilled.read(_LENGTH.unpack(header)[0])

  def discard(self) -> None:
    if self._file is not None:
      self._file.close()
      self._path.unlink(missing_ok=True)


def write_split(split: str, records: Iterable[tuple[int, bytes]], filename_template,
                shard_config, file_format, *, writer=None) -> Callable[[], splits_lib.SplitInfo]:
  """Takes one split's records, given in shard order, and writes them as TFDS's Writer
  would; returns the SplitInfo's getter. With `writer` (a one-thread executor) the shards
  are written there, while the caller goes on with the next split's records (the workers
  would otherwise stall while a large split is written: ~20 % of a build)."""
  spill = _Spill(filename_template.data_dir, shuffle_memory.DEFAULT_LIMIT)
  try:
    hkeys = _take(split, records, spill)
  except BaseException:
    spill.discard()
    raise

  def write():
    try:
      return _write_shards(split, hkeys, spill, filename_template, shard_config, file_format)
    finally:
      spill.discard()

  if writer is None:
    info = write()
    return lambda: info
  return writer.submit(write).result


def _take(split, records, spill) -> list[int]:
  hkeys = []
  for hkey, record in records:
    if hkeys and hkey <= hkeys[-1]:  # (the order is ours: only equal keys get here)
      raise ValueError(f"two examples of split {split} have the same key: keys must be unique")
    hkeys.append(hkey)
    spill.add(record)
  if not spill.count:
    raise AssertionError("No examples were yielded.")
  return hkeys


def _write_shards(split, hkeys, spill, filename_template, shard_config, file_format):
  specs = writer_lib._get_shard_specs(  # pylint: disable=protected-access
      num_examples=spill.count, total_size=spill.size, bucket_lengths=[spill.count],
      filename_template=filename_template,
      shard_config=shard_config or shard_utils.ShardConfig())
  adapter = file_adapters.ADAPTER_FOR_FORMAT[file_format]
  stream = zip(hkeys, spill)
  for spec in specs:
    record_keys = adapter.write_examples(spec.path, itertools.islice(stream, spec.examples_number))
    if record_keys:  # formats with an index (as TFDS's Writer.finalize)
      writer_lib._write_index_file(spec.index_path, record_keys)  # pylint: disable=protected-access
  return splits_lib.SplitInfo(name=split,
                              shard_lengths=[int(spec.examples_number) for spec in specs],
                              num_bytes=spill.size, filename_template=filename_template)


@contextlib.contextmanager
def writing():
  """Within the block, TFDS's SplitBuilder writes `LocalSplit`s with `write_split`, on a
  thread of their own (TFDS asks for every SplitInfo once all splits were generated)."""
  original = split_builder_lib.SplitBuilder._build_from_generator  # pylint: disable=protected-access

  def build_from_generator(self, split_name, generator, filename_template, disable_shuffling):
    if (not isinstance(generator, LocalSplit) or disable_shuffling
        or self._max_examples_per_split is not None):  # pylint: disable=protected-access
      return original(self, split_name, generator, filename_template, disable_shuffling)
    info = write_split(split_name, generator.records(), filename_template,
                       self._shard_config,  # pylint: disable=protected-access
                       self._example_writer.file_format,  # pylint: disable=protected-access
                       writer=shard_writer)
    return split_builder_lib._SplitInfoFuture(info)  # pylint: disable=protected-access

  with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="shards") as shard_writer:
    split_builder_lib.SplitBuilder._build_from_generator = build_from_generator  # pylint: disable=protected-access
    try:
      yield
    finally:
      split_builder_lib.SplitBuilder._build_from_generator = original  # pylint: disable=protected-access
