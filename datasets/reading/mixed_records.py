"""A mix's reads as tf.data (`input_pipeline`'s mixed pipelines): each reader's examples
by position, parsed, labelled with the mix's ids. The mix itself, its order and its
position are `mixing`'s, without TensorFlow (Grain's workers read them too)."""

import numpy as np
import tensorflow as tf

from imagesets.annotations import schema as schema_lib
from imagesets.reading import mixing
from imagesets.reading import streaming

# Positions read per call into Python; one call at a time, so that each part's reads come
# in the order its windows were sized for (calls at once straddle windows, and a read
# behind the windows held pins its shard again: under a cache limit, downloads again).
_READ_BATCH = 64
_ENDLESS = np.iinfo(np.int64).max
OBJECTS = mixing.OBJECTS


def mapped_label_tensor(label_ids, parts: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
  """`mapped_labels` in TensorFlow: `labels[i]` of part `parts[i]` (int64 vectors)."""
  width = max(len(ids) for ids in label_ids)
  table = tf.constant(np.array([list(ids) + [-1] * (width - len(ids)) for ids in label_ids],
                               np.int64).reshape(-1))
  counts = tf.gather(tf.constant([len(ids) for ids in label_ids], tf.int64), parts)
  checked = tf.debugging.assert_less(
      labels, counts, message="a record has a label its part's features do not list")
  with tf.control_dependencies([checked]):
    return tf.where(labels < 0, labels, tf.gather(table, parts * width + tf.maximum(labels, 0)))


def records(run: mixing.MixedRun, reader: int = 0) -> tf.data.Dataset:
  """The reader's examples as tf.data: {"image" (encoded), "label" (the mix's id),
  "source" (part), "index" (the job's count of the example: seeds its augmentation)}; a
  detection mix's hold "objects": {"bbox": float32 [N, 4] as stored, "label": int64 [N]
  (the mix's ids)} instead of "label"."""
  mix_ = run.mix
  reads = streaming.weakly(run)
  detection = mix_.task == schema_lib.DETECTION
  spec = {mix_.image_key: tf.io.FixedLenFeature([], tf.string)}
  if detection:   # (TFDS stores a Sequence's fields flattened: N x 4 floats, N ints)
    spec.update({f"{OBJECTS}/bbox": tf.io.RaggedFeature(tf.float32),
                 f"{OBJECTS}/label": tf.io.RaggedFeature(tf.int64)})
  else:
    spec[mix_.label_key] = tf.io.FixedLenFeature([], tf.int64)
  def read(js):
    js = js.tolist()
    parts, records_ = reads().read(reader, js[0], len(js))
    return parts.astype(np.int64), np.array(records_, dtype=object)

  def batch(js):
    # (stateful: tf.data then never runs two reads at once, see _READ_BATCH)
    parts, serialized = tf.numpy_function(read, [js], [tf.int64, tf.string], stateful=True)
    parts.set_shape([None])
    serialized.set_shape([None])
    parsed = tf.io.parse_example(serialized, spec)
    out = {"image": parsed[mix_.image_key], "source": parts,
           "index": int(run.global_index(reader, 0)) + js * run.readers}
    if not detection:
      return {**out, "label": mapped_label_tensor(mix_.label_ids, parts,
                                                  parsed[mix_.label_key])}
    labels, boxes = parsed[f"{OBJECTS}/label"], parsed[f"{OBJECTS}/bbox"]
    checked = tf.debugging.assert_equal(
        boxes.row_lengths(), 4 * labels.row_lengths(),
        message=f"a record's {OBJECTS}/bbox does not hold 4 coordinates a label")
    with tf.control_dependencies([checked]):
      flat = tf.reshape(boxes.flat_values, [-1, 4])
    return {**out, OBJECTS: {
        "bbox": tf.RaggedTensor.from_row_lengths(flat, labels.row_lengths()),
        "label": labels.with_flat_values(mapped_label_tensor(
            mix_.label_ids, tf.gather(parts, labels.value_rowids()), labels.flat_values))}}

  end = run.length(reader)
  ds = tf.data.Dataset.range(run.offsets[reader], _ENDLESS if end is None else end)
  ds = ds.batch(_READ_BATCH).map(batch).unbatch()
  if detection:   # (unbatched ragged rows keep a ragged spec: a map gives plain tensors)
    ds = ds.map(lambda e: e)
  if end is not None:
    none = tf.zeros([], tf.int64)   # (the finishing step gives no examples)
    nothing = ({OBJECTS: {"bbox": tf.zeros([0, 4]), "label": tf.zeros([0], tf.int64)}}
               if detection else {"label": none})
    ds = ds.concatenate(streaming.finishing(run).map(
        lambda s: {"image": s, **nothing, "source": none, "index": none}))
  return streaming.keep_alive(streaming.with_file_reads(ds), run)
