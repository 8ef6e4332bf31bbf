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
  `MEMORY_LIMIT`, then in one sequential spill file) and writes the shards
  TFDS would: the same shard count and boundaries (TFDS's `_get_shard_specs`), the same
  record bytes in the same order as TFDS's writer plus our deterministic writer, and as the
  Beam path (which is unchanged);
* a split whose records are all about one size (the keras cache: fixed-shape pixels) and
  whose count is known unless a file is bad is written straight into its shards, planned
  from its first record (`_write_planned`): no spill file, no second write. A plan the
  finished split does not match exactly (a skipped file) is undone: the shards written so
  far are read back, once, into the split's shards written as above.

Our builders generate their splits with `RecordSplitBuilder`, a SplitBuilder of their own
build (TFDS's class and every other dataset are untouched, and two builds in one process
share nothing): splits from `generation.Generation` (`LocalSplit`) are written as above;
splits a builder yields to TFDS itself (none of ours since synthetic_images moved to
`generation`; tested with a generator) get their records made and
sorted by hashed key here, in memory up to `MEMORY_LIMIT` and beyond it in `BUCKETS`
files by key range (TFDS's own shuffler holds up to 1 GB in RAM), and are written the
same way: the same bytes as TFDS's writer plus our deterministic writer.
"""

import itertools
import struct
import uuid
from typing import Callable, Iterable, Iterator

from etils import epath
import numpy as np
import tensorflow_datasets as tfds

import imagesets.tfds_internals as tfds_internals
from imagesets.storage import tfrecord_files

_LENGTH = struct.Struct("<Q")
_KEY = struct.Struct("<QQQ")  # a 128-bit hashed key and a record length

# Records kept in RAM per split before they go to disk (the rest stream through files).
MEMORY_LIMIT = 16 << 20
BUCKETS = 100


def hashed_order(split: str, keys: Iterable[str]) -> list[tuple[int, int]]:
  """(TFDS's hashed key, position) of each key, in the order TFDS's shuffle writes a split."""
  hash_key = tfds_internals.key_hasher(split)
  return sorted((hash_key(key), position) for position, key in enumerate(keys))


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
      self._specs = tfds_internals.flat_example_specs(self._features)
    encoded = tfds_internals.flatten_nest_dict(self._features.encode_example(example))
    if (encoded.keys() != self._specs.keys()
        or not all(isinstance(spec, tfds.features.TensorInfo) and spec.sequence_rank <= 1
                   for spec in self._specs.values())):  # ragged: TFDS adds fields
      return tfds_internals.dict_to_example(encoded, self._specs).SerializeToString(
          deterministic=True)
    record = tfds_internals.Example()
    record.features.SetInParent()  # (TFDS's Example has its Features even when empty)
    features = record.features.feature
    for key, value in encoded.items():
      spec = self._specs[key]
      if value is None and spec.optional:
        continue  # TFDS leaves it out of the proto
      if not _put_scalar(features[key], value, spec):
        features[key].CopyFrom(tfds_internals.item_to_feature(value, spec))
    return record.SerializeToString(deterministic=True)


def _put_scalar(feature, value, spec) -> bool:
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
  if isinstance(value, bytes) and tfds_internals.is_string_dtype(dtype):
    feature.bytes_list.value.append(value)
    return True
  if (type(value) is int and tfds_internals.is_integer_dtype(dtype) and dtype != np.uint64  # pylint: disable=unidiomatic-typecheck
      and (exact or dtype == np.int64 and -(1 << 63) <= value < 1 << 63)):
    feature.int64_list.value.append(value)
    return True
  return False


class LocalSplit:
  """What `Generation.examples` returns for a local build: iterating gives TFDS's
  `(key, example)` pairs; `records()` gives `(hashed key, record)` in shard order.
  `planned()`, when given: the number of records if every item is good, for a split whose
  records are all about one size (its shards can then be planned from its first record)."""

  def __init__(self, examples, records, planned: Callable[[], int] | None = None):
    self._examples, self._records = examples, records
    self.planned = planned
    # (records, filename template, file format) -> SplitInfo: a split that writes its own
    # shards (`incremental`: a version built on another); None: `write_split`.
    self.writer = None

  def __iter__(self):
    return self._examples()

  def records(self) -> Iterator[tuple[int, bytes]]:
    return self._records()


class _Spill:
  """Records in arrival order: first the shards of a plan undone (`adopt`), then in memory
  up to a limit, then in one sequential file."""

  def __init__(self, directory: epath.PathLike, limit: int):
    self._directory, self._limit = directory, limit
    self._memory, self._bytes, self._file, self._path = [], 0, None, None
    self._adopted = []
    self._adopted_total = (0, 0)  # (records, bytes) of the adopted files, as written
    self.count = 0
    self.size = 0

  def _temporary(self) -> epath.Path:
    return epath.Path(self._directory) / f"records_{uuid.uuid4().hex}.tmp"

  def adopt(self, paths, count: int, size: int) -> None:
    """Takes TFRecord files this build wrote (`count` records, `size` bytes) as the first
    records, read back as they are: no copy. Renamed, as the shards written from them may
    take their names; still in the build's folder (TFDS's incomplete one), so that a build
    killed now leaves nothing a later one trusts."""
    assert not self.count, "adopted files go first"
    for path in paths:
      moved = self._temporary()
      epath.Path(path).rename(moved)
      self._adopted.append(moved)
    self.count, self.size = count, size
    self._adopted_total = (count, size)

  def add(self, record: bytes) -> None:
    self.count += 1
    self.size += len(record)
    if self._file is None and self._bytes + len(record) <= self._limit:
      self._memory.append(record)
      self._bytes += len(record)
      return
    if self._file is None:
      self._path = self._temporary()
      self._path.parent.mkdir(parents=True, exist_ok=True)
      self._file = self._path.open("wb")
    self._file.write(_LENGTH.pack(len(record)))
    self._file.write(record)

  def __iter__(self) -> Iterator[bytes]:
    count = size = 0
    for path in self._adopted:
      for record in tfrecords(path):
        count, size = count + 1, size + len(record)
        yield record
    if self._adopted and (count, size) != self._adopted_total:  # (a length misread in a
      # header, its CRC unchecked, misframes the rest of the file)
      raise OSError(f"the planned shards read back as {count} records of {size} bytes, "
                    f"written as {self._adopted_total[0]} of {self._adopted_total[1]} "
                    f"({self._adopted[0].parent}): changed under the build; build again")
    yield from self._memory
    self._memory = []
    if self._file is None:
      return
    self._file.close()
    with self._path.open("rb") as spilled:
      while header := spilled.read(_LENGTH.size):
        yield spilled.read(_LENGTH.unpack(header)[0])

  def discard(self) -> None:
    for path in self._adopted:
      path.unlink(missing_ok=True)
    if self._file is not None:
      self._file.close()
      self._path.unlink(missing_ok=True)


def spill(directory: epath.PathLike) -> _Spill:
  """Records kept in arrival order, in memory up to MEMORY_LIMIT, beyond it in one file in
  `directory` (`add`, `count`, `size`, iterate once, `discard`)."""
  return _Spill(directory, MEMORY_LIMIT)


def write_split(split: str, records: Iterable[tuple[int, bytes]], filename_template,
                shard_config, file_format, *, writer=None,
                planned: Callable[[], int] | None = None) -> Callable[[], tfds.core.SplitInfo]:
  """Takes one split's records, given in shard order, and writes them as TFDS's Writer
  would; returns the SplitInfo's getter. With `writer` (a one-thread executor) the shards
  are written there, while the caller goes on with the next split's records (the workers
  would otherwise stall while a large split is written: ~20 % of a build). With `planned`
  (`LocalSplit.planned`) the shards are written as the records come (`_write_planned`)."""
  shard_config = shard_config or tfds_internals.ShardConfig()
  spill = _Spill(filename_template.data_dir, MEMORY_LIMIT)
  records = iter(records)  # (one pass: a plan undone goes on where it stopped)
  try:
    if planned is not None and _is_tfrecord(file_format):
      info, hkeys = _write_planned(split, records, planned, spill, filename_template,
                                   shard_config)
      if info is not None:
        return lambda: info
    else:
      hkeys = []
    hkeys = _take(split, records, spill, hkeys)
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


def _take(split, records, spill, hkeys) -> list[int]:
  for hkey, record in _unique(split, records, hkeys):
    spill.add(record)
  if not spill.count:
    raise AssertionError("No examples were yielded.")
  return hkeys


def _unique(split, records, hkeys):
  """The records, each key appended to `hkeys`; raises on a repeated key."""
  for hkey, record in records:
    if hkeys and hkey <= hkeys[-1]:  # (the order is ours: only equal keys get here)
      raise ValueError(f"two examples of split {split} have the same key: keys must be unique")
    hkeys.append(hkey)
    yield hkey, record


_TFRECORD = "tfrecord"  # the one format `_write_planned` reads back (`tfrecords`)


def _is_tfrecord(file_format) -> bool:
  return bool(file_format) and tfds.core.FileFormat(file_format) == tfds.core.FileFormat(_TFRECORD)


_PLAN_MARGIN = 0.01  # sizes within 1 % of the first record's: the keras cache's differ by its names


def _write_planned(split, records, planned, spill, filename_template, shard_config):
  """(SplitInfo, keys) of a split written straight into the shards TFDS's Writer would
  write if it has `planned()` records of about its first record's size; else (None, keys
  taken so far), with every record taken so far in `spill` and no shard left behind."""
  hkeys = []
  records = _unique(split, records, hkeys)
  first = next(records, None)
  if first is None:
    return None, hkeys
  count = planned()
  specs = [tfds_internals.shard_specs(count, round(len(first[1]) * count * factor),
                                      filename_template, shard_config)
           for factor in (1 - _PLAN_MARGIN, 1 + _PLAN_MARGIN)]
  if [spec.path for spec in specs[0]] != [spec.path for spec in specs[1]]:
    spill.add(first[1])  # near a shard-count step: the count waits for the real size
    return None, hkeys
  specs = specs[0]
  sizes = []
  stream = itertools.chain([first], records)
  written = []
  try:
    for spec in specs:
      written.append(spec.path)
      write_examples(spec.path, _sized(itertools.islice(stream, spec.examples_number), sizes),
                     _TFRECORD)
    extra = next(stream, None)  # (more records than items: never, but then not as planned)
    if extra is None and len(sizes) == count and [spec.path for spec in specs] == [
        spec.path for spec in tfds_internals.shard_specs(count, sum(sizes), filename_template,
                                                         shard_config)]:
      written = []  # as planned: the shards TFDS's Writer would write
      return tfds.core.SplitInfo(name=split,
                                 shard_lengths=[int(spec.examples_number) for spec in specs],
                                 num_bytes=sum(sizes), filename_template=filename_template), hkeys
    # Not as planned (a bad file skipped): the shards written are the spill's first records,
    # streamed into the final shards from where they are.
    spill.adopt(written, len(sizes), sum(sizes))
    written = []
    if extra is not None:
      spill.add(extra[1])
    return None, hkeys
  finally:
    for path in written:
      epath.Path(path).unlink(missing_ok=True)


def write_examples(path, items: Iterable[tuple], file_format) -> list | None:
  """A shard of (key, record) `items`, as TFDS's file adapter for `file_format` writes it;
  its record keys where the format has an index. A TFRecord shard on a local path is
  written here, without TensorFlow (the same bytes)."""
  if _is_tfrecord(file_format) and "://" not in str(path):
    tfrecord_files.write(path, (record for _, record in items))
    return None
  return tfds_internals.file_adapter(file_format).write_examples(path, items)


def _sized(records, sizes):
  for hkey, record in records:
    sizes.append(len(record))
    yield hkey, record


def tfrecords(path) -> Iterator[bytes]:
  """The records of a TFRecord file this build wrote (its framing: length, CRC, data, CRC);
  a file cut short (a disk that filled, a file truncated under the build) or a length past
  its end is an error, never a short record written on with a new CRC."""
  left = epath.Path(path).stat().length
  with epath.Path(path).open("rb") as records:
    while header := records.read(tfrecord_files.HEADER.size):
      whole = len(header) == tfrecord_files.HEADER.size
      length = tfrecord_files.HEADER.unpack(header)[0] if whole else 0
      framed = length + tfrecord_files.CRC.size  # (the data and its CRC)
      left -= len(header) + framed
      record = records.read(framed) if left >= 0 else b""  # (a bad length: no 2**60 read)
      if not whole or left < 0 or len(record) != framed:
        raise OSError(f"{path} is cut short: this build wrote it whole and read it back "
                      "shorter (a full disk, or the file changed under the build): build again")
      yield record[:length]


def _write_shards(split, hkeys, spill, filename_template, shard_config, file_format):
  specs = tfds_internals.shard_specs(spill.count, spill.size, filename_template, shard_config)
  stream = zip(hkeys, spill)
  for spec in specs:
    record_keys = write_examples(spec.path, itertools.islice(stream, spec.examples_number),
                                 file_format)
    if record_keys:  # formats with an index (as TFDS's Writer.finalize)
      tfds_internals.write_index_file(spec.index_path, record_keys)
  return tfds.core.SplitInfo(name=split,
                              shard_lengths=[int(spec.examples_number) for spec in specs],
                              num_bytes=spill.size, filename_template=filename_template)


class _Sorted:
  """(hashed key, record) pairs given in any order, given back sorted by key: in memory up
  to a limit, beyond it in BUCKETS files by key range, each read back and sorted alone
  (what TFDS's shuffler does, with a memory cap of our own instead of its 1 GB)."""

  def __init__(self, directory: epath.PathLike, limit: int):
    self._directory, self._limit = directory, limit
    self._memory, self._bytes, self._files = [], 0, None

  def add(self, hkey: int, record: bytes) -> None:
    if self._files is None:
      self._memory.append((hkey, record))
      self._bytes += len(record)
      if self._bytes > self._limit:
        self._spill()
      return
    self._write(hkey, record)

  def _spill(self) -> None:
    folder = epath.Path(self._directory) / f"buckets_{uuid.uuid4().hex}.tmp"
    folder.mkdir(parents=True, exist_ok=True)
    self._files = [(folder / f"{i}").open("wb") for i in range(BUCKETS)]
    self._folder = folder
    for hkey, record in self._memory:
      self._write(hkey, record)
    self._memory = []

  def _write(self, hkey: int, record: bytes) -> None:
    out = self._files[hkey * BUCKETS >> 128]  # TFDS's keys are 128-bit
    out.write(_KEY.pack(hkey >> 64, hkey & (1 << 64) - 1, len(record)))
    out.write(record)

  def __iter__(self) -> Iterator[tuple[int, bytes]]:
    if self._files is None:
      yield from sorted(self._memory, key=lambda pair: pair[0])
      self._memory = []
      return
    for out in self._files:
      out.close()
    for i in range(BUCKETS):
      pairs = []
      with (self._folder / f"{i}").open("rb") as bucket:
        while header := bucket.read(_KEY.size):
          high, low, length = _KEY.unpack(header)
          pairs.append(((high << 64) | low, bucket.read(length)))
      yield from sorted(pairs, key=lambda pair: pair[0])

  def discard(self) -> None:
    if self._files is not None:
      for out in self._files:
        out.close()
      for path in self._folder.iterdir():
        path.unlink()
      self._folder.rmdir()


def _sorted_records(split: str, examples, maker: RecordMaker, directory) -> Iterator:
  """A split TFDS would shuffle, as (hashed key, record) in shard order."""
  hash_key = tfds_internals.key_hasher(split)
  pending = _Sorted(directory, MEMORY_LIMIT)
  try:
    for key, example in examples:
      pending.add(hash_key(key), maker.make(example))
    yield from pending
  finally:
    pending.discard()


class RecordSplitBuilder(tfds_internals.SplitBuilder):
  """TFDS's SplitBuilder for one build of one of our builders (never installed anywhere
  else): local splits are written by `write_split`, on `shard_writer` (a one-thread
  executor), from records made by the workers (`LocalSplit`) or, for builders that yield
  their examples to TFDS, made and sorted here with a bounded memory; Beam splits, splits
  capped by `max_examples_per_split`, unshuffled splits and `ignore_duplicates` builds go
  through TFDS's own code."""

  def __init__(self, *, shard_writer, **kwargs):
    super().__init__(**kwargs)
    self._ours = dict(shard_writer=shard_writer, features=kwargs["features"],
                      shard_config=kwargs.get("shard_config"),
                      file_format=kwargs["example_writer"].file_format,
                      plain=(kwargs.get("max_examples_per_split") is None
                             and not kwargs.get("ignore_duplicates")))

  def submit_split_generation(self, split_name, generator, filename_template, disable_shuffling,
                              nondeterministic_order=False):
    ours = self._ours
    if (not ours["plain"] or disable_shuffling or nondeterministic_order
        or not isinstance(generator, Iterable)):
      return super().submit_split_generation(split_name, generator, filename_template,
                                             disable_shuffling, nondeterministic_order)
    planned = None
    if isinstance(generator, LocalSplit) and generator.writer is not None:
      info = generator.writer(generator.records(), filename_template, ours["file_format"])
      return _Done(lambda: info)
    if isinstance(generator, LocalSplit):
      records, planned = generator.records(), generator.planned
    else:
      records = _sorted_records(split_name, generator, RecordMaker(ours["features"]),
                                filename_template.data_dir)
    return _Done(write_split(split_name, records, filename_template, ours["shard_config"],
                             ours["file_format"], writer=ours["shard_writer"], planned=planned))


class _Done:
  """A split's future, as TFDS's `_generate_splits` uses it (`result()`)."""

  def __init__(self, result: Callable[[], tfds.core.SplitInfo]):
    self.result = result
