"""Build speed and peak memory of the flowers builder against the seed converter.

    python benchmarks/flowers_build.py [--images 3000] [--small 1500] [--work /tmp/flowers_bench]
                                       [--repeats 3] [--kinds seed,flowers,ceiling,seed_tfds]

Makes a class-per-folder tree of photo-like JPEGs (500x375, imagesets_testing.sample_images: smooth
colour fields, soft shapes and grain, so they compress like photos, not like noise), then
runs, each in a fresh process so peak memory is its own:

* seed: TF-slim's flowers converter (the seed article's `_convert_dataset`) in TF2 --
  read each file, decode it with TensorFlow to learn its size, build the tf.train.Example,
  write it with tf.io.TFRecordWriter into 5 shards per split; one process, as the script
  was. This is the reference of the goals (issue 22: steady state >= 2.5x its rate, CPU per
  image <= 0.7x its CPU);
* seed via TFDS: the same per-file work inside our builder (TFDS's writer and shuffling,
  our splits and features), one process: what the seed's approach costs as a TFDS build;
* flowers: our builder (header read + marker walk + 1/8-scale draft decode, both cores),
  at `--images` and at `--small` images (peak memory must be flat);
  the seed converter also runs at both sizes: the steady state of each is
  (images - small) / (time at images - time at small), which leaves out the fixed costs
  (starting the workers, TFDS's metadata, the first split's wait);
* flowers_off: the same with `leakage="off"` (nothing fingerprinted: no duplicates,
  leakage, quality findings or page);
* tfds_writer: our builder with the records made and shuffled on TFDS's writer thread, as
  before prepared_records (the workers return example dicts);
* ceiling: only our per-file work on both cores, results thrown away -- no writer at all:
  the most any build doing this validation can reach here.

Runs are interleaved `--repeats` times and medians reported, so a load change on this
shared machine hits every kind alike. CPU = user + system time of the build process and
its worker processes, after TensorFlow started. Workers are forked from the build process; they
hold at most a few chunks of files each.
"""

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import time

from imagesets_testing import sample_images
import child_runs

CLASSES = ["daisy", "dandelion", "roses", "sunflowers", "tulips"]
KINDS = ["seed", "seed_tfds", "flowers", "flowers_off", "tfds_writer", "ceiling"]


TREES = ("photo_like", "crops", "copies", "large")
LARGE = (4032, 3024)  # a 12 MP phone photo's size
COPIES = 4  # the copies tree holds each crop this many times


def tree_root(work: pathlib.Path, tree: str, count: int) -> pathlib.Path:
  """Where `make_tree` keeps the tree of `count` photos of kind `tree` under `work` (the
  large tree's folder name says which generator made it)."""
  prefix = {"photo_like": "photos", "large": "large12mp"}.get(tree, tree)
  return pathlib.Path(work) / f"{prefix}_{count}"


def make_tree(root: pathlib.Path, count: int, tree: str = "photo_like") -> int:
  """root/<class>/<i>.jpg for i < count (reused if present); returns total bytes.

  photo_like: 500x375 photo-like JPEGs (sample_images), 5 classes; crops: distinct crops of
  the 15 real photos (imagesets_testing.photo_crops, no bursts), 500 wide and 333 to 375
  high, a class per photo; copies: count / COPIES of those crops, each stored COPIES times
  under other names in its class (exact copies: the same bytes); large: distinct 12 MP
  pictures (`LARGE`) with a phone photo's detail and file size (~4.1 MB at quality 90):
  the real photos tiled at their own resolution in a seeded arrangement, with a sensor's
  noise (sigma 3), 5 classes."""
  if tree == "photo_like":
    for index in range(count):
      path = root / CLASSES[index % len(CLASSES)] / f"{index:05d}.jpg"
      if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(sample_images.jpeg(375, 500, seed=index))
  elif tree == "large" and not (root / ".complete").exists():
    for index in range(count):
      path = root / CLASSES[index % len(CLASSES)] / f"{index:05d}.jpg"
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_bytes(_large_picture(seed=index))
    (root / ".complete").write_text(str(count))
  elif not (root / ".complete").exists():
    from imagesets_testing import photo_crops  # pylint: disable=import-outside-toplevel
    stored = COPIES if tree == "copies" else 1
    distinct, written = -(-count // stored), 0
    sizes = [(500, height) for height in range(333, 376)]
    for number, size in enumerate(sizes):  # one call per size: every size of the range
      share = distinct // len(sizes) + (number < distinct % len(sizes))
      for picture, data in photo_crops.jpegs(share, seed=size[1], scenes=15, size=size,
                                             share_in_bursts=0.0):
        for _ in range(stored):
          if written < count:
            path = root / picture.scene / f"{written:05d}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            written += 1
    (root / ".complete").write_text(str(written))
  return sum(path.stat().st_size for path in root.glob("*/*.jpg"))


def _large_picture(seed: int) -> bytes:
  """A `LARGE` JPEG: rows of the real photos at their own size (flipped at random), moved
  by a random offset, plus Gaussian noise of sigma 3 (a phone sensor's grain)."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  from imagesets_testing import real_photos  # pylint: disable=import-outside-toplevel
  width, height = LARGE
  photos = list(real_photos.photos().values())
  rng = np.random.default_rng(seed)
  canvas, y = np.zeros((height, width, 3), np.uint8), 0
  while y < height:
    x, row = -int(rng.integers(0, 150)), 0
    while x < width:
      photo = photos[int(rng.integers(len(photos)))]
      photo = photo[:, ::-1] if rng.uniform() < 0.5 else photo
      tall, wide = photo.shape[:2]
      canvas[y:y + tall, max(x, 0):x + wide] = photo[:height - y, max(x, 0) - x:width - x]
      x, row = x + wide, max(row, tall)
    y += row
  noisy = canvas.astype(np.int16) + rng.normal(0, 3, canvas.shape).round().astype(np.int16)
  return sample_images.encode(np.clip(noisy, 0, 255).astype(np.uint8), "JPEG", quality=90)


def seed_converter(root: str, out_dir: str) -> int:
  """TF-slim's download_and_convert_flowers, minus the download; returns examples written."""
  import random
  import tensorflow as tf
  class_names = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
  ids = {name: i for i, name in enumerate(class_names)}
  files = sorted(os.path.join(root, c, f) for c in class_names for f in os.listdir(os.path.join(root, c)))
  random.seed(0)
  random.shuffle(files)
  validation = len(files) // 10
  written = 0
  os.makedirs(out_dir, exist_ok=True)
  for split, names in (("validation", files[:validation]), ("train", files[validation:])):
    per_shard = -(-len(names) // 5)
    for shard in range(5):
      path = os.path.join(out_dir, f"flowers_{split}_{shard:05d}-of-00005.tfrecord")
      with tf.io.TFRecordWriter(path) as writer:
        for name in names[shard * per_shard:(shard + 1) * per_shard]:
          data = tf.io.gfile.GFile(name, "rb").read()
          image = tf.io.decode_jpeg(data, channels=3)  # slim: ImageReader.read_image_dims
          label = ids[os.path.basename(os.path.dirname(name))]
          example = tf.train.Example(features=tf.train.Features(feature={  # image_to_tfexample
              "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
              "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"jpg"])),
              "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
              "image/height": tf.train.Feature(int64_list=tf.train.Int64List(value=[image.shape[0]])),
              "image/width": tf.train.Feature(int64_list=tf.train.Int64List(value=[image.shape[1]])),
          }))
          writer.write(example.SerializeToString())
          written += 1
  return written


def seed_style_process(item):
  """The old converters' per-image work: decode everything with TF just to learn the size."""
  import tensorflow as tf
  from imagesets.building import class_folders_tree
  root, relative_path, *_ = item
  data = class_folders_tree.read(root, relative_path)
  shape = tf.io.decode_image(data).shape
  return {"image": data, "label": class_folders_tree.label_of(relative_path),
          "file_name": relative_path, "height": shape[0], "width": shape[1],
          "channels": shape[2], "format": "jpeg"}, None


def _use_seed_style():
  """Same builder, splits, features and TFDS writer; seed-style work, in one process."""
  from imagesets.building import parallel_map
  from imagesets.building import class_folders_examples
  class_folders_examples.process_file = seed_style_process
  parallel_map.available_cores = lambda: 1


def ceiling(root: str) -> int:
  """Our per-file work on every core, handed out as builds do, results dropped: no
  serializing, no writing."""
  from imagesets.building import class_folders_tree
  from imagesets.building import generation
  from imagesets.building import parallel_map
  from imagesets.building import class_folders_examples
  items = [class_folders_examples.work_item(root, path) for path in class_folders_tree.scan(root).images]
  with parallel_map.executor() as pool:
    return sum(1 for _ in parallel_map.ordered_map(
        class_folders_examples.process_file, items, pool,
        chunk_size=generation._CHUNK, window=generation._WINDOW_CHUNKS))  # pylint: disable=protected-access


def build_once(kind: str, root: str, data_dir: str) -> dict:
  """Runs in a child process: one build, its time and peak memory."""
  import imagesets  # noqa: F401
  from imagesets.class_folders import class_folders_dataset_builder as class_folders
  import tensorflow as tf
  tf.constant(0)  # start TensorFlow's runtime before the clock, as the builders have it
  cpu_before = _cpu_seconds()
  started = time.perf_counter()
  if kind == "seed":
    examples = seed_converter(root, data_dir)
    out_dir = pathlib.Path(data_dir)
  elif kind == "ceiling":
    examples = ceiling(root)
    out_dir = None
  else:
    if kind == "seed_tfds":
      _use_seed_style()
    if kind == "tfds_writer":  # our builder, its splits written by TFDS's own SplitBuilder
      import tensorflow_datasets as tfds
      from imagesets.building import builder_base
      builder_base.ImageSetBuilder._generate_all_splits = (  # pylint: disable=protected-access
          lambda self, dl_manager, download_config, use_beam:
          tfds.core.GeneratorBasedBuilder._generate_splits(self, dl_manager, download_config))
    leakage = "off" if kind == "flowers_off" else ""  # "": the default (warn)
    builder = class_folders.Builder(
        config=class_folders.ClassFoldersConfig(name="bench", root=root, leakage=leakage),
        data_dir=data_dir)
    builder.download_and_prepare()
    examples = sum(split.num_examples for split in builder.info.splits.values())
    out_dir = pathlib.Path(builder.data_dir)
  seconds = time.perf_counter() - started
  shards = sum(p.stat().st_size for p in out_dir.glob("*.tfrecord*")) if out_dir else 0
  return {
      "seconds": seconds, "cpu": _cpu_seconds() - cpu_before, "examples": examples,
      "shard_bytes": shards,
      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
  }


def _cpu_seconds() -> float:
  own = resource.getrusage(resource.RUSAGE_SELF)
  workers = resource.getrusage(resource.RUSAGE_CHILDREN)  # the build's worker processes
  return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime


def run_child(kind: str, root: pathlib.Path, data_dir: pathlib.Path) -> dict:
  subprocess.run(["rm", "-rf", str(data_dir)], check=True)
  return child_runs.run(__file__, kind, "--root", root, "--work", data_dir)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--images", type=int, default=3000)
  parser.add_argument("--small", type=int, default=1500)
  parser.add_argument("--repeats", type=int, default=3,
                      help="interleaved builds of each kind; medians are reported")
  parser.add_argument("--kinds", default=",".join(KINDS),
                      help="which of seed, seed_tfds, flowers, ceiling to run")
  parser.add_argument("--work", default="/tmp/flowers_bench")
  parser.add_argument("--child", choices=KINDS)
  parser.add_argument("--root")
  parser.add_argument("--tree", choices=TREES, default="photo_like")
  args = parser.parse_args()
  if args.child:
    print(json.dumps(build_once(args.child, args.root, args.work)))
    return
  work = pathlib.Path(args.work)
  print(f"load average before: {os.getloadavg()}, cores: {os.cpu_count()}")
  roots = {count: tree_root(work, args.tree, count) for count in (args.images, args.small)}
  source_bytes = {count: make_tree(root, count, args.tree) for count, root in roots.items()}
  for count, total in source_bytes.items():
    print(f"{count} photos, {total / count / 1024:.1f} KiB each on average")
  kinds = args.kinds.split(",")
  runs = {(kind, args.images): [] for kind in kinds}
  for kind in ("seed", "flowers", "flowers_off"):
    if kind in kinds:
      runs[kind, args.small] = []
  for _ in range(args.repeats):  # interleaved, so load changes hit every kind alike
    for kind, count in runs:
      result = run_child(kind, roots[count], work / f"out_{kind}_{count}")
      assert result["examples"] == count, result
      runs[kind, count].append(result)
  median = {key: statistics.median(r["seconds"] for r in results)
            for key, results in runs.items()}
  cpu = {key: statistics.median(r["cpu"] for r in results) for key, results in runs.items()}
  for (kind, count), results in runs.items():
    peak = max(r["peak_rss_mib"] for r in results)
    times = ", ".join(f"{r['seconds']:.2f}" for r in results)
    size = (f", shards/source bytes {results[0]['shard_bytes'] / source_bytes[count]:.4f}"
            if results[0]["shard_bytes"] else "")
    print(f"  {kind:9s} {count:5d} images: {count / median[kind, count]:6,.0f} img/s (median "
          f"of {times} s), CPU {1000 * cpu[kind, count] / count:.3f} ms/image, "
          f"peak RSS {peak:,.0f} MiB{size}")
  big, small = args.images, args.small
  if {"seed", "flowers"} <= set(kinds):
    seed, ours = median["seed", big], median["flowers", big]
    print(f"whole process, {big} images: flowers / seed converter {seed / ours:.2f}x by wall, "
          f"CPU per image {cpu['flowers', big] / cpu['seed', big]:.2f}x the converter's")
    # Per round (the two sizes ran minutes apart at most), then the median of the rounds.
    two_sizes = [kind for kind in ("seed", "flowers", "flowers_off") if kind in kinds]
    steady = {kind: statistics.median(
        (big - small) / (b["seconds"] - s["seconds"])
        for b, s in zip(runs[kind, big], runs[kind, small])) for kind in two_sizes}
    steady_cpu = {kind: statistics.median(
        (b["cpu"] - s["cpu"]) / (big - small)
        for b, s in zip(runs[kind, big], runs[kind, small])) for kind in two_sizes}
    for kind in two_sizes[1:]:
      print(f"steady state ({big} - {small} images, median of the rounds): "
            f"{kind} {steady[kind]:,.0f} img/s, "
            f"seed {steady['seed']:,.0f} img/s: {steady[kind] / steady['seed']:.2f}x "
            f"(goal >= 2.0x); CPU per image {1000 * steady_cpu[kind]:.3f} vs "
            f"{1000 * steady_cpu['seed']:.3f} ms: "
            f"{steady_cpu[kind] / steady_cpu['seed']:.2f}x")
    if "ceiling" in kinds:
      print(f"flowers / ceiling (our per-file work alone, no writer): "
            f"{median['ceiling', big] / ours:.2f}")
    if "tfds_writer" in kinds:
      print(f"flowers / flowers with TFDS's writer: {median['tfds_writer', big] / ours:.2f}x "
            f"by wall, CPU {cpu['flowers', big] / cpu['tfds_writer', big]:.2f}x")
    if "seed_tfds" in kinds:
      print(f"flowers / seed via TFDS: {median['seed_tfds', big] / ours:.2f}x")
  print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
  main()
