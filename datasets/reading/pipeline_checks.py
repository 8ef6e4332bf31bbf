"""The pipelines' checks of their options, each refusal one line, shared by the tf.data
pipelines (`input_pipeline`) and Grain's (`grain_pipeline`). Metadata only: no TensorFlow,
so a Grain job never imports it."""

import numbers
from typing import Optional

from imagesets import constants
from imagesets.annotations import schema as schema_lib
from imagesets.reading import mixing
from imagesets.reading import order as order_lib
from imagesets.reading import sources
from imagesets.reading import split_runs

DETECTION_CROP_AREA_RANGE = constants.DETECTION_CROP_AREA_RANGE
DETECTION_EVAL_MODES = ("resize", "pad")


def check_batches(num_examples: int, split: str, batch_size: int, num_epochs: Optional[int],
                  drop_remainder: bool, num_workers: int = 1, what: Optional[str] = None) -> None:
  """Refuses in one line a pipeline that would give not one batch: with `drop_remainder`
  a last partial batch is dropped, so a split (this worker's share of it) smaller than
  `batch_size`, read `num_epochs` times (None: forever, always enough), gives nothing.
  `num_epochs` other than None or a positive int is refused whatever `drop_remainder`."""
  check_epochs(num_epochs)
  if not drop_remainder or num_epochs is None:
    return
  # (the largest share: the epochs' records, one run, dealt to the workers in turn)
  share = -(-num_examples * num_epochs // max(1, num_workers))
  if share >= batch_size:
    return
  epochs = f" times num_epochs={num_epochs}" if num_epochs > 1 else ""
  workers = f" (at most {share} for each of {num_workers} workers)" if num_workers > 1 else ""
  raise ValueError(
      f"{what or f'split {split!r}'} has {num_examples} examples{epochs}{workers}, fewer than "
      f"batch_size={batch_size}: with drop_remainder=True not one batch would come out; give "
      f"batch_size={max(1, share)} or less (or drop_remainder=False)")


def check_epochs(num_epochs) -> None:
  """num_epochs: None (forever) or a positive int (a count of 0 or less reads nothing
  from a bucket and, through tf.data's repeat(-1), forever from a local build)."""
  if num_epochs is not None and (isinstance(num_epochs, bool) or not isinstance(
      num_epochs, numbers.Integral) or num_epochs < 1):
    raise ValueError(f"num_epochs={num_epochs!r}: give a positive number of epochs, or "
                     "None to read forever")


def check_seed(seed) -> None:
  """A Grain loader's seed for a dataset: an int (a mix's loader takes None: the mix's own
  seed). A fresh random seed would not do: its iterator state resumes only with the seed
  it was read with."""
  if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
    raise ValueError(f"seed={seed!r}: give an int seed (None is a mix's own seed; a "
                     "dataset's loader resumes from its state only with the same seed)")


def check_shared_seed(seed, streamed: bool, input_context) -> None:
  """Refuses seed=None for several input pipelines reading one bucket: the shards' order
  of each epoch is dealt to them from the seed, which each process would draw for itself
  (a local build's files are dealt before they are shuffled: any seed will do there)."""
  pipelines = input_context.num_input_pipelines if input_context is not None else 1
  if seed is None and streamed and pipelines > 1:
    raise ValueError(
        f"seed=None with {pipelines} input pipelines reading a bucket: each would draw a seed "
        "of its own and deal the shards in its own order (examples read twice or never): "
        "give every input pipeline the same int seed")


def check_split_batches(source: sources.Source, split, batch_size, num_epochs, drop_remainder,
                        input_context, *, shuffle: bool = True, seed=None) -> None:
  """`check_batches` of a split of `source`, read by `input_context`'s pipelines (None:
  one). Several pipelines are separate datasets: each must give a batch (a job whose
  pipelines give a batch and none would stop one and wait on it), so their shares as the
  read deals them (`pipeline_shares`, of a read shuffled by `seed` or not) are checked."""
  check_epochs(num_epochs)
  if not drop_remainder or num_epochs is None:
    return
  try:
    num_examples = source.builder.info.splits[split].num_examples
  except Exception:  # pylint: disable=broad-except
    return  # a split spec TFDS's info cannot count (unknown, malformed): reading it says so
  pipelines = input_context.num_input_pipelines if input_context is not None else 1
  if pipelines == 1:
    check_batches(num_examples, split, batch_size, num_epochs, drop_remainder)
    return
  if shuffle:  # (the shares of a bucket's read are dealt by the seed every pipeline shares)
    check_shared_seed(seed, source.streamed, input_context)
  epochs = f" times num_epochs={num_epochs}" if num_epochs > 1 else ""
  check_shares(pipeline_shares(source, split, pipelines, num_epochs, shuffle, seed),
               batch_size, f"the {num_examples} examples{epochs} of split {split!r}",
               _dealt(source))


def check_shares(shares: list[int], batch_size: int, what: str, how: str) -> None:
  """Refuses in one line input pipelines (with drop_remainder) of which one would give not
  one batch: `shares[i]`, the records pipeline i reads of `what`, dealt as `how` says."""
  _refuse_fewest(shares, batch_size, "input pipelines", lambda i, fewest: (
      f"input pipeline {i} of {len(shares)} reads {fewest} of {what} (the pipelines read "
      f"{fewest} to {max(shares)}: {how})"))


def check_process_shares(largest: list[int], batch_size: int, what: str, how: str) -> None:
  """Refuses in one line a Grain job (with drop_remainder) of whose `shard_count` processes
  one would give not one batch: `largest[p]`, the most records a worker of process p reads
  of `what` (a process's workers are one loader: it gives a batch when one of them does),
  dealt as `how` says."""
  _refuse_fewest(largest, batch_size, "processes", lambda p, fewest: (
      f"process shard_index={p} of shard_count={len(largest)}: its workers read at most "
      f"{fewest} each of {what} ({how})"))


def _refuse_fewest(shares: list[int], batch_size: int, readers: str, said) -> None:
  """ValueError when the fewest of `shares` is under `batch_size`: `said(i, fewest)`, the
  i-th reader's share in words, then the fix."""
  fewest = min(shares)
  if fewest >= batch_size:
    return
  fix = (f"give batch_size={fewest} or less, or read it with fewer {readers}" if fewest
         else f"read it with fewer {readers}")
  raise ValueError(f"{said(shares.index(fewest), fewest)}, fewer than batch_size={batch_size}:"
                   f" with drop_remainder=True it would give not one batch; {fix} (or "
                   "drop_remainder=False)")


def pipeline_shares(source: sources.Source, split: str, pipelines: int, num_epochs: int,
                    shuffle: bool, seed) -> list[int]:
  """The records each of `pipelines` input pipelines reads of `split` in `num_epochs`
  epochs, as its read deals them: from a bucket, whole shards, dealt anew each epoch
  (`order.Run` of `seed`, or 0, when shuffled); a local TFRecord build, whole shard files
  in stored order, every n-th to a pipeline (TFDS's `input_context` sharding); a local
  ArrayRecord build, every n-th record."""
  shards = split_runs.split_shards(source.builder, split)
  if source.streamed or source.file_format != "array_record":
    split_runs.check_readers(source.builder, split, shards, pipelines, "input pipelines")
  if source.streamed:
    run = order_lib.Run(order_lib.Order(shards, seed or 0, shuffle, "shuffle"), pipelines, 1,
                        num_epochs=num_epochs)
    return [run.length(reader) for reader in range(pipelines)]
  if source.file_format == "array_record":
    total = sum(shard.take for shard in shards)
    return [len(range(reader, total, pipelines)) * num_epochs for reader in range(pipelines)]
  return [sum(shard.take for shard in shards[reader::pipelines]) * num_epochs
          for reader in range(pipelines)]


def _dealt(source: sources.Source) -> str:
  if not source.streamed and source.file_format == "array_record":
    return "every n-th record"
  return "each reads whole shard files"


def refuse_mix_in_eval(dataset, call: str) -> None:
  if isinstance(dataset, mixing.Mix):
    raise ValueError("a mix is for training; evaluate each part on its own split "
                     f"({call}(part.dataset, data_dir=part.data_dir, ...))")


_READ_WITH = {schema_lib.CLASSIFICATION: "classification_train",
              schema_lib.DETECTION: "detection_train"}


def check_mixed(mix, *, keys, task, **given) -> None:
  """Refuses, in one line, a mix of another task than the pipeline's and options a mix's
  parts or its position already decide."""
  if mix.task != task:
    raise ValueError(f"the mix's parts are {mix.task} datasets: read it with "
                     f"{_READ_WITH[mix.task]}")
  for name, value in given.items():
    if value is not None:
      raise ValueError(
          f"{name}={value!r} with a mix: the parts give their own split and data_dir, the "
          "mix its cache_dir and cache_limit (mixing.mix(..., cache_limit=...)), and a mixed "
          "pipeline has no shuffle buffer or memory cache (its state is its position)")
  if keys != (mix.image_key, mix.label_key):
    raise ValueError(f"image_key/label_key of a mix are given to mixing.mix(..., "
                     f"image_key={keys[0]!r}, label_key={keys[1]!r})")


def max_objects(source: sources.Source) -> int:
  """The most objects one image of the version holds (its build's metadata), at least 1."""
  metadata = source.builder.info.metadata or {}
  if "max_objects_per_image" not in metadata:
    raise ValueError(f"{source.builder.info.full_name} records no max_objects_per_image "
                     "(not a detection build of imagesets): give max_boxes=")
  return max(1, int(metadata["max_objects_per_image"]))


def _check_detection(source: sources.Source) -> None:
  features = source.builder.info.features
  if "objects" not in features or "bbox" not in features["objects"].feature:
    raise ValueError(f"{source.builder.info.full_name} has no boxes (features "
                     f"{sorted(features.keys())}): detection pipelines read an "
                     "\"objects\" sequence with \"bbox\" and \"label\", as builds from "
                     "COCO, VOC or YOLO annotations store them")


def detection_source(dataset, *, data_dir, cache_dir, cache_limit, max_boxes, split,
                     batch_size, num_epochs, drop_remainder, input_context,
                     shuffle_buffer=None, shuffle: bool = True, seed=None):
  """(source, or the mix, and max_boxes) of a detection pipeline, its options checked (a
  mix's batches are checked where its run is made)."""
  if max_boxes is not None and (not isinstance(max_boxes, int) or max_boxes < 1):
    raise ValueError(f"max_boxes={max_boxes!r}: give a whole number of at least 1 (the "
                     "padded length of each image's boxes), or None for the version's most")
  if isinstance(dataset, mixing.Mix):
    check_mixed(dataset, split=split, data_dir=data_dir, cache_dir=cache_dir,
                cache_limit=cache_limit, shuffle_buffer=shuffle_buffer,
                keys=(dataset.image_key, dataset.label_key), task=schema_lib.DETECTION)
    return dataset, (max(max_objects(s) for s in dataset.sources) if max_boxes is None
                     else max_boxes)
  split = "train" if split is None else split
  source = sources.open_source(dataset, data_dir, cache_dir=cache_dir, cache_limit=cache_limit)
  _check_detection(source)
  check_split_batches(source, split, batch_size, num_epochs, drop_remainder, input_context,
                      shuffle=shuffle, seed=seed)
  return source, max_objects(source) if max_boxes is None else max_boxes
