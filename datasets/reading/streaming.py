"""The records of a split as tf.data, in the read order (`order`), at local-disk speed.

`records(source, split, ...)` gives the serialized examples of a split of a `sources.Source`
(TFRecord or ArrayRecord, local or streamed from a bucket through the shard cache). The
order is `order`'s: the input pipeline's shards (`input_context`: pipeline i of n is reader
i of n; without one, the only reader) in a seeded order per epoch, read in windows of
`window_shards` shards (fewer when `cache_limit` holds fewer than two windows), the
window's records mixed; unshuffled (evaluation), stored order. A cached shard is held
exactly while its window is read (`shard_reads`).

Speed: TFRecord windows are read by TensorFlow's C++ `TFRecordDataset`s interleaved record
by record; ArrayRecord windows by position, in batches, records shuffled within the window.

Resuming: a tf.data iterator checkpoint resumes a pipeline exactly (same number of input
pipelines). To resume on another number, give `start`: the `order.Position` of all the
pipelines (`records(..., with_position=True)` gives a `Pipeline`: its `position(taken)`,
of the records each pipeline has given in this run); every record of the unfinished
epochs is then read exactly once by the new pipelines.
"""

import dataclasses
import weakref

import numpy as np
import tensorflow as tf

from imagesets.reading import order as order_lib
from imagesets.reading import shard_reads
from imagesets.reading import sources
from imagesets.reading import split_runs

_READ_BATCH = 64            # records read per call into Python (ArrayRecord)
_READ_CALLS = 4             # such calls at once
_TFRECORD_BUFFER = 8 << 20  # bytes read ahead per TFRecord file
_ENDLESS = np.iinfo(np.int64).max


def records(source, split: str, *, shuffle: bool = False, seed: int | None = None,
            num_epochs: int | None = 1, input_context=None, deterministic: bool = True,
            window_shards: int = split_runs.DEFAULT_WINDOW_SHARDS,
            start=None, with_position: bool = False) -> "tf.data.Dataset | Pipeline":
  """Serialized examples of `split`, `num_epochs` times (None: forever), as tf.data:
  stored order, or the order of `seed` with `shuffle` (None: 0, as every reader of a job
  must deal the same order). Checkpointable (a window is a
  function of its pass and number alone). `with_position=True`: a `Pipeline` (the
  dataset and its run, for `position`) instead of the dataset."""
  reader, readers = reader_of(input_context)
  tfrecord = source.file_format == "tfrecord"
  run = split_runs.run_for(source, split, shuffle=shuffle, seed=seed, readers=readers,
                           mix="interleave" if tfrecord else "shuffle",
                           window_shards=window_shards, num_epochs=num_epochs, start=start)
  if tfrecord:
    reads = shard_reads.WindowPins(source.store(), run, reader)
    ds = _windows(run, reader).flat_map(_tfrecord_window(run, reads))
  else:
    reads = shard_reads.PlannedReads(source.store(), source.file_format, run, reader)
    ds = _windows(run, reader).flat_map(_position_window(run, reads, deterministic)).unbatch()
  if num_epochs is not None:
    ds = ds.concatenate(finishing(reads))
  ds = keep_alive(with_file_reads(ds, deterministic), reads)
  return Pipeline(ds, run) if with_position else ds


@dataclasses.dataclass(frozen=True)
class Pipeline:
  """An input pipeline's records (`dataset`) and the run of all the job's pipelines
  (`run`): what `records(..., with_position=True)` returns. Keep it: `position` needs
  the run, which a dataset (or one mapped from it) does not give back."""
  dataset: tf.data.Dataset
  run: order_lib.Run

  def position(self, taken) -> order_lib.Position:
    """The position of readers that have each taken `taken[r]` records of their `records`
    dataset in this run, to give as `start=`."""
    run = self.run
    return run.position([run.place(reader, count) for reader, count in enumerate(taken)])


# A dataset -> what its life holds (`keep_alive`).
_HELD = weakref.WeakKeyDictionary()


def keep_alive(ds: tf.data.Dataset, obj) -> tf.data.Dataset:
  """`ds`, holding `obj` for as long as it, or any dataset or iterator made from it, lives
  (they hold their input). tf.data keeps the traced Python functions of a pipeline in
  graphs that outlive it, so those functions hold what they read weakly (`weakly`): this
  is the strong reference, and it goes with the pipeline (a dropped pipeline's shard reads
  close, letting its shards go). Lifetime only: nothing reads it back."""
  _HELD.setdefault(ds, []).append(obj)
  return ds


def load(dataset: str, split: str, data_dir: str, *, shuffle: bool = False,
         seed: int | None = None, num_epochs: int | None = 1, cache_dir=None, cache_limit=None,
         input_context=None, decoders=None):
  """Plain examples, as `tfds.load(dataset, split=split, data_dir=...)` gives them, of a
  version published at bucket `data_dir`, streamed. `decoders`: TFDS's (e.g.
  `{"image": tfds.decode.SkipDecoding()}`); `shuffle`: the read order of `seed`."""
  source = sources.open_source(dataset, data_dir, cache_dir=cache_dir, cache_limit=cache_limit)
  features = source.builder.info.features
  ds = records(source, split, shuffle=shuffle, seed=seed, num_epochs=num_epochs,
               input_context=input_context, deterministic=True)
  return ds.map(lambda record: features.deserialize_example(record, decoders=decoders),
                num_parallel_calls=tf.data.AUTOTUNE)


def reader_of(input_context) -> tuple[int, int]:
  """(reader, readers): input pipeline i of n (`input_context`) is reader i of n; without
  one, the only reader."""
  if input_context is None:
    return 0, 1
  return input_context.input_pipeline_id, input_context.num_input_pipelines


def with_file_reads(ds: tf.data.Dataset, deterministic: bool = True) -> tf.data.Dataset:
  """`ds`, whose numpy functions read records of shard files, made checkpointable: they
  only pin and open files that are the same whenever they run, so iterator checkpoints
  may leave them out."""
  options = tf.data.Options()
  options.deterministic = deterministic
  options.experimental_external_state_policy = (
      tf.data.experimental.ExternalStatePolicy.IGNORE)
  return ds.with_options(options)


def position(pipeline: Pipeline, taken) -> order_lib.Position:
  """`pipeline.position(taken)`: the position of readers that have each taken `taken[r]`
  records of their `records` dataset in this run (`pipeline`: one of them), to give as
  `start=`."""
  if not isinstance(pipeline, Pipeline):
    raise ValueError("position() takes the Pipeline records(..., with_position=True) "
                     f"returns, not a {type(pipeline).__name__}: make the records with "
                     "with_position=True, keep the object it returns and read its .dataset")
  return pipeline.position(taken)


def weakly(reads):
  """`reads` as the numpy functions see them. tf.data keeps the Python functions of a
  traced pipeline in graphs that outlive the pipeline, so a closure holding the reads
  strongly would hold their shards for the life of the process."""
  ref = weakref.ref(reads)

  def get():
    got = ref()
    if got is None:
      raise RuntimeError("this pipeline was dropped: its shard reads are closed")
    return got
  return get


def finishing(reads) -> tf.data.Dataset:
  """No records: when a pass reaches it, its last window is let go (a finished evaluation
  holds nothing while training goes on)."""
  reads = weakly(reads)

  def finish(_):
    reads().finish()
    return np.zeros([0], dtype=object)

  def empty(dummy):
    got = tf.numpy_function(finish, [dummy], tf.string, stateful=False)
    return tf.data.Dataset.from_tensor_slices(tf.reshape(got, [-1]))
  return tf.data.Dataset.range(1).flat_map(empty)


def _windows(run: order_lib.Run, reader: int) -> tf.data.Dataset:
  """(pass, window) of the reader's run, in order."""
  passes = run.num_passes

  def count(q):
    return np.int64(len(run.reader_pass(int(q), reader).windows))

  def windows(q):
    n = tf.numpy_function(count, [q], tf.int64, stateful=False)
    return tf.data.Dataset.range(tf.reshape(n, [])).map(lambda w: (q, w))
  return tf.data.Dataset.range(_ENDLESS if passes is None else passes).flat_map(windows)


def _tfrecord_window(run: order_lib.Run, reads: shard_reads.WindowPins):
  """A window's shards read by TFRecordDatasets: interleaved record by record when
  shuffling, one after another in stored order otherwise. Within a pass each shard's
  records are a contiguous slice (the interleave reads each shard in order)."""
  reads_ = weakly(reads)

  def enter(q, w):
    q, w = int(q), int(w)
    got = reads_()
    paths = got.enter(q, w)
    pool = run.pool(q)
    shards = got.plan(q).windows[w]
    return (np.array([str(p) for p in paths], dtype=object),
            np.array([pool[s][0] for s in shards], np.int64),
            np.array([len(pool[s]) for s in shards], np.int64))

  def window(q, w):
    paths, skips, takes = tf.numpy_function(enter, [q, w], [tf.string, tf.int64, tf.int64],
                                            stateful=False)
    paths, skips, takes = (tf.reshape(x, [-1]) for x in (paths, skips, takes))
    # Over indices, not paths: a checkpoint then holds positions only, and a restored
    # iterator reads the files of the cache it runs with.
    read = lambda i: tf.data.TFRecordDataset(  # noqa: E731
        paths[i], buffer_size=_TFRECORD_BUFFER).skip(skips[i]).take(takes[i])
    files = tf.data.Dataset.range(tf.size(paths, out_type=tf.int64))
    if not run.order.shuffle:
      return files.flat_map(read)
    return files.interleave(read, cycle_length=run.window_shards, block_length=1,
                            num_parallel_calls=run.window_shards, deterministic=True)
  return window


def _position_window(run: order_lib.Run, reads: shard_reads.PlannedReads, deterministic):
  """A window's records by position, in batches read in parallel: the window's reads all
  end before the next window's begin (flat_map)."""
  reads_ = weakly(reads)

  def bounds(q, w):
    plan = reads_().plan(int(q))
    start = 0 if int(w) == 0 else int(plan.window_ends[int(w) - 1])
    return np.arange(start, int(plan.window_ends[int(w)]), dtype=np.int64)

  def read_batch(q, indices):
    def read(q_, idx):
      idx = idx.tolist()
      return np.array(reads_().read(int(q_), idx[0], len(idx)), dtype=object)
    data = tf.numpy_function(read, [q, indices], tf.string, stateful=False)
    data.set_shape([None])
    return data

  def window(q, w):
    indices = tf.numpy_function(bounds, [q, w], tf.int64, stateful=False)
    indices.set_shape([None])
    return tf.data.Dataset.from_tensor_slices(indices).batch(_READ_BATCH).map(
        lambda batch: read_batch(q, batch), num_parallel_calls=_READ_CALLS,
        deterministic=deterministic)
  return window
