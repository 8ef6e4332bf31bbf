"""How well the streaming order shuffles, against a full global shuffle.

Takes 50,000 examples of 10 classes cut into 64 shards *sorted by label* (the worst case: data
written without TFDS's build-time shuffle, e.g. a few classes per shard; TFDS builds are shuffled
when written, so real shards are far better mixed) and compares the label order of one epoch:

  global          a uniform permutation of all examples (what a local ArrayRecord read gives)
  streamed, W=k   the streaming order: shards in a seeded order, records shuffled within
                  windows of k shards (no shuffle buffer after it)
  streamed + buffer   the same, then the pipelines' default shuffle buffer (2,048)

Reported: the mean and longest run of one label, and the largest share of one label in any
window of 256 consecutive examples (0.10 = perfectly mixed for 10 classes).

Run by hand: .venv/bin/python benchmarks/stream_shuffle.py
"""

import pathlib

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent


def stats(labels: np.ndarray, classes: int = 10) -> str:
  change = np.flatnonzero(np.diff(labels)) + 1
  runs = np.diff(np.concatenate([[0], change, [len(labels)]]))
  window = 256
  worst = max(np.bincount(labels[i:i + window], minlength=classes).max() / window
              for i in range(0, len(labels) - window, 16))
  return f"{runs.mean():.2f} | {runs.max()} | {worst:.2f}"


def main():
  import tensorflow as tf
  from imagesets.reading import input_pipeline
  from imagesets.reading import order as order_lib

  n, classes, num_shards = 50_000, 10, 64
  labels = np.repeat(np.arange(classes), n // classes)        # sorted by label
  shards = np.array_split(np.arange(n), num_shards)
  print(f"{n} examples, {classes} classes, {num_shards} shards sorted by label (worst case)\n")
  print("| order | mean run of one label | longest run | max share of a label in 256 |")
  print("|---|---|---|---|")
  print(f"| global shuffle | {stats(labels[np.random.default_rng(0).permutation(n)])} |")
  for window in (1, 4, 16):
    order = order_lib.Order([order_lib.ShardSlice(str(i), 0, len(s))
                             for i, s in enumerate(shards)], seed=0, shuffle=True)
    rows = order_lib.Run(order, 1, window).reader_pass(0, 0).rows
    streamed = np.array([labels[shards[s][r]] for s, r in rows.tolist()])
    buffered = np.fromiter(tf.data.Dataset.from_tensor_slices(streamed).shuffle(
        input_pipeline.DEFAULT_SHUFFLE_BUFFER, seed=0).as_numpy_iterator(), np.int64)
    print(f"| streamed, window of {window} shard(s) | {stats(streamed)} |")
    print(f"| streamed, window of {window} shard(s) + shuffle buffer 2,048 | {stats(buffered)} |")


if __name__ == "__main__":
  main()
