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

* Reads the build by random access (`--file_format array_record`; a TFRecord build is an
  error saying how to rebuild). Grain's `IndexSampler` shuffles all record indices by
  `seed` each epoch (global shuffle, no buffer) and gives process `shard_index` of
  `shard_count` (e.g. `jax.process_index()`, `jax.process_count()`) its own part of every
  epoch.
* A bucket `data_dir` (`s3://`, `gs://`, `file://`; TFRecord or ArrayRecord builds) is
  streamed instead, through the shard cache (`cache_dir`, `cache_limit`), in the streaming
  order: each process's shards in a seeded order, records shuffled within windows of
  shards (`streaming`); iterator states resume it exactly.
* Parses each record and decodes it in Grain's worker processes (`worker_count`; 0 = in
  this process) with `numpy_ops`: the same crop, flip, resize and mask-padding semantics
  as the tf.data pipelines (`input_pipeline`), random draws from Grain's per-record
  generator, so batches depend only on the seed, not on the worker count.
* Training repeats `num_epochs` times (None: forever) and drops the last partial batch;
  evaluation is one epoch in stored order.
"""

import logging
import threading

import numpy as np
import tensorflow_datasets as tfds

from imagesets import tfds_internals
from imagesets.reading import input_pipeline
from imagesets.reading import numpy_ops
from imagesets.reading import streaming

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
  builder = input_pipeline.open_builder(dataset, data_dir)
  if builder.info.file_format != tfds.core.FileFormat.ARRAY_RECORD:
    raise ValueError(
        f"{builder.info.full_name} in {builder.data_dir_root} is stored as "
        f"{builder.info.file_format.value}; Grain reads by random access: rebuild it with "
        "--file_format array_record (tfds build ... --file_format array_record, or "
        "imagesets build ... --file-format array_record)")
  return input_pipeline.raw_records(builder, split)


def parse(record: bytes, keys) -> dict:
  """{key: bytes or int} of a serialized tf.train.Example (first value of each feature)."""
  feature = tfds_internals.Example.FromString(record).features.feature
  out = {}
  for key in keys:
    value = feature[key]
    out[key] = value.bytes_list.value[0] if value.bytes_list.value else value.int64_list.value[0]
  return out


class _Settings:
  """Keyword settings as attributes: the transforms are pickled to Grain's workers."""

  def __init__(self, **settings):
    self.__dict__.update(settings)


class TrainClassification(_Settings, grain.RandomMapTransform):
  def random_map(self, record, rng):
    features = parse(record, (self.image_key, self.label_key))
    image = numpy_ops.random_resized_crop(features[self.image_key], self.size, rng,
                                          self.area_range, self.aspect_ratio_range)
    if self.flip:
      (image,) = numpy_ops.random_flip(rng, image)
    return {"image": image, "label": np.int64(features[self.label_key])}


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


def _loader(dataset, split, data_dir, transform, *, batch_size, train, seed, num_epochs,
            drop_remainder, shard_index, shard_count, worker_count, cache_dir=None,
            cache_limit=None):
  if streaming.is_bucket_url(data_dir):
    # A bucket: the streaming order (windows of shards, docs/training_from_a_bucket.md),
    # read position by position; this process's shards only.
    source = streaming.PositionSource(
        str(data_dir), dataset, split, shuffle=train, seed=seed if train else 0,
        num_epochs=num_epochs if train else 1, shard_index=shard_index,
        shard_count=shard_count, cache_dir=cache_dir, cache_limit=cache_limit,
        readers=worker_count)
    sampler = grain.SequentialSampler(len(source), grain.NoSharding(), seed=seed)
  else:
    input_pipeline.sources.check_cache_options(data_dir, cache_dir, cache_limit)
    source = data_source(dataset, split, data_dir)
    input_pipeline.check_batches(len(source), split, batch_size, num_epochs if train else 1,
                                 drop_remainder, shard_count)
    sampler = grain.IndexSampler(
        num_records=len(source), shuffle=train, seed=seed if train else None,
        num_epochs=num_epochs if train else 1,
        shard_options=grain.ShardOptions(shard_index, shard_count, drop_remainder=False))
  return grain.DataLoader(data_source=source, sampler=sampler, worker_count=worker_count,
                          operations=[transform, grain.Batch(batch_size, drop_remainder)],
                          # Local ArrayRecord reads are fast; Grain's default 16 reader
                          # threads cost 16 % more CPU per image fighting the decoder for the GIL.
                          read_options=grain.ReadOptions(num_threads=1, prefetch_buffer_size=256))


def classification_train(dataset, *, batch_size: int, split: str = "train", data_dir=None,
                         image_size=numpy_ops.IMAGE_SIZE, seed: int = 0,
                         area_range=numpy_ops.CROP_AREA_RANGE,
                         aspect_ratio_range=numpy_ops.CROP_ASPECT_RATIO_RANGE, flip: bool = True,
                         num_epochs=None, drop_remainder: bool = True, shard_index: int = 0,
                         shard_count: int = 1, worker_count: int = 0, image_key: str = "image",
                         label_key: str = "label", cache_dir=None,
                         cache_limit=None):
  """Shuffled, augmented batches {"image": uint8 [B, S, S, 3], "label": int64 [B]}."""
  transform = TrainClassification(size=image_size, area_range=area_range,
                                  aspect_ratio_range=aspect_ratio_range, flip=flip,
                                  image_key=image_key, label_key=label_key)
  return _loader(dataset, split, data_dir, transform, batch_size=batch_size,
                 train=True, seed=seed, num_epochs=num_epochs, drop_remainder=drop_remainder,
                 shard_index=shard_index, shard_count=shard_count, worker_count=worker_count,
                 cache_dir=cache_dir, cache_limit=cache_limit)


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
                       cache_limit=None):
  """Batches {"image": uint8 [B, H, W, 3], "mask": uint8 [B, H, W, 1]}: random scale,
  pad (image 0, mask 255), random `crop_size` window, flip; same geometry for both."""
  transform = TrainSegmentation(size=crop_size, scale_range=scale_range, flip=flip,
                                image_key=image_key, mask_key=mask_key)
  return _loader(dataset, split, data_dir, transform, batch_size=batch_size,
                 train=True, seed=seed, num_epochs=num_epochs, drop_remainder=drop_remainder,
                 shard_index=shard_index, shard_count=shard_count, worker_count=worker_count,
                 cache_dir=cache_dir, cache_limit=cache_limit)


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
