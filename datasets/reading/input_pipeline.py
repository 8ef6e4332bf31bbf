"""Training and evaluation `tf.data` pipelines for imagesets builders (one call each).

    from imagesets.reading import input_pipeline
    train = input_pipeline.classification_train("flowers", batch_size=64, seed=0)
    test = input_pipeline.classification_eval("flowers", split="test", batch_size=64)
    for batch in train:  # {"image": uint8 [64, 224, 224, 3], "label": int64 [64]}
      ...

What every pipeline does:

* Never downloads or builds: a name, config or version that is not prepared in `data_dir`
  (or not published in the bucket) raises `DatasetNotPreparedError`, one line with what is
  there and the command to run (`versions.not_found`: `tfds build ...` for our builders,
  `imagesets build PATH ...` for a folder dataset).
* `data_dir` may be a team bucket (`s3://`, `gs://`, `file://`): the published version is
  streamed shard by shard through a local cache (`cache_dir`, default `fetch`'s; at most
  `cache_limit` bytes, e.g. "20GB", None: keep everything) — see `sources`, `streaming`,
  `shard_cache` and docs/training_from_a_bucket.md. A plain path is read in place, so
  `cache_dir`/`cache_limit` with one are refused (a published folder: `file:///path`).
* Reads the stored encoded bytes (`tfds.decode.SkipDecoding`) and decodes them in the
  map step, so a training crop is fused into JPEG decoding (see `preprocess_ops`).
* Seeded: the file order, the shuffle buffer and every random crop / flip come from
  `seed`, so the same seed gives the same batches (`seed=None`: a fresh random seed and
  non-deterministic element order, slightly faster; refused for several input pipelines
  reading a bucket, which deal its shards from one seed: give them the same int).
* `input_context` (from `tf.distribute`'s `distribute_datasets_from_function`) gives each
  worker a disjoint set of shard files (`tfds.ReadConfig(input_context=...)`; ArrayRecord
  builds: every n-th record); pass the
  per-worker batch size (`input_context.get_per_replica_batch_size(global_batch)`).
* Batches have static shapes in training (`drop_remainder=True`; a split smaller than
  one batch over `num_epochs` is refused, not an empty epoch); `dtype=tf.float32`
  gives [0, 1] floats, normalized with `mean`/`std` (per channel, in [0, 1] units) when
  given; the conversion runs once per batch.
* Ends with prefetching to the accelerator when one is visible (and no `input_context`:
  the distribution strategy places data itself), else `prefetch(AUTOTUNE)`.

Features out: classification `{"image", "label"}`; segmentation `{"image", "mask"}` with
the mask uint8 [H, W, 1] of class ids, 255 = void (also for every padded pixel).
"""

import contextlib
import logging
from typing import Optional, Sequence, Union

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from imagesets.storage import versions
from imagesets.reading import box_ops
from imagesets.reading import mixed_records
from imagesets.reading import mixing
from imagesets.reading import order as order_lib
from imagesets.reading import pipeline_checks as checks
from imagesets.reading import preprocess_ops as ops
from imagesets.reading import sources
from imagesets.reading import streaming

AUTOTUNE = tf.data.AUTOTUNE
Dataset = Union[str, tfds.core.DatasetBuilder, mixing.Mix]

# Examples held by the shuffle buffer before decoding (encoded bytes, ~100 KB each).
DEFAULT_SHUFFLE_BUFFER = 2048


# The name, config or version is not in `data_dir` (or the bucket); the message, one line,
# says what is there and the command that builds it (`versions.not_found`).
DatasetNotPreparedError = versions.DatasetNotPreparedError


# A prepared builder, or DatasetNotPreparedError naming the command that builds it.
open_builder = sources.open_builder
build_command = sources.build_command


# Independent streams derived from the user's seed.
_SHUFFLE_SALT, _EXAMPLE_SALT = 1, 2


def _options(deterministic: bool) -> tf.data.Options:
  options = tf.data.Options()
  options.deterministic = deterministic
  return options


class _TfdsDtypeWarning(logging.Filter):
  """TFDS's own PartialDecoding reads the deprecated `FeatureConnector.dtype` and warns
  about it, once per feature; the deprecated call is TFDS's, not ours or the user's."""

  def filter(self, record):
    return "FeatureConnector.dtype` is deprecated" not in record.getMessage()


@contextlib.contextmanager
def _without_tfds_dtype_warning():
  absl_logger = logging.getLogger("absl")
  log_filter = _TfdsDtypeWarning()
  absl_logger.addFilter(log_filter)
  try:
    yield
  finally:
    absl_logger.removeFilter(log_filter)


def read(source: "sources.Source | tfds.core.DatasetBuilder", split, *, keys, encoded_keys, shuffle, seed,
         input_context=None, deterministic=True, num_epochs=1):
  """The stored examples of `split`, only `keys`, `encoded_keys` left as encoded bytes.

  Local TFRecord builds through TFDS's `as_dataset`; local ArrayRecord builds (which
  `as_dataset` cannot read) by random access (`_read_array_record`); versions streamed
  from a bucket in the streaming order (`streaming`), `num_epochs` times (None: forever;
  local builds: one epoch, the caller repeats). Same parsing and decoders for all.
  """
  if isinstance(source, tfds.core.DatasetBuilder):  # a local build, given as its builder
    source = sources.open_source(source)
  builder = source.builder
  decoders = tfds.decode.PartialDecoding(
      {key: True for key in keys},
      decoders={key: tfds.decode.SkipDecoding() for key in encoded_keys})
  if source.streamed:
    with _without_tfds_dtype_warning():
      ds = streaming.records(source, split, shuffle=shuffle, seed=seed, num_epochs=num_epochs,
                             input_context=input_context, deterministic=deterministic)
      return _parsed(ds, builder, decoders, deterministic)
  if builder.info.file_format == tfds.core.FileFormat.ARRAY_RECORD:
    with _without_tfds_dtype_warning():
      return _read_array_record(builder, split, decoders, shuffle=shuffle, seed=seed,
                                input_context=input_context, deterministic=deterministic)
  read_config = tfds.ReadConfig(
      shuffle_seed=seed if shuffle else None,
      input_context=input_context,
      options=_options(deterministic),
      # The pipeline ends with its own prefetch; TFDS's would be one more buffer.
      skip_prefetch=True)
  with _without_tfds_dtype_warning():
    return builder.as_dataset(split=split, shuffle_files=shuffle, decoders=decoders,
                              read_config=read_config)


_ARRAY_RECORD_READ_BATCH = 64  # records fetched per call into the ArrayRecord reader


def _read_array_record(builder, split, decoders, *, shuffle, seed, input_context,
                       deterministic):
  """An ArrayRecord split as tf.data: its record indices, split between `input_context`'s
  workers (every `num_input_pipelines`-th index), shuffled globally per epoch by `seed`,
  fetched in batches by index and parsed with TFDS's own parser and `decoders`."""
  source = sources.raw_records(builder, split)
  indices = tf.data.Dataset.range(len(source))
  if input_context is not None:
    indices = indices.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
  if shuffle:
    indices = indices.shuffle(len(source), seed=seed, reshuffle_each_iteration=True)

  def fetch(batch):
    records = tf.numpy_function(
        lambda ids: np.array(source.__getitems__(ids.tolist()), dtype=object), [batch],
        tf.string, stateful=False)
    records.set_shape([None])
    return records

  ds = indices.batch(_ARRAY_RECORD_READ_BATCH).map(
      fetch, num_parallel_calls=AUTOTUNE, deterministic=deterministic).unbatch()
  return _parsed(ds, builder, decoders, deterministic).with_options(_options(deterministic))


def _parsed(records, builder, decoders, deterministic):
  """Serialized examples parsed with TFDS's own parser and `decoders`."""
  features = decoders.extract_features(builder.info.features)
  return records.map(
      lambda record: features.deserialize_example(record, decoders=decoders.decoders),
      num_parallel_calls=AUTOTUNE, deterministic=deterministic)


def _map_with_seeds(ds, preprocess, seed, input_context):
  """Maps `preprocess` with a per-example seed (int64 [2]): (a key of seed and worker,
  the element's position). The seeds follow the seeded element order, not thread timing."""
  worker = input_context.input_pipeline_id if input_context else 0
  key = tf.constant(order_lib.derived_seed(seed, _EXAMPLE_SALT, worker), tf.int64)
  return ds.enumerate().map(
      lambda index, data: preprocess({**data, ops.SEED_KEY: tf.stack([key, index])}),
      num_parallel_calls=AUTOTUNE)


def _output_op(dtype, mean, std, key="image") -> ops.Op:
  if dtype == tf.uint8:
    raise ValueError("mean/std normalization needs dtype=tf.float32")
  if dtype != tf.float32:
    raise ValueError(f"dtype must be tf.uint8 or tf.float32, not {dtype}")
  if (mean is None) != (std is None):
    raise ValueError("give both mean and std, or neither")
  return ops.compose(ops.to_float(key),
                     *([ops.normalize(mean, std, key)] if mean is not None else []))


def padded_batch(ds: tf.data.Dataset, batch_size: int, drop_remainder: bool = False,
                 mask_keys: Sequence[str] = ()) -> tf.data.Dataset:
  """`padded_batch` of variable-size examples: `mask_keys` padded with 255, the rest with 0.

  Each batch is padded (bottom / right) to its largest example.
  """
  padding = {key: tf.constant(ops.MASK_PAD_VALUE if key in mask_keys else ops.IMAGE_PAD_VALUE,
                              spec.dtype)
             for key, spec in ds.element_spec.items()}
  return ds.padded_batch(batch_size, padding_values=padding, drop_remainder=drop_remainder)


def prefetch_to_accelerator(ds: tf.data.Dataset, devices: Optional[Sequence[str]] = None,
                            buffer_size: int = 2) -> tf.data.Dataset:
  """Prefetches into the first accelerator's memory, or `prefetch(AUTOTUNE)` without one.

  `devices` defaults to the visible GPUs. Must be the last transformation.
  """
  if devices is None:
    devices = [device.name for device in tf.config.list_logical_devices("GPU")]
  if not devices:
    return ds.prefetch(AUTOTUNE)
  return ds.apply(tf.data.experimental.prefetch_to_device(devices[0], buffer_size))


def _finish(ds, *, batch_size, drop_remainder, padded, dtype, mean, std, input_context,
            prefetch_devices, mask_keys=(), image_key="image"):
  if padded:
    ds = padded_batch(ds, batch_size, drop_remainder, mask_keys)
  else:
    ds = ds.batch(batch_size, drop_remainder=drop_remainder, num_parallel_calls=AUTOTUNE)
  if dtype != tf.uint8 or mean is not None or std is not None:
    # Casting / normalizing whole batches is cheaper than per image.
    ds = ds.map(_output_op(dtype, mean, std, image_key), num_parallel_calls=AUTOTUNE)
  if input_context is not None:
    return ds.prefetch(AUTOTUNE)
  return prefetch_to_accelerator(ds, prefetch_devices)


def _seed_or_random(seed):
  """(seed, deterministic): `None` draws a fresh seed and allows any element order."""
  if seed is None:
    return int(np.random.SeedSequence().generate_state(1, np.uint32)[0]), False
  return seed, True


def _train(source, split, *, keys, encoded_keys, preprocess, seed, input_context,
           shuffle_buffer, num_epochs, cache=False, cache_op=None):
  streamed = source.streamed
  checks.check_shared_seed(seed, streamed, input_context)
  seed, deterministic = _seed_or_random(seed)
  if streamed and (cache or cache_op is not None):
    raise ValueError("cache= keeps the split in memory; with a bucket data_dir the shards "
                     "are kept on disk instead: leave cache=None and use cache_limit=None")
  # A streamed version repeats inside `read`: each epoch reads its shards in a new order.
  ds = read(source, split, keys=keys, encoded_keys=encoded_keys, shuffle=True,
            seed=seed, input_context=input_context, deterministic=deterministic,
            num_epochs=num_epochs if streamed else 1)
  if cache_op is not None:
    ds = ds.map(cache_op, num_parallel_calls=AUTOTUNE).cache()
  elif cache:
    ds = ds.cache()
  ds = ds.shuffle(shuffle_buffer, seed=order_lib.derived_seed(seed, _SHUFFLE_SALT),
                  reshuffle_each_iteration=True)
  if not streamed:
    ds = ds.repeat(num_epochs)
  return _map_with_seeds(ds, preprocess, seed, input_context)


def _eval(source, split, *, keys, encoded_keys, preprocess, input_context, cache):
  ds = read(source, split, keys=keys, encoded_keys=encoded_keys, shuffle=False,
             seed=None, input_context=input_context, deterministic=True)
  ds = ds.map(preprocess, num_parallel_calls=AUTOTUNE)
  return ds.cache() if cache else ds


TRAIN_CACHE_MODES = (None, "encoded", "decoded")
_START_WITHOUT_MIX = ("start= resumes a mixed pipeline; to resume one dataset exactly, read "
                      "it as a mix of one part: mixing.mix([mixing.Part(name, data_dir=...)])")
_POSITION_WITHOUT_MIX = ("with_position=True gives a mixed pipeline's position; to resume one "
                         "dataset exactly, read it as a mix of one part: "
                         "mixing.mix([mixing.Part(name, data_dir=...)])")


def _without_mix(start, with_position) -> None:
  """Refuses what only a mix's pipeline has (a position) for one dataset's."""
  if start is not None:
    raise ValueError(_START_WITHOUT_MIX)
  if with_position:
    raise ValueError(_POSITION_WITHOUT_MIX)


def classification_train(
    dataset: Dataset, *, batch_size: int, split: Optional[str] = None,
    data_dir: Optional[str] = None, image_size=ops.IMAGE_SIZE, seed: Optional[int] = None,
    area_range: Sequence[float] = ops.CROP_AREA_RANGE,
    aspect_ratio_range: Sequence[float] = ops.CROP_ASPECT_RATIO_RANGE, flip: bool = True,
    dtype: tf.DType = tf.uint8, mean: Optional[Sequence[float]] = None,
    std: Optional[Sequence[float]] = None, shuffle_buffer: Optional[int] = None,
    num_epochs: Optional[int] = None, drop_remainder: bool = True,
    cache: Optional[str] = None,
    input_context: Optional[tf.distribute.InputContext] = None,
    image_key: str = "image", label_key: str = "label",
    prefetch_devices: Optional[Sequence[str]] = None, cache_dir=None,
    cache_limit=None, start=None,
    with_position: bool = False) -> Union[tf.data.Dataset, mixing.Pipeline]:
  """Shuffled, augmented, batched training batches `{"image", "label"}`; a multi-label
  build's labels (`label_key="labels"`) as multi-hot float32 [num_classes].

  `dataset` may be a `mixing.mix(...)` of several datasets or versions: batches then also
  hold "source" (the part each example came from), the parts name their own splits and
  bucket caches, and the pipeline's state is its position (no shuffle buffer: records are
  shuffled within windows of shards, then mixed), so `start=` (a position, or
  `keras_resume.saved_start(...)`) resumes it exactly, on any number of input pipelines;
  `seed` (default: the mix's) seeds the crops and flips by position. `with_position=True`
  returns a `mixing.Pipeline` instead of the dataset (`.dataset`; `.position(taken)` gives
  a `start=`; `keras_resume.BackupAndRestore` takes it); a single dataset's pipeline has no
  position and refuses it.

  Shuffles shard files and examples (seeded), takes a random-resized crop fused into
  JPEG decoding (PNG and other formats: decoded whole, same crop), flips left-right,
  resizes to `image_size`. Repeats `num_epochs` times (None: forever).

  cache (memory, filled during the first epoch; later epochs are still reshuffled by
  the example-level shuffle buffer, and get new crops):
    None: read the shard files every epoch;
    "encoded": keep the stored bytes (about the split's size on disk) and skip file
      reading and parsing; crops stay fused into decoding;
    "decoded": keep the decoded pixels (height * width * 3 bytes per image: only when
      that fits in RAM); crops are then cut from cached pixels, no decoding at all.
  """
  if cache not in TRAIN_CACHE_MODES:
    raise ValueError(f"cache must be one of {TRAIN_CACHE_MODES}, not {cache!r}")
  if isinstance(dataset, mixing.Mix):
    checks.check_mixed(dataset, split=split, data_dir=data_dir, cache=cache,
                       cache_dir=cache_dir, cache_limit=cache_limit,
                       shuffle_buffer=shuffle_buffer, keys=(image_key, label_key),
                       task=mixing.schema_lib.CLASSIFICATION)
    image_key, label_key = "image", "label"   # (mixed_records' names)
  else:
    _without_mix(start, with_position)
  if cache == "decoded":
    crop = ops.random_resized_crop(image_size, image_key, area_range, aspect_ratio_range)
    cache_op = ops.decode(image_key)
  else:
    crop = ops.decode_and_random_crop(image_size, image_key, area_range, aspect_ratio_range)
    cache_op = None
  preprocess = ops.compose(
      crop, *([ops.random_flip_left_right([image_key])] if flip else []),
      ops.rename(image=image_key, label=label_key))
  finish = dict(batch_size=batch_size, drop_remainder=drop_remainder, padded=False,
                dtype=dtype, mean=mean, std=std, input_context=input_context,
                prefetch_devices=prefetch_devices)
  if isinstance(dataset, mixing.Mix):
    pipeline = _mixed_train(
        dataset, ops.compose(preprocess, ops.keep("image", "label", "source")), seed=seed,
        num_epochs=num_epochs, start=start, **finish)
    return pipeline if with_position else pipeline.dataset
  source = sources.open_source(dataset, data_dir, cache_dir=cache_dir,
                               cache_limit=cache_limit)
  split = "train" if split is None else split
  checks.check_split_batches(source, split, batch_size, num_epochs, drop_remainder,
                             input_context, seed=seed)
  ds = _train(source, split, keys=[image_key, label_key], encoded_keys=[image_key],
              preprocess=ops.compose(preprocess, *_label_ops(source, label_key),
                                     ops.keep("image", "label")), seed=seed,
              input_context=input_context,
              shuffle_buffer=DEFAULT_SHUFFLE_BUFFER if shuffle_buffer is None else shuffle_buffer,
              num_epochs=num_epochs, cache=cache == "encoded", cache_op=cache_op)
  return _finish(ds, **finish)


def _label_ops(source: "sources.Source", label_key: str) -> list[ops.Op]:
  """What the pipelines do to the stored labels: nothing to one class id; several per
  image (a multi-label build's `Sequence(ClassLabel)`) become a multi-hot float32
  [num_classes], so they batch (the order and repeats of the ids do not matter)."""
  feature = source.builder.info.features[label_key]
  if not isinstance(feature, tfds.features.Sequence):
    return []
  if not isinstance(feature.feature, tfds.features.ClassLabel):
    raise ValueError(f"{label_key!r} of {source.builder.info.full_name} is a sequence of "
                     f"{type(feature.feature).__name__}, not of class labels")
  return [box_ops.multi_hot(feature.feature.num_classes, "label")]


def _mixed_train(mix, preprocess, *, seed, num_epochs, start, **finish):
  """A mix's training batches (see `classification_train`), as a `mixing.Pipeline`: its
  examples by position, each crop and flip seeded by the example's count in the job."""
  reader, readers = streaming.reader_of(finish["input_context"])
  checks.check_batches(mix.examples_per_epoch, "", finish["batch_size"], num_epochs,
                       finish["drop_remainder"], readers, what="an epoch of the mix")
  run = mix.run(readers, start=start, num_epochs=num_epochs)
  # (a resumed run's leftovers may end any pipeline short of a batch: it ends, refused none)
  if readers > 1 and num_epochs is not None and finish["drop_remainder"] and start is None:
    checks.check_shares([run.length(r) for r in range(readers)],
                        finish["batch_size"], "the mix's run",
                        "each reads its own shards of each part")
  key = tf.constant(order_lib.derived_seed(mix.seed if seed is None else seed, _EXAMPLE_SALT),
                    tf.int64)
  ds = mixed_records.records(run, reader).map(
      lambda e: preprocess({**{k: v for k, v in e.items() if k != "index"},
                            ops.SEED_KEY: tf.stack([key, e["index"]])}),
      num_parallel_calls=AUTOTUNE)
  return mixing.Pipeline(_finish(ds, **finish), run, finish["batch_size"])


CLASSIFICATION_EVAL_MODES = ("central_crop", "resize", "padded")


def classification_eval(
    dataset: Dataset, *, batch_size: int, split: str = "test",
    data_dir: Optional[str] = None, image_size=ops.IMAGE_SIZE, mode: str = "central_crop",
    crop_fraction: float = ops.CENTRAL_CROP_FRACTION, dtype: tf.DType = tf.uint8,
    mean: Optional[Sequence[float]] = None, std: Optional[Sequence[float]] = None,
    drop_remainder: bool = False, cache: bool = False,
    input_context: Optional[tf.distribute.InputContext] = None,
    image_key: str = "image", label_key: str = "label",
    prefetch_devices: Optional[Sequence[str]] = None, cache_dir=None,
    cache_limit=None) -> tf.data.Dataset:
  """Deterministic evaluation batches `{"image", "label"}`, in stored order, one epoch.

  mode: "central_crop" (the central `crop_fraction` square, fused into JPEG decoding,
  resized to `image_size`), "resize" (whole image resized to `image_size`), or "padded"
  (native size, `padded_batch` with images padded by 0). `cache=True` keeps the
  preprocessed examples in memory after the first pass.
  """
  if mode not in CLASSIFICATION_EVAL_MODES:
    raise ValueError(f"mode must be one of {CLASSIFICATION_EVAL_MODES}, not {mode!r}")
  checks.refuse_mix_in_eval(dataset, "classification_eval")
  source = sources.open_source(dataset, data_dir, cache_dir=cache_dir,
                               cache_limit=cache_limit)
  checks.check_split_batches(source, split, batch_size, 1, drop_remainder, input_context,
                             shuffle=False)
  image_op = {
      "central_crop": lambda: ops.decode_and_central_crop(image_size, image_key, crop_fraction),
      "resize": lambda: ops.compose(ops.decode(image_key), ops.resize(image_size, image_key)),
      "padded": lambda: ops.decode(image_key),
  }[mode]()
  preprocess = ops.compose(image_op, ops.rename(image=image_key, label=label_key),
                           *_label_ops(source, label_key), ops.keep("image", "label"))
  ds = _eval(source, split, keys=[image_key, label_key], encoded_keys=[image_key],
             preprocess=preprocess, input_context=input_context, cache=cache)
  return _finish(ds, batch_size=batch_size, drop_remainder=drop_remainder,
                 padded=mode == "padded", dtype=dtype, mean=mean, std=std,
                 input_context=input_context, prefetch_devices=prefetch_devices)


# Segmentation pipelines rename the builder's image and mask features (`image_key`,
# `mask_key`) to these; the ops are told which is the mask.
_MASK = ("mask",)


def _decode_pair(image_key, mask_key):
  return ops.compose(ops.decode(image_key, 3), ops.decode(mask_key, 1),
                     ops.rename(image=image_key, mask=mask_key))


SEGMENTATION_TRAIN_MODES = ("scale_crop", "resize", "resize_with_crop_or_pad")


def segmentation_train(
    dataset: Dataset = "voc_segmentation", *, batch_size: int, split: str = "train",
    data_dir: Optional[str] = None, crop_size=(512, 512), mode: str = "scale_crop",
    scale_range: Sequence[float] = (0.5, 2.0), flip: bool = True,
    seed: Optional[int] = None, dtype: tf.DType = tf.uint8,
    mean: Optional[Sequence[float]] = None, std: Optional[Sequence[float]] = None,
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER, num_epochs: Optional[int] = None,
    drop_remainder: bool = True, input_context: Optional[tf.distribute.InputContext] = None,
    image_key: str = "image", mask_key: str = "class_mask",
    prefetch_devices: Optional[Sequence[str]] = None, cache_dir=None,
    cache_limit=None) -> tf.data.Dataset:
  """Shuffled, augmented training batches `{"image", "mask"}` of fixed `crop_size`.

  Image and mask always get the same geometry; masks are resized nearest-neighbour and
  padded with 255. mode: "scale_crop" (random scale in `scale_range`, pad to
  `crop_size`, random `crop_size` crop), "resize" (both resized to `crop_size`), or
  "resize_with_crop_or_pad" (central crop / centred pad to `crop_size`, like
  `tf.image.resize_with_crop_or_pad` but masks padded with 255). Then a random flip.
  """
  if mode not in SEGMENTATION_TRAIN_MODES:
    raise ValueError(f"mode must be one of {SEGMENTATION_TRAIN_MODES}, not {mode!r}")
  source = sources.open_source(dataset, data_dir, cache_dir=cache_dir,
                               cache_limit=cache_limit)
  checks.check_split_batches(source, split, batch_size, num_epochs, drop_remainder,
                             input_context, seed=seed)
  geometry = {
      "scale_crop": lambda: ops.compose(ops.random_scale(scale_range, mask_keys=_MASK),
                                        ops.random_crop_or_pad(crop_size, mask_keys=_MASK)),
      "resize": lambda: ops.compose(ops.resize(crop_size, "image"),
                                    ops.resize(crop_size, "mask", "nearest")),
      "resize_with_crop_or_pad": lambda: ops.crop_or_pad(crop_size, mask_keys=_MASK),
  }[mode]()
  preprocess = ops.compose(
      _decode_pair(image_key, mask_key), geometry,
      *([ops.random_flip_left_right(["image", "mask"])] if flip else []),
      ops.keep("image", "mask"))
  ds = _train(source, split, keys=[image_key, mask_key],
              encoded_keys=[image_key, mask_key], preprocess=preprocess, seed=seed,
              input_context=input_context, shuffle_buffer=shuffle_buffer,
              num_epochs=num_epochs)
  return _finish(ds, batch_size=batch_size, drop_remainder=drop_remainder, padded=False,
                 dtype=dtype, mean=mean, std=std, input_context=input_context,
                 prefetch_devices=prefetch_devices)


SEGMENTATION_EVAL_MODES = ("resize_with_crop_or_pad", "resize", "padded")


def segmentation_eval(
    dataset: Dataset = "voc_segmentation", *, batch_size: int, split: str = "validation",
    data_dir: Optional[str] = None, crop_size=(512, 512),
    mode: str = "resize_with_crop_or_pad", dtype: tf.DType = tf.uint8,
    mean: Optional[Sequence[float]] = None, std: Optional[Sequence[float]] = None,
    drop_remainder: bool = False, cache: bool = False,
    input_context: Optional[tf.distribute.InputContext] = None,
    image_key: str = "image", mask_key: str = "class_mask",
    prefetch_devices: Optional[Sequence[str]] = None, cache_dir=None,
    cache_limit=None) -> tf.data.Dataset:
  """Deterministic evaluation batches `{"image", "mask"}`, in stored order, one epoch.

  mode: "resize_with_crop_or_pad" (default; `crop_size` 512 holds every VOC image
  unscaled, padding masks with 255 so the padding is ignored by metrics), "resize"
  (mask nearest-neighbour) or "padded" (native size, `padded_batch`: images padded with
  0, masks with 255).
  """
  if mode not in SEGMENTATION_EVAL_MODES:
    raise ValueError(f"mode must be one of {SEGMENTATION_EVAL_MODES}, not {mode!r}")
  source = sources.open_source(dataset, data_dir, cache_dir=cache_dir,
                               cache_limit=cache_limit)
  checks.check_split_batches(source, split, batch_size, 1, drop_remainder, input_context,
                             shuffle=False)
  geometry = {
      "resize_with_crop_or_pad": lambda: ops.crop_or_pad(crop_size, mask_keys=_MASK),
      "resize": lambda: ops.compose(ops.resize(crop_size, "image"),
                                    ops.resize(crop_size, "mask", "nearest")),
      "padded": lambda: ops.compose(),
  }[mode]()
  preprocess = ops.compose(_decode_pair(image_key, mask_key), geometry,
                           ops.keep("image", "mask"))
  ds = _eval(source, split, keys=[image_key, mask_key], encoded_keys=[image_key, mask_key],
             preprocess=preprocess, input_context=input_context, cache=cache)
  return _finish(ds, batch_size=batch_size, drop_remainder=drop_remainder,
                 padded=mode == "padded", dtype=dtype, mean=mean, std=std,
                 input_context=input_context, prefetch_devices=prefetch_devices,
                 mask_keys=_MASK)


DETECTION_CROP_AREA_RANGE = checks.DETECTION_CROP_AREA_RANGE
DETECTION_EVAL_MODES = checks.DETECTION_EVAL_MODES


def detection_train(
    dataset: Dataset, *, batch_size: int, split: Optional[str] = None,
    data_dir: Optional[str] = None, image_size=ops.IMAGE_SIZE, seed: Optional[int] = None,
    area_range: Sequence[float] = DETECTION_CROP_AREA_RANGE,
    aspect_ratio_range: Sequence[float] = ops.CROP_ASPECT_RATIO_RANGE,
    min_visible: float = box_ops.MIN_VISIBLE, flip: bool = True,
    max_boxes: Optional[int] = None, bounding_box_format: str = "rel_yxyx",
    dtype: tf.DType = tf.uint8, mean: Optional[Sequence[float]] = None,
    std: Optional[Sequence[float]] = None, shuffle_buffer: Optional[int] = None,
    num_epochs: Optional[int] = None, drop_remainder: bool = True,
    input_context: Optional[tf.distribute.InputContext] = None,
    prefetch_devices: Optional[Sequence[str]] = None, cache_dir=None,
    cache_limit=None, start=None,
    with_position: bool = False) -> Union[tf.data.Dataset, mixing.Pipeline]:
  """Shuffled, augmented detection batches in keras 3's layout: `{"images": [B, S, S, 3],
  "bounding_boxes": {"boxes": float32 [B, max_boxes, 4], "labels": int32 [B, max_boxes]}}`,
  missing boxes and labels -1 (keras' `MaxNumBoundingBoxes`), boxes in keras'
  `bounding_box_format` — ready for keras' box-aware layers
  (`keras.layers.RandomFlip(..., bounding_box_format=...)`) and a detector's `fit`.

  A random-resized crop fused into JPEG decoding (`area_range` of the image) moves the boxes
  with the pixels: a box is clipped to the crop, and dropped with its label when less than
  `min_visible` of its area is inside (`box_ops.crop_objects`); then a left-right flip and
  a resize to `image_size`. `max_boxes` (None: the most objects one image of the version
  holds, from its metadata) cuts none by default. Seeded like `classification_train`.
  `split` defaults to "train". A `mixing.mix(...)` of detection datasets is read as
  `classification_train` reads a mix (labels mapped by class name; batches also hold
  "source"; `start=` resumes it; `with_position=True`: a `mixing.Pipeline`; `max_boxes`
  None: the most of any part).
  """
  source, max_boxes = checks.detection_source(
      dataset, data_dir=data_dir, cache_dir=cache_dir, cache_limit=cache_limit,
      max_boxes=max_boxes, split=split, batch_size=batch_size, num_epochs=num_epochs,
      drop_remainder=drop_remainder, input_context=input_context,
      shuffle_buffer=shuffle_buffer, seed=seed)
  augment = ops.compose(
      box_ops.decode_and_random_crop(image_size, min_visible, area_range, aspect_ratio_range),
      *([box_ops.random_flip_left_right()] if flip else []))
  to_keras = box_ops.to_keras(max_boxes, bounding_box_format)
  finish = dict(batch_size=batch_size, drop_remainder=drop_remainder, padded=False,
                dtype=dtype, mean=mean, std=std, input_context=input_context,
                prefetch_devices=prefetch_devices, image_key="images")
  if isinstance(source, mixing.Mix):
    pipeline = _mixed_train(source, ops.compose(
        augment, lambda data: {**to_keras(data), "source": data["source"]}),
        seed=seed, num_epochs=num_epochs, start=start, **finish)
    return pipeline if with_position else pipeline.dataset
  _without_mix(start, with_position)
  ds = _train(source, split or "train", keys=["image", "objects"], encoded_keys=["image"],
              preprocess=ops.compose(augment, to_keras), seed=seed,
              input_context=input_context, num_epochs=num_epochs,
              shuffle_buffer=DEFAULT_SHUFFLE_BUFFER if shuffle_buffer is None else shuffle_buffer)
  return _finish(ds, **finish)


def _rounded_uint8(data):
  """`box_ops.decode_and_fit`'s float pixels (0-255) as the other modes' uint8."""
  return {**data, "image": tf.saturate_cast(tf.round(data["image"]), tf.uint8)}


def detection_eval(
    dataset: Dataset, *, batch_size: int, split: str = "test",
    data_dir: Optional[str] = None, image_size=ops.IMAGE_SIZE, mode: str = "resize",
    max_boxes: Optional[int] = None, bounding_box_format: str = "rel_yxyx",
    dtype: tf.DType = tf.uint8, mean: Optional[Sequence[float]] = None,
    std: Optional[Sequence[float]] = None, drop_remainder: bool = False,
    input_context: Optional[tf.distribute.InputContext] = None,
    prefetch_devices: Optional[Sequence[str]] = None, cache_dir=None,
    cache_limit=None) -> tf.data.Dataset:
  """Deterministic detection batches in keras 3's layout (see `detection_train`), stored
  order, one epoch. mode: "resize" (the whole image stretched to `image_size`: normalised
  boxes unchanged) or "pad" (letterboxed: aspect ratio kept, boxes moved into the frame).
  """
  if mode not in DETECTION_EVAL_MODES:
    raise ValueError(f"mode must be one of {DETECTION_EVAL_MODES}, not {mode!r}")
  checks.refuse_mix_in_eval(dataset, "detection_eval")
  source, max_boxes = checks.detection_source(
      dataset, data_dir=data_dir, cache_dir=cache_dir, cache_limit=cache_limit,
      max_boxes=max_boxes, split=split, batch_size=batch_size, num_epochs=1,
      drop_remainder=drop_remainder, input_context=input_context, shuffle=False)
  fit = (box_ops.decode_and_resize(image_size) if mode == "resize" else
         ops.compose(box_ops.decode_and_fit(image_size, "pad"), _rounded_uint8))
  preprocess = ops.compose(fit, box_ops.to_keras(max_boxes, bounding_box_format))
  ds = _eval(source, split, keys=["image", "objects"], encoded_keys=["image"],
             preprocess=preprocess, input_context=input_context, cache=False)
  return _finish(ds, batch_size=batch_size, drop_remainder=drop_remainder, padded=False,
                 dtype=dtype, mean=mean, std=std, input_context=input_context,
                 prefetch_devices=prefetch_devices, image_key="images")
