"""The read side's one entry point: `open_source` gives a `Source`, whatever the data_dir.

    from imagesets.reading import sources
    source = sources.open_source("synthetic_images/tiny:1.0.0", "s3://team-bucket/tfds",
                                 cache_dir="/scratch/cache", cache_limit="20GB")
    for record in source.stored_records("train"):   # serialized tf.train.Examples
      ...

A `Source` is explicit about what is read: the TFDS `builder` (features, splits, the
file format), the `folder` holding the version's metadata, and `cache`: None when every
shard is a local file (a TFDS data_dir, or a version `fetch` copied whole), else the
bounded, content-addressed shard cache (`shard_cache`) its shards are streamed through
from the bucket. `stored_records(split)` gives the serialized examples of a split in stored
order, without TensorFlow; `streaming.records(source, split, ...)` the same as tf.data, or
in the seeded streaming order, reading shards with TensorFlow's C++ readers (a pass's last
window is unpinned when it ends, a dropped pipeline's when it is garbage collected).

A bucket data_dir is `s3://`, `gs://` or `file://`: the version is asked of the bucket
(`storage.transfer.open_version`; pinned versions cached before are read without it
when it cannot answer), its small files (dataset_info.json, features.json, ...) are
downloaded and checked at once, and its shards only as they are read.
"""

import dataclasses
import hashlib
import json
import os
import pathlib
from typing import Iterator

import tensorflow_datasets as tfds

from imagesets import constants
from imagesets import registry
from imagesets.storage import bucket as bucket_lib
from imagesets.storage import fetch as fetch_lib
from imagesets.storage import manifest as manifest_lib
from imagesets.storage import transfer
from imagesets.storage import versions
from imagesets.reading import shard_cache as shard_cache_lib
from imagesets.reading import shard_reads
from imagesets.reading import split_runs

_READ_BATCH = 64   # records read at a time in stored order


def is_bucket_url(data_dir) -> bool:
  """s3://, gs:// and file:// data_dirs are buckets (streamed); plain paths are TFDS data_dirs."""
  return data_dir is not None and "://" in str(data_dir)


def check_cache_options(data_dir, cache_dir, cache_limit) -> None:
  """`cache_dir` and `cache_limit` bound the shard cache of a bucket read; a local data_dir
  (a plain path, even a folder published to: it is read in place as a TFDS data_dir, with
  no cache and no check against the manifest) refuses them in one line, never ignores them."""
  if is_bucket_url(data_dir):
    return
  given = [f"{name}={value!r}" for name, value in (("cache_limit", cache_limit),
                                                    ("cache_dir", cache_dir)) if value is not None]
  if not given:
    return
  folder = os.path.abspath(os.path.expanduser(str(data_dir))) if data_dir else "/path/to/bucket"
  raise ValueError(
      f"{' and '.join(given)}: only a bucket read has a cache, and data_dir={data_dir!r} is "
      "read in place as a local TFDS data dir; for a version published to that folder, read "
      f"it through the verified, cached path with data_dir='file://{folder}', else leave "
      f"{' and '.join(g.split('=')[0] for g in given)} out")


class Reopened:
  """Pickled by its arguments `_args`; unpickled (in Grain's worker processes) by opening
  its sources again (`_open`): what it opened (files, caches, builders) stays in its
  process."""

  _args: dict

  def _open(self) -> None:
    raise NotImplementedError

  def __getstate__(self):
    return self._args

  def __setstate__(self, args):
    self._args = args
    self._open()


def digest(data) -> str | None:
  """A short digest of JSON `data` (a start position) for a repr; None stays None."""
  if data is None:
    return None
  data = data.to_json() if hasattr(data, "to_json") else data
  return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


@dataclasses.dataclass
class Source:
  """A prepared version to read: see the module's docstring."""

  builder: tfds.core.DatasetBuilder
  folder: pathlib.Path                      # dataset_info.json, features.json, ...
  cache: shard_cache_lib.ShardCache | None = None
  shards: dict = dataclasses.field(default_factory=dict)   # name -> shard_cache.Shard

  @property
  def file_format(self) -> str:
    """"tfrecord" or "array_record"."""
    return self.builder.info.file_format.value

  @property
  def streamed(self) -> bool:
    """Shards come from a bucket through the cache, in the streaming order."""
    return self.cache is not None

  @property
  def largest_shard(self) -> int:
    return max(shard.size for shard in self.shards.values())

  def store(self):
    """Shard files by name (`shard_reads`): local, or downloaded and held through the
    cache. One per reader: it holds that reader's shards."""
    if self.cache is None:
      return shard_reads.LocalShards(self.folder)
    return shard_reads.CachedShards(self.cache, self.shards)

  def stored_records(self, split: str) -> Iterator[bytes]:
    """The serialized examples of `split` in stored order, read without TensorFlow (a
    bucket's shards through the cache, each held while its records are read)."""
    run = split_runs.run_for(self, split, shuffle=False, seed=0, what="readers")
    reads = shard_reads.PlannedReads(self.store(), self.file_format, run, 0)
    try:
      count = len(reads.plan(0))
      for at in range(0, count, _READ_BATCH):
        yield from reads.read(0, at, min(_READ_BATCH, count - at))
    finally:
      reads.close()

  def stored_examples(self, split: str, decoders: dict | None = None) -> Iterator[dict]:
    """The examples of `split` in stored order as numpy rows, as TFDS's data source gives
    them (its numpy parser, `decoders` applied), read without TensorFlow."""
    features = self.builder.info.features
    for record in self.stored_records(split):
      yield features.deserialize_example_np(record, decoders=decoders)


# The name, config or version is not in `data_dir` (or the bucket); the message, one line,
# says what is there and the command that builds it (`versions.not_found`).
DatasetNotPreparedError = versions.DatasetNotPreparedError


def _ref(builder: tfds.core.DatasetBuilder) -> versions.Ref:
  config = builder.builder_config.name if builder.builder_config is not None else None
  return versions.Ref(builder.name, config, str(builder.version))


def _imports(builder: tfds.core.DatasetBuilder) -> str:
  """The module `tfds build --imports` needs for this builder's class."""
  return "imagesets" if builder.name in registry.NAMES else type(builder).__module__


def build_command(builder: tfds.core.DatasetBuilder) -> str:
  """The `tfds build` command that prepares exactly this builder's config in its data_dir."""
  return versions.build_command(dataclasses.replace(_ref(builder), version=None),
                                builder.data_dir_root, imports=_imports(builder))


def _default_data_dir() -> str:
  return os.path.expanduser(os.environ.get("TFDS_DATA_DIR") or constants.DEFAULT_DATA_DIR)


def _tfds_builder(spec: str, data_dir) -> tfds.core.DatasetBuilder:
  """`tfds.builder(spec)` reading `data_dir`; a name or version that is in neither our code
  nor `data_dir` is one line (not TFDS's list of every dataset it knows)."""
  data_dir = data_dir and os.path.expanduser(data_dir)  # TFDS does not expand "~" itself
  try:
    return tfds.builder(spec, data_dir=data_dir)
  except (tfds.core.DatasetNotFoundError, AssertionError) as error:
    if isinstance(error, AssertionError) and "cannot be loaded at version" not in str(error):
      raise
    try:
      ref = versions.Ref.parse(spec)
    except versions.PublishError:  # (a spec of TFDS's own: wildcards, namespaces)
      raise error from None
    raise DatasetNotPreparedError(versions.not_found(
        ref, data_dir or _default_data_dir())) from None


def open_builder(dataset, data_dir=None, *, cache_dir=None,
                 cache_limit=None) -> tfds.core.DatasetBuilder:
  """The prepared builder for `dataset` ("name[/config][:version]" or a builder).

  `data_dir` may be a team bucket URL (`s3://`, `gs://`, `file://`;
  docs/training_from_a_bucket.md): the builder then describes the published version
  (read its records through `open_source`). Raises DatasetNotPreparedError
  instead of downloading or building anything.
  """
  if isinstance(dataset, tfds.core.DatasetBuilder):
    check_cache_options(data_dir, cache_dir, cache_limit)
    builder = dataset
  elif is_bucket_url(data_dir):
    return open_source(dataset, str(data_dir), cache_dir=cache_dir,
                       cache_limit=cache_limit).builder
  else:
    check_cache_options(data_dir, cache_dir, cache_limit)
    builder = _tfds_builder(dataset, data_dir)
  if not builder.is_prepared():
    manual = (" (source archives already on disk: add --manual_dir DIR_WITH_THEM; nothing "
              "was downloaded)" if builder.MANUAL_DOWNLOAD_INSTRUCTIONS else "")
    raise DatasetNotPreparedError(versions.not_found(
        _ref(builder), builder.data_dir_root, imports=_imports(builder)) + manual)
  return builder


def raw_records(builder, split, part: tuple[int, int] = (0, 1)) -> "ArrayRecords":
  """The serialized tf.train.Examples of a local ArrayRecord split, by index (len, [i]);
  `part` (i, n): only the i-th of n contiguous parts of it (`part_range`)."""
  return ArrayRecords(builder.data_dir, split, part)


def part_range(count: int, part: tuple[int, int]) -> range:
  """The indices of part i of n of `count` records: contiguous, the first `count % n` parts
  one longer (as Grain's `even_split` deals them); every index in exactly one part."""
  index, parts = part
  size, longer = divmod(count, parts)
  start = index * size + min(index, longer)
  return range(start, start + size + (index < longer))


class ArrayRecords(Reopened):
  """TFDS's data source of a local ArrayRecord split (or a `part` of it), serialized
  records by index. Pickled (to Grain's worker processes) as its version folder, split and
  part, and opened there from the version's own files: a worker never imports the
  builder's code (nor TensorFlow)."""

  def __init__(self, folder, split: str, part: tuple[int, int] = (0, 1)):
    self._args = dict(folder=str(folder), split=split, part=tuple(part))
    self._open()

  def _open(self):
    self._records = tfds.builder_from_directory(self._args["folder"]).as_data_source(
        self._args["split"], deserialize_method=tfds.decode.DeserializeMethod.RAW_BYTES)
    self._indices = part_range(len(self._records), self._args["part"])

  def __repr__(self) -> str:  # (Grain checks a restored state against it)
    part = self._args["part"]
    return repr(self._records) + (f", part {part[0]} of {part[1]}" if part != (0, 1) else "")

  def __len__(self) -> int:
    return len(self._indices)

  def __getitem__(self, index):
    return self._records[self._indices[index]]

  def __getitems__(self, indices):
    return self._records.__getitems__([self._indices[i] for i in indices])

  def __iter__(self):
    return (self._records[i] for i in self._indices)


def open_source(name_or_spec, data_dir=None, *, cache_dir=None, cache_limit=None) -> Source:
  """The `Source` of a prepared version: `name_or_spec` is "name[/config][:version]" (or
  a TFDS builder); `data_dir` a TFDS data_dir (None: TFDS's default) or a bucket URL,
  whose shards are then read through a cache in `cache_dir` (default: `fetch`'s) of at
  most `cache_limit` bytes (an int or "20GB"; None: no limit). Raises
  `DatasetNotPreparedError` for a local version that is not built."""
  if isinstance(name_or_spec, tfds.core.DatasetBuilder) or not is_bucket_url(data_dir):
    builder = open_builder(name_or_spec, data_dir, cache_dir=cache_dir,
                                          cache_limit=cache_limit)
    return Source(builder, pathlib.Path(builder.data_dir))
  return _open_bucket_version(str(name_or_spec), str(data_dir), cache_dir, cache_limit)


def open_version(spec: str, data_dir) -> Source:
  """The `Source` of `name[/config]:x.y.z` in `data_dir`: a local build read in place, a
  bucket's (s3://, gs://, file://) through the cache."""
  if is_bucket_url(data_dir):
    return open_source(spec, str(data_dir))
  data_dir = pathlib.Path(data_dir).expanduser()
  ref = versions.resolve_local(versions.Ref.parse(spec), data_dir)
  return open_folder(data_dir / ref.folder)


def open_named(text: str, data_dir) -> Source:
  """The `Source` of a version as the command line names one: `name[/config]:x.y.z` in
  `data_dir`, or a whole `DATA_DIR/name[/config]:x.y.z` (a local path, or s3://, gs://,
  file://). A text read more than one way is tried each way, in order (`_readings`); when
  none opens, the error of its likeliest reading is raised, unless that reading is not even
  a spec (then the first error of one that is)."""
  readings, likeliest = _readings(text, data_dir)
  errors = []
  for spec, where in readings:
    try:
      return open_version(spec, where)
    except Exception as error:  # pylint: disable=broad-except  (the next reading may open)
      errors.append(error)
  raise next((e for e in (errors[likeliest], *errors) if not isinstance(e, versions.SpecError)),
             errors[likeliest])


def _readings(text: str, data_dir) -> tuple[list[tuple[str, str]], int]:
  """[(spec, data dir)] that `text` may mean, in the order to try them, and which one's
  error to show."""
  location, _, spec = text.rstrip("/").rpartition("/")
  if "://" not in text and not text.startswith(("/", "~", ".")):
    if not (location and os.path.isdir(location)):
      return [(text, data_dir)], 0
    # a relative DATA_DIR/NAME:VERSION (a folder here), else NAME/CONFIG:VERSION
    whole, _ = _readings(os.path.join(".", text), data_dir)
    return [*whole, (text, data_dir)], len(whole)
  parent, _, name = location.rpartition("/")
  # DATA_DIR/NAME:VERSION, else DATA_DIR/NAME/CONFIG:VERSION
  return [(spec, location)] + ([(f"{name}/{spec}", parent)] if parent else []), 0


def open_folder(folder) -> Source:
  """The `Source` of a prepared local version's folder, read from the version's own files
  (no builder code: what Grain's workers open)."""
  folder = pathlib.Path(folder)
  return Source(tfds.builder_from_directory(str(folder)), folder)


def _open_bucket_version(spec: str, url: str, cache_dir, cache_limit) -> Source:
  limit = shard_cache_lib.parse_size(cache_limit)
  bucket = bucket_lib.Bucket(url)
  data_dir = fetch_lib.cached_data_dir(url, cache_dir)
  ref, manifest = transfer.open_version(
      bucket, spec, lambda r: fetch_lib.cached_manifest(data_dir, r))
  whole = data_dir / ref.folder
  if fetch_lib.local_copy_ok(whole, deep=False, manifest=manifest):  # fetch's whole copy
    return open_folder(whole)
  root = fetch_lib.cache_root(cache_dir)
  folder = transfer.own_folder(whole.parent / f".stream-{ref.version}", root)
  names = _fetch_metadata(bucket, ref, manifest, folder)
  cache = shard_cache_lib.shared(root, limit)
  shards = {name: shard_cache_lib.Shard(manifest.files[name]["sha256"],
                                        manifest.files[name]["size"], bucket,
                                        f"{ref.folder}/{name}") for name in names}
  return Source(tfds.builder_from_directory(str(folder)), folder, cache, shards)


def _fetch_metadata(bucket, ref: versions.Ref, manifest: manifest_lib.Manifest,
                    folder: pathlib.Path) -> set[str]:
  """Everything but the shards, the page and the record index into `folder`, checked, so
  that TFDS can make a builder of it; the names of the shards (those its dataset_info.json
  names, whatever their pattern: each in the manifest), read through the shard cache.
  dataset_info.json first (it says which files are shards), features.json last."""
  transfer.remove_stale_parts(folder, recursive=True)  # a killed job's
  where, info = bucket.url_of(ref.folder), versions.DATASET_INFO
  manifest.check_loadable(where)
  _fetch_checked(bucket, ref, manifest, folder, info)
  shards = manifest.check_every_shard_listed(folder / info, where)
  small = [name for name in manifest.files
           if name not in shards and name != constants.PAGE_FILE
           and not name.startswith(constants.RECORD_INDEX_FOLDER + "/")]
  # (a version published again with other files: the old ones, in the new ones' way too)
  transfer.remove_others(folder, [*small, versions.MANIFEST])
  for name in sorted((n for n in small if n != info), key=lambda n: n == versions.MARKER):
    _fetch_checked(bucket, ref, manifest, folder, name)   # (dataset_info.json: above)
  manifest_path = folder / versions.MANIFEST
  if not manifest_path.is_file() or manifest_path.read_bytes() != manifest.to_bytes():
    transfer.write_atomically(manifest_path, manifest.to_bytes())
  return shards


def _fetch_checked(bucket, ref: versions.Ref, manifest: manifest_lib.Manifest,
                   folder: pathlib.Path, name: str) -> None:
  """The version's file `name` in `folder`, checked, unless it is there already."""
  path, entry = folder / name, manifest.files[name]
  if path.is_file() and bucket_lib.file_digests(path)[0] == entry["sha256"]:
    return
  transfer.own_folder(path.parent, folder)  # a nested folder: never through a symlink
  transfer.checked_download(bucket, f"{ref.folder}/{name}", path, entry)
