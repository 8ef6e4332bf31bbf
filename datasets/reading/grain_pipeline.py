"""Grain pipelines for JAX: numpy batches with static shapes, true global shuffling,
deterministic and checkpointable iteration, over `tfds.data_source` of ArrayRecord builds.

    from imagesets.reading import grain_pipeline          # pip install tfds-imagesets[grain]
    loader = grain_pipeline.classification_train("flowers", data_dir=D, batch_size=64, seed=0,
                                                 worker_count=2)
    iterator = iter(loader)
    batch = next(iterator)        # {"image": uint8 [64, 224, 224, 3], "label": int64 [64]}
    state = iterator.get_state()  # save it with your checkpoint ...
    iterator.set_state(state)     # ... and resume at exactly the next batch

What every pipeline does:

* Reads a local ArrayRecord build (`--file_format array_record`) by random access:
  Grain's `IndexSampler` shuffles all record indices by `seed` each epoch (global
  shuffle, no buffer) and gives process `shard_index` of `shard_count` (e.g.
  `jax.process_index()`, `jax.process_count()`) its own part of every epoch.
* A bucket `data_dir` (`s3://`, `gs://`, `file://`; TFRecord or ArrayRecord builds) is
  streamed instead, through the shard cache (`cache_dir`, `cache_limit`), and a local
  TFRecord build (no random access) read in place, in the read order (`order`):
  `RecordSource` is the split's records by stored index (finite), and `OrderSampler` owns epochs, shuffling and the partition: each process reads its own
  shards (`shard_index` of `shard_count`, every n-th), and each of its `worker_count`
  worker processes reads its own shards of them, in a seeded order per epoch, records
  shuffled within windows of shards, so each shard is downloaded once an epoch per
  machine whatever the worker count. Iterator states resume exactly (`set_state`), and
  `position(loader, state)` gives a position that resumes on another worker count
  (`start=`).
* Parses each record and decodes it in Grain's worker processes (`worker_count`; 0 = in
  this process) with `numpy_ops`: the same crop, flip, resize and mask-padding semantics
  as the tf.data pipelines (`input_pipeline`), random draws from Grain's per-record
  generator, so batches depend only on the seed, not on the worker count.
* Training repeats `num_epochs` times (None: forever) and drops the last partial batch;
  evaluation is one epoch in stored order.
* Detection (`detection_train`, `detection_eval`): keras 3's box dict, as input_pipeline's,
  each record's image and "objects" boxes and labels parsed by `parse_objects` and moved
  with the pixels by `numpy_box_ops`.
"""

import json
import logging
import threading

import numpy as np
import tensorflow_datasets as tfds

from imagesets import tfds_internals
from imagesets.reading import mixing
from imagesets.reading import numpy_box_ops
from imagesets.reading import numpy_ops
from imagesets.reading import order as order_lib
from imagesets.reading import pipeline_checks as checks
from imagesets.reading import shard_reads
from imagesets.reading import sources
from imagesets.reading import split_runs

_absl_logger = logging.getLogger("absl")
_importing_thread = threading.get_ident()


def _not_grain_jax_notice(record: logging.LogRecord) -> bool:
  """grain warns at import that JAX is absent: not our concern. Only that notice, from this
  import's own thread, is dropped (other threads' absl records pass; absl's level is the
  user's)."""
  return not (record.thread == _importing_thread and record.levelno < logging.ERROR
              and "jax" in record.getMessage().lower())


_absl_logger.addFilter(_not_grain_jax_notice)
try:
  import grain.python as grain
except ImportError as error:
  raise ImportError("Grain pipelines need grain: pip install 'tfds-imagesets[grain]'") from error
finally:
  _absl_logger.removeFilter(_not_grain_jax_notice)


def data_source(dataset, split: str, data_dir=None):
  """Raw records (serialized tf.train.Example) of an ArrayRecord build, by index."""
  builder = sources.open_builder(dataset, data_dir)
  if builder.info.file_format != tfds.core.FileFormat.ARRAY_RECORD:
    raise ValueError(
        f"{builder.info.full_name} in {builder.data_dir_root} is stored as "
        f"{builder.info.file_format.value}; Grain reads by random access: rebuild it with "
        "--file_format array_record (tfds build ... --file_format array_record, or "
        "imagesets build ... --file-format array_record)")
  return sources.raw_records(builder, split)


def parse(record: bytes, keys) -> dict:
  """{key: bytes or int} of a serialized tf.train.Example (first value of each feature)."""
  feature = tfds_internals.Example.FromString(record).features.feature
  out = {}
  for key in keys:
    value = feature[key]
    out[key] = value.bytes_list.value[0] if value.bytes_list.value else value.int64_list.value[0]
  return out


def parse_objects(record: bytes, image_key: str = "image",
                  objects_key: str = "objects") -> tuple[bytes, dict]:
  """(encoded image, {"bbox": float32 [N, 4], "label": int64 [N]}) of a serialized
  detection record. TFDS stores a `Sequence` of per-object features flattened, one list a
  field ("objects/bbox": N x 4 floats, "objects/label": N ints; empty lists for an image
  without objects): read as they are, the other fields (flags, poses) left unparsed."""
  feature = tfds_internals.Example.FromString(record).features.feature
  boxes = np.asarray(feature[f"{objects_key}/bbox"].float_list.value, np.float32)
  labels = np.asarray(feature[f"{objects_key}/label"].int64_list.value, np.int64)
  if boxes.size != 4 * labels.size:
    raise ValueError(f"a record with {boxes.size} box coordinates and {labels.size} labels "
                     f"(\"{objects_key}/bbox\" holds 4 per label)")
  return (feature[image_key].bytes_list.value[0],
          {"bbox": boxes.reshape(-1, 4), "label": labels})


class _Settings:
  """Keyword settings as attributes: the transforms are pickled to Grain's workers."""

  def __init__(self, **settings):
    self.__dict__.update(settings)


class TrainClassification(_Settings, grain.RandomMapTransform):
  """A record's crop and flip; a mix's record (part, record) also gives its "source", its
  label the mix's (`label_ids`)."""

  def random_map(self, record, rng):
    part, record = record if isinstance(record, tuple) else (None, record)
    features = parse(record, (self.image_key, self.label_key))
    image = numpy_ops.random_resized_crop(features[self.image_key], self.size, rng,
                                          self.area_range, self.aspect_ratio_range)
    if self.flip:
      (image,) = numpy_ops.random_flip(rng, image)
    if part is None:
      return {"image": image, "label": np.int64(features[self.label_key])}
    return {"image": image,
            "label": np.int64(mixing.mapped_labels(self.label_ids, part,
                                                   features[self.label_key])),
            "source": np.int64(part)}


class EvalClassification(_Settings, grain.MapTransform):
  def map(self, record):
    features = parse(record, (self.image_key, self.label_key))
    encoded = features[self.image_key]
    if self.mode == "central_crop":
      image = numpy_ops.central_crop(encoded, self.size, self.crop_fraction)
    else:
      image = numpy_ops.resize(numpy_ops.decode(encoded), self.size)
    return {"image": image, "label": np.int64(features[self.label_key])}


def _pair(record, settings):
  features = parse(record, (settings.image_key, settings.mask_key))
  return (numpy_ops.decode(features[settings.image_key]),
          numpy_ops.decode(features[settings.mask_key], 1))


class TrainSegmentation(_Settings, grain.RandomMapTransform):
  def random_map(self, record, rng):
    image, mask = numpy_ops.random_scale(*_pair(record, self), rng, self.scale_range)
    image, mask = numpy_ops.random_crop_or_pad(image, mask, self.size, rng)
    if self.flip:
      image, mask = numpy_ops.random_flip(rng, image, mask)
    return {"image": image, "mask": mask}


class EvalSegmentation(_Settings, grain.MapTransform):
  def map(self, record):
    image, mask = _pair(record, self)
    return {"image": numpy_ops.crop_or_pad(image, self.size, numpy_ops.IMAGE_PAD_VALUE),
            "mask": numpy_ops.crop_or_pad(mask, self.size, numpy_ops.MASK_PAD_VALUE)}


class TrainDetection(_Settings, grain.RandomMapTransform):
  """A record's random-resized crop with its boxes moved along (a box less than
  `min_visible` inside the crop dropped with its label), flip, keras 3's box dict
  (`numpy_box_ops`, the tf.data pipeline's `box_ops` semantics); a mix's record (part,
  record) also gives its "source", its labels the mix's (`label_ids`)."""

  def random_map(self, record, rng):
    part, record = record if isinstance(record, tuple) else (None, record)
    image, objects = parse_objects(record, self.image_key)
    if part is not None:
      objects["label"] = mixing.mapped_labels(self.label_ids, part, objects["label"])
    image, objects = numpy_box_ops.decode_and_random_crop(
        image, objects, self.size, rng, self.min_visible, self.area_range,
        self.aspect_ratio_range)
    if self.flip:
      image, objects = numpy_box_ops.random_flip_left_right(image, objects, rng)
    out = numpy_box_ops.to_keras(image, objects, self.max_boxes, self.bounding_box_format)
    return out if part is None else {**out, "source": np.int64(part)}


class EvalDetection(_Settings, grain.MapTransform):
  """mode "resize" (stretched, boxes unchanged) or "pad" (letterboxed, boxes moved into the
  frame, pixels rounded to uint8 as input_pipeline's), keras 3's box dict."""

  def map(self, record):
    image, objects = parse_objects(record)
    if self.mode == "resize":
      image, objects = numpy_box_ops.decode_and_resize(image, objects, self.size)
    else:
      image, objects = numpy_box_ops.decode_and_fit(image, objects, self.size, "pad")
      image = np.clip(np.round(image), 0, 255).astype(np.uint8)
    return numpy_box_ops.to_keras(image, objects, self.max_boxes, self.bounding_box_format)


_ENDLESS = 2**62  # sampler slots when epochs never end
# The read a sampler just planned, for the source's read of that key in this thread (Grain
# calls the sampler, then the source, in one thread): (key, (reader, pass, index) or
# _PADDING). A read of another key is not the planned one.
_announced = threading.local()
_PADDING = ()


class RecordSource(sources.Reopened):
  """The records of a split of a published version (`url`: the bucket, `spec` the version)
  or of a local TFRecord build (`url`: its version folder, `spec` its name), by stored
  index (`len` is the split's records), for Grain, a bucket's read through the shard
  cache. `reading_threads`: Grain's `ReadOptions.num_threads` of the loader (more than one straddle a window's end, so each
  reader may hold two windows: the windows are sized for that). A read planned by `OrderSampler` is
  read in the order's windows (`shard_reads.PlannedReads`: each shard held until its
  planned reads are done, the next window downloaded ahead); any other read (a notebook's
  `source[i]`) holds its one shard for that read. Pickled to Grain's worker processes,
  where each opens the same cache (shared through its file locks); nothing is downloaded
  before the first read."""

  def __init__(self, url: str, spec: str, split: str, *, shuffle: bool, seed: int,
               num_epochs: int | None, shard_index: int = 0, shard_count: int = 1,
               cache_dir=None, cache_limit=None,
               window_shards: int = split_runs.DEFAULT_WINDOW_SHARDS, worker_count: int = 0,
               start=None, reading_threads: int = 16):
    self._args = dict(locals())
    del self._args["self"]
    if isinstance(start, order_lib.Position):
      self._args["start"] = start.to_json()
    self._open()

  def _open(self):
    args = self._args
    self.source = (sources.open_source(args["spec"], args["url"], cache_dir=args["cache_dir"],
                                       cache_limit=args["cache_limit"])
                   if sources.is_bucket_url(args["url"])   # (else a local version's folder)
                   else sources.open_folder(args["url"]))
    split = args["split"]
    self.stored = split_runs.split_shards(self.source.builder, split)
    split_runs.check_readers(self.source.builder, split, self.stored, args["shard_count"],
                             "processes")
    # This process's shards: every shard_count-th, as TFDS's ReadConfig(input_context).
    mine = list(range(args["shard_index"], len(self.stored), args["shard_count"]))
    # Windows a reader holds at once: one, read by one thread (grain_pipeline's loaders);
    # two for several reading threads, which straddle a window's end.
    held = 1 if args["reading_threads"] == 1 else 2
    self.run = split_runs.run_for(
        self.source, split, shuffle=args["shuffle"], seed=args["seed"],
        readers=max(1, args["worker_count"]), window_shards=args["window_shards"],
        held=held, num_epochs=args["num_epochs"], start=args["start"],
        shards=[self.stored[i] for i in mine], what="Grain worker processes of a process")
    # stored index of the first record of each of this process's shards
    starts = np.cumsum([0] + [s.take for s in self.stored])
    self._first = [int(starts[i]) for i in mine]
    self._mine = {i: k for k, i in enumerate(mine)}   # split shard -> order shard
    self._starts = starts
    self._reads: dict[int, shard_reads.PlannedReads] = {}
    self._lock = threading.Lock()

  def __repr__(self) -> str:  # Grain checks a restored state against it
    args = {**self._args, "start": sources.digest(self._args["start"])}
    return f"RecordSource({', '.join(f'{k}={v!r}' for k, v in sorted(args.items()))})"

  def __len__(self) -> int:
    return int(self._starts[-1])

  def key(self, shard: int, record: int) -> int:
    """The stored index of record `record` of this process's shard `shard` (order's)."""
    return self._first[shard] + record - self.run.order.shards[shard].skip

  def reads(self, reader: int) -> shard_reads.PlannedReads:
    with self._lock:
      if reader not in self._reads:
        self._reads[reader] = shard_reads.PlannedReads(
            self.source.store(), self.source.file_format, self.run, reader)
      return self._reads[reader]

  def __getitem__(self, key: int):
    announced = getattr(_announced, "place", None)
    _announced.place = None
    place = announced[1] if announced is not None and announced[0] == key else None
    if place == _PADDING:
      return None
    if place is not None:
      reader, q, index = place
      return self.reads(reader).read(q, index)[0]
    return self._read_once(int(key))

  def _read_once(self, key: int) -> bytes:
    if not 0 <= key < len(self):
      raise IndexError(f"record {key} of a split of {len(self)} records")
    shard = int(np.searchsorted(self._starts, key, side="right")) - 1
    if shard not in self._mine:
      raise IndexError(f"record {key} is in a shard of another process "
                       f"(shard_index={self._args['shard_index']} of {self._args['shard_count']})")
    order_shard = self._mine[shard]
    record = self.stored[shard].skip + key - int(self._starts[shard])
    return self.reads(0).read_once(order_shard, [record])[0]


class OrderSampler:
  """Grain's sampler over a `RecordSource`: slot i is worker i % W's (Grain gives worker
  w the slots w, w + W, ...), its (i // W)-th record in its reader's passes of the
  order; a worker's slots past its last record are padding (dropped by `NotPadding`).
  Each record's random generator is keyed by the seed, the epoch and the record, so the
  augmentation does not depend on the worker count."""

  def __init__(self, source: RecordSource, worker_count: int, seed: int):
    self._source, self._workers, self._seed = source, max(1, worker_count), seed

  def __getstate__(self):
    return self._source, self._workers, self._seed

  def __setstate__(self, state):
    self.__init__(state[0], state[1], state[2])

  def __repr__(self) -> str:
    return f"OrderSampler(workers={self._workers}, seed={self._seed}, {self._source!r})"

  def __len__(self) -> int:
    run = self._source.run
    if run.num_passes is None:
      return _ENDLESS
    return self._workers * max(run.length(r) for r in range(self._workers))

  def _padding(self, reader: int, slot: int) -> bool:
    """Whether a reader's `slot` is past its last record."""
    run = self._source.run
    return run.num_passes is not None and slot >= run.length(reader)

  def __getitem__(self, index: int):
    if not 0 <= index < len(self):
      raise IndexError(index)
    reader, slot = index % self._workers, index // self._workers
    if self._padding(reader, slot):
      _announced.place = (0, _PADDING)
      return grain.RecordMetadata(index=index, record_key=0)
    q, at = self._source.run.place(reader, slot)
    shard, record = self._source.run.reader_pass(q, reader).rows[at].tolist()
    key = self._source.key(shard, record)
    epoch = self._source.run.epoch(q)
    rng = np.random.Generator(np.random.Philox(
        key=[self._seed % 2**64, epoch * len(self._source) + key]))
    _announced.place = (key, (reader, q, at))
    return grain.RecordMetadata(index=index, record_key=key, rng=rng)

  def position(self, state) -> dict:
    """The read position (JSON) of a loader's iterator state (`get_state()`'s bytes)."""
    run, at = self._source.run, []
    for reader, slot in enumerate(_slots_taken(state, self._workers)):
      if self._padding(reader, slot):   # all read (padding slots past its end)
        slot = run.length(reader)
      at.append(run.place(reader, slot))
    return run.position(at).to_json()


def _slots_taken(state, workers: int) -> list[int]:
  """How many of its sampler slots each of a loader's `workers` took, at iterator `state`
  (`get_state()`: Grain's last index seen per worker; worker w's slots are w, w + W, ...)."""
  data = json.loads(state.decode() if isinstance(state, bytes) else state)
  if max(1, int(data["worker_count"])) != workers:
    raise ValueError(f"a state of {max(1, int(data['worker_count']))} workers given to a "
                     f"sampler of {workers}")
  lasts = [int(data["last_seen_indices"][str(w)]) for w in range(workers)]
  return [(last - w) // workers + 1 if last >= w else 0 for w, last in enumerate(lasts)]


class NotPadding(grain.FilterTransform):
  """Drops the sampler's padding slots (a worker whose reader has fewer records)."""

  def filter(self, element) -> bool:
    return element is not None


class MixedSource(sources.Reopened):
  """A mix's records for Grain by key: key k is position k // R of reader k % R (R: the
  job's readers, `shard_count` processes of `worker_count` workers each), read as
  (part, serialized record) through the mix's run (`mixing.MixedRun`). Pickled to Grain's
  worker processes by its arguments; each opens the parts again."""

  def __init__(self, mix, readers: int, *, start=None, num_epochs=None, held: int = 1):
    self._args = dict(mix=mix, readers=readers, start=start, num_epochs=num_epochs, held=held)
    self._open()

  def _open(self):
    args = self._args
    self.run = args["mix"].run(args["readers"], start=args["start"], held=args["held"],
                               num_epochs=args["num_epochs"])

  def __repr__(self) -> str:  # Grain checks a restored state against it
    return (f"MixedSource(mix={self.run.mix.fingerprint}, readers={self.run.readers}, "
            f"start={sources.digest(self._args['start'])}, "
            f"num_epochs={self._args['num_epochs']})")

  def __len__(self) -> int:
    return _ENDLESS

  def __getitem__(self, key: int):
    # (Grain reads key % len(self): the padding key is a key of its own, read as nothing)
    if key == _MIXED_PADDING:
      return None   # a worker's slot past its reader's end (`NotPadding` drops it)
    return self.run.read_one(int(key) % self.run.readers, int(key) // self.run.readers)


# The key of a mixed sampler's padding slot: within the source's length (Grain takes keys
# modulo it), past every position's key (j * readers + reader < 2**62 - 1 for any real job).
_MIXED_PADDING = _ENDLESS - 1


class MixedSampler:
  """Grain's sampler over a `MixedSource`: slot i is worker w = i % W's (Grain's split),
  its (i // W)-th position; the worker is reader p * W + w of the job (p: this process,
  `shard_index`). Each record's random generator is keyed by the seed and the example's
  count in the job, so a resumed job draws the same crops."""

  def __init__(self, source: MixedSource, worker_count: int, process: int, seed: int):
    self._source, self._workers, self._process, self._seed = (
        source, max(1, worker_count), process, seed)

  def __getstate__(self):
    return self._source, self._workers, self._process, self._seed

  def __setstate__(self, state):
    self.__init__(*state)

  def __repr__(self) -> str:
    return (f"MixedSampler(workers={self._workers}, process={self._process}, "
            f"seed={self._seed}, {self._source!r})")

  def _reader(self, worker: int) -> int:
    return self._process * self._workers + worker

  def __len__(self) -> int:
    run = self._source.run
    ends = [run.length(self._reader(w)) for w in range(self._workers)]
    if ends[0] is None:
      return _ENDLESS
    # (a run continued with fewer epochs than its position read: nothing left, not < 0)
    return self._workers * max(max(0, end - run.offsets[self._reader(w)])
                               for w, end in enumerate(ends))

  def __getitem__(self, index: int):
    if not 0 <= index < len(self):
      raise IndexError(index)
    run = self._source.run
    reader = self._reader(index % self._workers)
    j = run.offsets[reader] + index // self._workers
    end = run.length(reader)
    if end is not None and j >= end:   # padding: no read (see MixedSource.__getitem__)
      return grain.RecordMetadata(index=index, record_key=_MIXED_PADDING)
    rng = np.random.Generator(np.random.Philox(
        key=[self._seed % 2**64, int(run.global_index(reader, j))]))
    return grain.RecordMetadata(index=index, record_key=j * run.readers + reader, rng=rng)


class Loader(grain.DataLoader):
  """Grain's DataLoader, keeping the sampler it reads by (`read_by`: `position` asks it)."""

  def __init__(self, *, sampler, **options):
    super().__init__(sampler=sampler, **options)
    self.read_by = sampler


def position(loader, state) -> dict:
  """The read position of `loader`'s iterator `state` (`iterator.get_state()`), as JSON:
  give it as `start=` to a loader of the same dataset, split, seed and cache_limit with any
  `worker_count`, to read every record the state had not read, exactly once."""
  sampler = getattr(loader, "read_by", None)
  if isinstance(sampler, MixedSampler):
    return _mixed_position(sampler, state)
  if not isinstance(sampler, OrderSampler):
    raise ValueError("position() is for the loaders this module makes of a bucket data_dir "
                     "or a TFRecord build (a local ArrayRecord build resumes with Grain's own "
                     "set_state, on the same worker count)")
  return sampler.position(state)


def _mixed_position(sampler: MixedSampler, states) -> dict:
  """A mixed loader's position: `states` is its iterator state, or with several processes
  (shard_count) the list of every process's state, in shard_index order."""
  run, workers = sampler._source.run, sampler._workers
  processes = run.readers // workers
  states = states if isinstance(states, (list, tuple)) else [states]
  if len(states) != processes:
    raise ValueError(f"a mix read by {processes} processes: give every process's iterator "
                     f"state (a list of {processes}, in shard_index order), not {len(states)}")
  # (reader p * W + w is process p's worker w; slots past a reader's end are padding)
  slots = [slot for state in states for slot in _slots_taken(state, workers)]
  ends = [run.length(reader) for reader in range(run.readers)]
  taken = [slot if end is None else min(slot, max(0, end - offset))
           for slot, end, offset in zip(slots, ends, run.offsets)]
  return run.position(taken).to_json()


def _mixed_loader(mix, transform, *, batch_size, seed, num_epochs, drop_remainder,
                  shard_index, shard_count, worker_count, start):
  """A mix's loader: every worker of every process one reader of the mix's run."""
  readers = shard_count * max(1, worker_count)
  checks.check_batches(mix.examples_per_epoch, "", batch_size, num_epochs, drop_remainder,
                       readers, what="an epoch of the mix")
  source = MixedSource(mix, readers, start=start, num_epochs=num_epochs,
                       held=1 if _READ_OPTIONS.num_threads == 1 else 2)
  if shard_count > 1 and num_epochs is not None and drop_remainder and start is None:
    run, workers = source.run, max(1, worker_count)
    shares = [run.length(r) for r in range(readers)]   # (a fresh run: every offset 0)
    checks.check_process_shares(
        [max(shares[p * workers:(p + 1) * workers]) for p in range(shard_count)], batch_size,
        "the mix's run", "each worker reads its own shards of each part")
  sampler = MixedSampler(source, worker_count, shard_index, mix.seed if seed is None else seed)
  transform.label_ids = mix.label_ids
  if isinstance(transform, TrainDetection):
    transform.image_key = mix.image_key
  padded = [NotPadding()] if num_epochs is not None else []   # (an endless run has none)
  return Loader(
      data_source=source, sampler=sampler, worker_count=worker_count,
      operations=[*padded, transform, grain.Batch(batch_size, drop_remainder)],
      shard_options=grain.NoSharding(), read_options=_READ_OPTIONS)


_MIXED_TASKS = {TrainClassification: mixing.schema_lib.CLASSIFICATION,
                TrainDetection: mixing.schema_lib.DETECTION}


def _loader(dataset, split, data_dir, transform, *, batch_size, train, seed, num_epochs,
            drop_remainder, shard_index, shard_count, worker_count, cache_dir=None,
            cache_limit=None, start=None):
  if seed is not None or (train and not isinstance(dataset, mixing.Mix)):
    checks.check_seed(seed)   # (None: a mix's own seed; a dataset's loader takes an int)
    seed = int(seed)   # (numpy's ints too: the samplers' arithmetic is Python's)
  if train:
    checks.check_epochs(num_epochs)
  if isinstance(dataset, mixing.Mix):
    if type(transform) not in _MIXED_TASKS:
      raise ValueError("a mix is for training: read it with classification_train or "
                       "detection_train; evaluate each part on its own split")
    keys = ((transform.image_key, transform.label_key)   # (detection: the mix's own)
            if isinstance(transform, TrainClassification) else (dataset.image_key, dataset.label_key))
    checks.check_mixed(dataset, keys=keys, task=_MIXED_TASKS[type(transform)], split=split,
                       data_dir=data_dir, cache_dir=cache_dir, cache_limit=cache_limit)
    return _mixed_loader(dataset, transform, batch_size=batch_size, seed=seed,
                         num_epochs=num_epochs, drop_remainder=drop_remainder,
                         shard_index=shard_index, shard_count=shard_count,
                         worker_count=worker_count, start=start)
  split = ("train" if train else "test") if split is None else split
  local = None
  if not sources.is_bucket_url(data_dir):
    sources.check_cache_options(data_dir, cache_dir, cache_limit)
    local = sources.open_builder(dataset, data_dir)
  if local is None or local.info.file_format != tfds.core.FileFormat.ARRAY_RECORD:
    # A bucket, or a local TFRecord build (no random access): the read order (each worker
    # its own shards, docs/training_from_a_bucket.md), read by the sampler's plan.
    # (a local build: its version folder, opened again in each worker from its own files)
    url, spec = ((str(data_dir), dataset) if local is None
                 else (str(local.data_dir), local.info.full_name))
    source = RecordSource(
        url, spec, split, shuffle=train, seed=seed if train else 0,
        num_epochs=num_epochs if train else 1, shard_index=shard_index,
        shard_count=shard_count, cache_dir=cache_dir, cache_limit=cache_limit,
        worker_count=worker_count, start=start, reading_threads=_READ_OPTIONS.num_threads)
    sampler = OrderSampler(source, worker_count, seed if train else 0)
    operations = [NotPadding(), transform, grain.Batch(batch_size, drop_remainder)]
    shard_options = grain.NoSharding()
    count = len(source)
  else:
    if start is not None:
      raise ValueError("start= resumes a bucket read or a TFRecord build on another worker "
                       "count; a local ArrayRecord build resumes with the iterator's "
                       "set_state")
    # Each process samples its own part: Grain's sampler sharded over processes reads the
    # same count in each, wrapping a shorter part into the next epoch.
    count = local.info.splits[split].num_examples
    if count < shard_count:
      raise ValueError(f"split {split!r} has {count} examples, fewer than the "
                       f"shard_count={shard_count} processes reading it, each its own part: "
                       f"give shard_count={max(1, count)} or less")
    source = sources.raw_records(local, split, (shard_index, shard_count))
    shard_options = grain.NoSharding()
    sampler = grain.IndexSampler(
        num_records=len(source), shuffle=train, seed=_index_seed(seed) if train else None,
        num_epochs=num_epochs if train else 1, shard_options=shard_options)
    operations = [transform, grain.Batch(batch_size, drop_remainder)]
  # (each worker batches its own records: its share is what a batch is made of)
  checks.check_batches(count, split, batch_size, num_epochs if train else 1,
                       drop_remainder, shard_count * max(1, worker_count))
  # (not a resumed run: its shares depend on every process's position)
  if shard_count > 1 and drop_remainder and start is None and (num_epochs or not train):
    epochs = num_epochs if train else 1
    checks.check_process_shares(
        _largest_worker_shares(source, count, shard_count, worker_count, epochs),
        batch_size, f"split {split!r}", "each process reads every shard_count-th shard file"
        if isinstance(source, RecordSource) else "each process reads its own part")
  return Loader(data_source=source, sampler=sampler, worker_count=worker_count,
                operations=operations, shard_options=shard_options, read_options=_READ_OPTIONS)


def _largest_worker_shares(source, count: int, shard_count: int, worker_count: int,
                           epochs: int) -> list[int]:
  """The most records a worker of each process reads in `epochs`: of a `RecordSource`'s
  runs (each process's every shard_count-th shard, its workers' whole shards), or of a
  local ArrayRecord part (`sources.part_range`: its records dealt to the workers in turn)."""
  workers = max(1, worker_count)
  if not isinstance(source, RecordSource):
    return [-(-len(sources.part_range(count, (p, shard_count))) * epochs // workers)
            for p in range(shard_count)]
  run, stored = source.run, source.stored
  largest = []
  for p in range(shard_count):
    order = order_lib.Order(stored[p::shard_count], run.order.seed, run.order.shuffle)
    process = order_lib.Run(order, workers, 1, num_epochs=epochs)
    largest.append(max(process.length(w) for w in range(workers)))
  return largest


def _index_seed(seed: int) -> int:
  """`seed` as Grain's IndexSampler takes one (0 to 2**32 - 1): as it is there, else
  derived from it (`order.derived_seed`), as every other loader takes any int."""
  return seed if 0 <= seed < 2**32 else order_lib.derived_seed(seed)


# Local ArrayRecord reads are fast; Grain's default 16 reader threads cost 16 % more CPU per
# image fighting the decoder for the GIL (and one thread reads a bucket's windows in order).
_READ_OPTIONS = grain.ReadOptions(num_threads=1, prefetch_buffer_size=256)


def classification_train(dataset, *, batch_size: int, split: str | None = None, data_dir=None,
                         image_size=numpy_ops.IMAGE_SIZE, seed: int | None = 0,
                         area_range=numpy_ops.CROP_AREA_RANGE,
                         aspect_ratio_range=numpy_ops.CROP_ASPECT_RATIO_RANGE, flip: bool = True,
                         num_epochs=None, drop_remainder: bool = True, shard_index: int = 0,
                         shard_count: int = 1, worker_count: int = 0, image_key: str = "image",
                         label_key: str = "label", cache_dir=None,
                         cache_limit=None, start=None):
  """Shuffled, augmented batches {"image": uint8 [B, S, S, 3], "label": int64 [B]}.
  `start`: a `position(loader, state)` to resume from, on any worker count (bucket reads
  and mixes). `dataset` may be a `mixing.mix(...)`: batches then also hold "source" (the
  part), split (default "train") and data_dir come from the parts, and `seed=None` is the
  mix's seed."""
  transform = TrainClassification(size=image_size, area_range=area_range,
                                  aspect_ratio_range=aspect_ratio_range, flip=flip,
                                  image_key=image_key, label_key=label_key)
  return _loader(dataset, split, data_dir, transform, batch_size=batch_size,
                 train=True, seed=seed, num_epochs=num_epochs, drop_remainder=drop_remainder,
                 shard_index=shard_index, shard_count=shard_count, worker_count=worker_count,
                 cache_dir=cache_dir, cache_limit=cache_limit, start=start)


def classification_eval(dataset, *, batch_size: int, split: str = "test", data_dir=None,
                        image_size=numpy_ops.IMAGE_SIZE, mode: str = "central_crop",
                        crop_fraction: float = numpy_ops.CENTRAL_CROP_FRACTION,
                        drop_remainder: bool = False, shard_index: int = 0, shard_count: int = 1,
                        worker_count: int = 0, image_key: str = "image",
                        label_key: str = "label", cache_dir=None,
                         cache_limit=None):
  """One epoch in stored order; mode "central_crop" or "resize" (as input_pipeline's)."""
  if mode not in ("central_crop", "resize"):
    raise ValueError(f"mode must be 'central_crop' or 'resize', not {mode!r}")
  transform = EvalClassification(size=image_size, mode=mode, crop_fraction=crop_fraction,
                                 image_key=image_key, label_key=label_key)
  return _loader(dataset, split, data_dir, transform, batch_size=batch_size,
                 train=False, seed=None, num_epochs=1, drop_remainder=drop_remainder,
                 shard_index=shard_index, shard_count=shard_count, worker_count=worker_count,
                 cache_dir=cache_dir, cache_limit=cache_limit)


def segmentation_train(dataset="voc_segmentation", *, batch_size: int, split: str = "train",
                       data_dir=None, crop_size=(512, 512), scale_range=(0.5, 2.0),
                       flip: bool = True, seed: int = 0, num_epochs=None,
                       drop_remainder: bool = True, shard_index: int = 0, shard_count: int = 1,
                       worker_count: int = 0, image_key: str = "image",
                       mask_key: str = "class_mask", cache_dir=None,
                       cache_limit=None, start=None):
  """Batches {"image": uint8 [B, H, W, 3], "mask": uint8 [B, H, W, 1]}: random scale,
  pad (image 0, mask 255), random `crop_size` window, flip; same geometry for both."""
  transform = TrainSegmentation(size=crop_size, scale_range=scale_range, flip=flip,
                                image_key=image_key, mask_key=mask_key)
  return _loader(dataset, split, data_dir, transform, batch_size=batch_size,
                 train=True, seed=seed, num_epochs=num_epochs, drop_remainder=drop_remainder,
                 shard_index=shard_index, shard_count=shard_count, worker_count=worker_count,
                 cache_dir=cache_dir, cache_limit=cache_limit, start=start)


def segmentation_eval(dataset="voc_segmentation", *, batch_size: int, split: str = "validation",
                      data_dir=None, crop_size=(512, 512), drop_remainder: bool = False,
                      shard_index: int = 0, shard_count: int = 1, worker_count: int = 0,
                      image_key: str = "image", mask_key: str = "class_mask", cache_dir=None,
                       cache_limit=None):
  """One epoch in stored order, central crop / centred pad to `crop_size` (masks: 255)."""
  transform = EvalSegmentation(size=crop_size, image_key=image_key, mask_key=mask_key)
  return _loader(dataset, split, data_dir, transform, batch_size=batch_size,
                 train=False, seed=None, num_epochs=1, drop_remainder=drop_remainder,
                 shard_index=shard_index, shard_count=shard_count, worker_count=worker_count,
                 cache_dir=cache_dir, cache_limit=cache_limit)


def _detection(dataset, *, split, data_dir, cache_dir, cache_limit, max_boxes, batch_size,
               num_epochs, drop_remainder, bounding_box_format, min_visible=0.0) -> int:
  """max_boxes of a detection loader, its options checked as input_pipeline's (a mix, a
  dataset without boxes, a split too small for one batch, each refused in one line)."""
  numpy_box_ops.check_format(bounding_box_format)
  numpy_box_ops.check_min_visible(min_visible)
  _, max_boxes = checks.detection_source(
      dataset, data_dir=data_dir, cache_dir=cache_dir, cache_limit=cache_limit,
      max_boxes=max_boxes, split=split, batch_size=batch_size, num_epochs=num_epochs,
      drop_remainder=drop_remainder, input_context=None)
  return max_boxes


def detection_train(dataset, *, batch_size: int, split: str | None = None, data_dir=None,
                    image_size=numpy_ops.IMAGE_SIZE, seed: int = 0,
                    area_range=checks.DETECTION_CROP_AREA_RANGE,
                    aspect_ratio_range=numpy_ops.CROP_ASPECT_RATIO_RANGE,
                    min_visible: float = numpy_box_ops.MIN_VISIBLE, flip: bool = True,
                    max_boxes: int | None = None, bounding_box_format: str = "rel_yxyx",
                    num_epochs=None, drop_remainder: bool = True, shard_index: int = 0,
                    shard_count: int = 1, worker_count: int = 0, cache_dir=None,
                    cache_limit=None, start=None):
  """Shuffled, augmented detection batches in keras 3's layout, as
  `input_pipeline.detection_train`'s: {"images": uint8 [B, S, S, 3], "bounding_boxes":
  {"boxes": float32 [B, max_boxes, 4], "labels": int32 [B, max_boxes]}}, missing boxes and
  labels -1, boxes in `bounding_box_format`. A random-resized crop (`area_range`) moves the
  boxes with the pixels (clipped; less than `min_visible` inside: dropped with the label),
  then a flip; `max_boxes` None: the most objects one image of the version holds (its
  metadata). Read, shuffled, resumed and split between processes and workers as
  `classification_train` (`start`: bucket reads and mixes); `split` defaults to "train".
  `dataset` may be a `mixing.mix(...)` of detection datasets: labels mapped by class name,
  batches also hold "source", `max_boxes` None is the most of any part."""
  max_boxes = _detection(dataset, split=split, data_dir=data_dir, cache_dir=cache_dir,
                         cache_limit=cache_limit, max_boxes=max_boxes, batch_size=batch_size,
                         num_epochs=num_epochs, drop_remainder=drop_remainder,
                         bounding_box_format=bounding_box_format, min_visible=min_visible)
  transform = TrainDetection(image_key="image", size=image_size, area_range=area_range,
                             aspect_ratio_range=aspect_ratio_range, min_visible=min_visible,
                             flip=flip, max_boxes=max_boxes,
                             bounding_box_format=bounding_box_format)
  return _loader(dataset, split, data_dir, transform, batch_size=batch_size,
                 train=True, seed=seed, num_epochs=num_epochs, drop_remainder=drop_remainder,
                 shard_index=shard_index, shard_count=shard_count, worker_count=worker_count,
                 cache_dir=cache_dir, cache_limit=cache_limit, start=start)


def detection_eval(dataset, *, batch_size: int, split: str = "test", data_dir=None,
                   image_size=numpy_ops.IMAGE_SIZE, mode: str = "resize",
                   max_boxes: int | None = None, bounding_box_format: str = "rel_yxyx",
                   drop_remainder: bool = False, shard_index: int = 0, shard_count: int = 1,
                   worker_count: int = 0, cache_dir=None, cache_limit=None):
  """One epoch in stored order (`worker_count` 0; with workers each batches its own
  records), `detection_train`'s layout; mode "resize" (stretched to `image_size`, normalised
  boxes unchanged) or "pad" (letterboxed, boxes moved into the frame), as
  `input_pipeline.detection_eval`'s."""
  if mode not in checks.DETECTION_EVAL_MODES:
    raise ValueError(f"mode must be one of {checks.DETECTION_EVAL_MODES}, not {mode!r}")
  checks.refuse_mix_in_eval(dataset, "detection_eval")
  max_boxes = _detection(dataset, split=split, data_dir=data_dir, cache_dir=cache_dir,
                         cache_limit=cache_limit, max_boxes=max_boxes, batch_size=batch_size,
                         num_epochs=1, drop_remainder=drop_remainder,
                         bounding_box_format=bounding_box_format)
  transform = EvalDetection(size=image_size, mode=mode, max_boxes=max_boxes,
                            bounding_box_format=bounding_box_format)
  return _loader(dataset, split, data_dir, transform, batch_size=batch_size,
                 train=False, seed=None, num_epochs=1, drop_remainder=drop_remainder,
                 shard_index=shard_index, shard_count=shard_count, worker_count=worker_count,
                 cache_dir=cache_dir, cache_limit=cache_limit)
