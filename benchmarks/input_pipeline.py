"""Throughput of our input pipelines against keras, an old-style script and decode bounds.

    python benchmarks/input_pipeline.py [--images 3000] [--work_dir /tmp/imagesets_bench]
                                        [--batches 40] [--rounds 2]

One run over the same JPEG photos (made once with PIL and reused: smooth, photo-like
~500x375 pictures in a class-folder tree, plus the same bytes as a TFDS dataset built by
our `flowers` builder from that tree; pipelines read all its splits), at 224x224 and
batch 64, in images/s and CPU ms per image:

* train          `classification_train` (shuffle, random-resized crop fused into decoding, flip)
* eval           `classification_eval(mode="resize")` (decode, resize: same work as the bound)
* eval crop      `classification_eval(mode="central_crop")` (the default, fused central crop)
* keras          `keras.utils.image_dataset_from_directory` + prefetch
* old script     TFRecordDataset -> parse -> decode_jpeg -> resize -> shuffle -> batch, with
                 sequential maps as in the queue-runner era scripts it replaces
* bound: decode+resize       in-memory JPEG bytes, parallel decode_jpeg + resize, batch
* bound: fused decode_crop   in-memory JPEG bytes, parallel random crop fused into decoding
* the same + flip            (diagnostic) the fused bound plus a random left-right flip
* train ops, in memory       (diagnostic) our training map (seeded crop fused into decoding,
                             flip) on the in-memory bytes: the training pipeline minus
                             reading shard files, parsing and the shuffle buffer

Each pipeline is timed over `--batches` batches after a warm-up, in `--rounds`
interleaved rounds; the table shows the median round (the machine is shared: it prints
the load average, and CPU time per image, which other jobs barely move).
"""

import argparse
import io
import multiprocessing
import os
import pathlib
import statistics
import time

import numpy as np
import PIL.Image
import PIL.ImageDraw
import PIL.ImageFilter
import tensorflow as tf
import tensorflow_datasets as tfds

from imagesets.reading import input_pipeline
from imagesets.reading import preprocess_ops as ops
from imagesets.class_folders import class_folders_dataset_builder as class_folders

AUTOTUNE = tf.data.AUTOTUNE
ALL_SPLITS = "train+validation+test"  # every photo, as in the other pipelines
NUM_CLASSES = 5
# Mostly landscape 500x375 like the flowers photos, some portrait and 3:2.
SIZES = [(500, 375)] * 6 + [(375, 500)] * 2 + [(500, 333)] * 2


def make_photo(index: int) -> bytes:
  """A smooth, photo-like JPEG: colour gradients, blurred shapes, fine grain."""
  rng = np.random.default_rng(index)
  width, height = SIZES[index % len(SIZES)]

  def field(grid_h, grid_w, amplitude):
    grid = rng.normal(0, 1, (grid_h, grid_w, 3))
    small = PIL.Image.fromarray(np.uint8(np.clip(128 + 40 * grid, 0, 255)))
    return (np.asarray(small.resize((width, height), PIL.Image.BICUBIC), np.float32)
            - 128) / 40 * amplitude

  pixels = rng.uniform(60, 190, 3) + field(3, 4, 50) + field(12, 16, 18)
  image = PIL.Image.fromarray(np.uint8(np.clip(pixels, 0, 255)))
  draw = PIL.ImageDraw.Draw(image)
  for _ in range(int(rng.integers(6, 16))):
    x, y = rng.uniform(0, width), rng.uniform(0, height)
    rx, ry = rng.uniform(10, width / 4, 2)
    draw.ellipse([x - rx, y - ry, x + rx, y + ry],
                 fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
  image = image.filter(PIL.ImageFilter.GaussianBlur(2))
  pixels = np.asarray(image, np.float32) + field(height // 3, width // 3, 6)
  out = io.BytesIO()
  PIL.Image.fromarray(np.uint8(np.clip(pixels, 0, 255))).save(out, "JPEG", quality=90)
  return out.getvalue()


def _write_photo(args):
  index, path = args
  path.write_bytes(make_photo(index))


def make_photo_tree(root: pathlib.Path, count: int) -> list[pathlib.Path]:
  """`root/class_<k>/<index>.jpg`, made once (a marker records the count)."""
  marker = root / f".complete-{count}"
  paths = [root / f"class_{i % NUM_CLASSES}" / f"{i:05d}.jpg" for i in range(count)]
  if not marker.exists():
    for k in range(NUM_CLASSES):
      (root / f"class_{k}").mkdir(parents=True, exist_ok=True)
    with multiprocessing.Pool(os.cpu_count()) as pool:
      pool.map(_write_photo, list(enumerate(paths)), chunksize=32)
    marker.touch()
  return paths


def _count(batch):
  image = batch["image"] if isinstance(batch, dict) else batch
  return int((image[0] if isinstance(image, tuple) else image).shape[0])


def measure(ds, batches, warmup=5):
  """(images/s, CPU ms/image) over `batches` batches after `warmup` batches.

  The warm-up covers pipeline start and buffers filling (a whole first epoch for the
  cached variants). CPU time is this process's, all threads: unlike wall time it
  hardly moves when other jobs share the machine.
  """
  iterator = iter(ds)
  for _ in range(warmup):
    next(iterator)
  count = 0
  started, cpu_started = time.perf_counter(), time.process_time()
  for _ in range(batches):
    count += _count(next(iterator))
  wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
  return count / wall, 1000 * cpu / count


def _resize_u8(image, size):
  return tf.cast(tf.round(tf.image.resize(image, (size, size))), tf.uint8)


def in_memory(blobs, decode, batch_size):
  return (tf.data.Dataset.from_tensor_slices(blobs).repeat()
          .map(decode, num_parallel_calls=AUTOTUNE)
          .batch(batch_size, drop_remainder=True).prefetch(AUTOTUNE))


def pipelines(photo_root, builder, blobs, size, batch_size):
  """{name: (zero-argument function returning an endless dataset of batches, warm-up)}."""
  import keras  # only the benchmark needs it (TensorFlow's dependency)

  def decode_resize(contents):
    return _resize_u8(tf.io.decode_jpeg(contents, channels=3), size)

  def fused_decode_crop(contents):
    begin, crop_size, _ = tf.image.sample_distorted_bounding_box(
        tf.image.extract_jpeg_shape(contents), tf.zeros([1, 0, 4]), min_object_covered=0.0,
        aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0), max_attempts=10,
        use_image_if_no_bounding_boxes=True)
    window = tf.stack([begin[0], begin[1], crop_size[0], crop_size[1]])
    return _resize_u8(tf.image.decode_and_crop_jpeg(contents, window, channels=3), size)

  def train_ops_in_memory():
    # `classification_train`'s per-example work (same ops, same per-example seeds).
    preprocess = ops.compose(ops.decode_and_random_crop(size), ops.random_flip_left_right(),
                             ops.keep("image"))
    key = tf.constant(1, tf.int64)
    return (tf.data.Dataset.from_tensor_slices({"image": blobs}).repeat().enumerate()
            .map(lambda index, data: preprocess({**data, ops.SEED_KEY: tf.stack([key, index])}),
                 num_parallel_calls=AUTOTUNE)
            .batch(batch_size, drop_remainder=True).prefetch(AUTOTUNE))

  def old_script():
    files = sorted(str(p) for p in pathlib.Path(builder.data_dir).glob("*.tfrecord-*"))
    spec = {"image": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
      example = tf.io.parse_single_example(record, spec)
      return example["image"], example["label"]

    def decode(image, label):
      return tf.image.resize(tf.image.decode_jpeg(image, channels=3), (size, size)), label

    # repeat() first: the scripts' shuffle holds decoded images, and draining it at the
    # end of an epoch would hand out images without decoding them (not steady state).
    return (tf.data.TFRecordDataset(files).repeat().map(parse).map(decode)
            .shuffle(1000, seed=0).batch(batch_size))

  common = dict(batch_size=batch_size, image_size=size, split=ALL_SPLITS)
  makers = {
      "train (ours)": lambda: input_pipeline.classification_train(builder, seed=0, **common),
      "train, cache=\"encoded\" (ours)": lambda: input_pipeline.classification_train(
          builder, seed=0, cache="encoded", **common),
      "train, cache=\"decoded\" (ours)": lambda: input_pipeline.classification_train(
          builder, seed=0, cache="decoded", **common),
      "eval, resize (ours)": lambda: input_pipeline.classification_eval(
          builder, mode="resize", **common).repeat(),
      "eval, central crop (ours)": lambda: input_pipeline.classification_eval(
          builder, mode="central_crop", **common).repeat(),
      "keras image_dataset_from_directory": lambda: keras.utils.image_dataset_from_directory(
          photo_root, image_size=(size, size), batch_size=batch_size, shuffle=True, seed=0,
          verbose=False).prefetch(AUTOTUNE).repeat(),
      "old script (TFRecord, sequential maps)": old_script,
      "bound: decode+resize (in memory)": lambda: in_memory(blobs, decode_resize, batch_size),
      "bound: fused decode_and_crop (in memory)": lambda: in_memory(
          blobs, fused_decode_crop, batch_size),
      "diagnostic: fused bound + flip (in memory)": lambda: in_memory(
          blobs, lambda c: tf.image.random_flip_left_right(fused_decode_crop(c)), batch_size),
      "diagnostic: train ops, in memory (ours)": train_ops_in_memory,
  }
  epoch = -(-len(blobs) // batch_size)
  return {name: (make, 5 + epoch * ("cache" in name)) for name, make in makers.items()}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--images", type=int, default=3000)
  parser.add_argument("--work_dir", default="/tmp/imagesets_bench")
  parser.add_argument("--batches", type=int, default=40)
  parser.add_argument("--rounds", type=int, default=2)
  parser.add_argument("--batch_size", type=int, default=64)
  parser.add_argument("--image_size", type=int, default=224)
  args = parser.parse_args()

  work_dir = pathlib.Path(args.work_dir)
  photo_root = work_dir / f"photos-{args.images}"
  started = time.perf_counter()
  paths = make_photo_tree(photo_root, args.images)
  blobs = [path.read_bytes() for path in paths]
  builder = class_folders.Builder(
      config=class_folders.ClassFoldersConfig(name="bench", root=str(photo_root)),
      data_dir=work_dir / f"tfds-{args.images}")
  if not builder.is_prepared():
    builder.download_and_prepare()
  shards = {name: split.num_shards for name, split in builder.info.splits.items()}
  print(f"{len(blobs)} JPEG photos, mean {np.mean([len(b) for b in blobs]) / 1024:.0f} KiB, "
        f"flowers shards {shards}; ready in {time.perf_counter() - started:.0f} s")

  load_at_start = os.getloadavg()
  candidates = pipelines(photo_root, builder, blobs, args.image_size, args.batch_size)
  measured = {name: [] for name in candidates}
  for round_index in range(args.rounds):
    for name, (make, warmup) in candidates.items():
      rate, cpu = measure(make(), args.batches, warmup)
      measured[name].append((rate, cpu))
      print(f"  round {round_index + 1}: {name:44s} {rate:8,.0f} img/s {cpu:6.3f} CPU ms/img",
            flush=True)

  rates = {name: statistics.median(r for r, _ in runs) for name, runs in measured.items()}
  cpu_ms = {name: statistics.median(c for _, c in runs) for name, runs in measured.items()}
  print(f"\nload average (1, 5, 15 min) at the start: {load_at_start}, at the end: "
        f"{os.getloadavg()}")
  print(f"{args.image_size}x{args.image_size}, batch {args.batch_size}, "
        f"{args.batches} batches per measurement, median of {args.rounds} rounds, "
        f"{os.cpu_count()} cores\n")
  print("| pipeline | img/s (wall) | CPU ms / image |")
  print("|---|---:|---:|")
  for name, rate in rates.items():
    print(f"| {name} | {rate:,.0f} | {cpu_ms[name]:.3f} |")
  keras_name = "keras image_dataset_from_directory"
  fused = "bound: fused decode_and_crop (in memory)"
  decode = "bound: decode+resize (in memory)"
  # Ratio of speeds: wall img/s, and the inverse ratio of CPU time per image.
  print("\n| goal | wall ratio | CPU ratio | target |\n|---|---:|---:|---:|")
  for train in [n for n in candidates if n.startswith("train")]:
    for reference, target in [(keras_name, 2.3), (fused, 0.90)]:
      print(f"| {train} / {reference} | {rates[train] / rates[reference]:.2f} | "
            f"{cpu_ms[reference] / cpu_ms[train]:.2f} | >= {target} |")
  for evaluation in [n for n in candidates if n.startswith("eval")]:
    print(f"| {evaluation} / {decode} | {rates[evaluation] / rates[decode]:.2f} | "
          f"{cpu_ms[decode] / cpu_ms[evaluation]:.2f} | >= 0.95 |")


if __name__ == "__main__":
  main()
