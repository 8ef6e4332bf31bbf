"""Build speed and peak memory of the flowers builder against a seed-style build.

    python benchmarks/flowers_build.py [--images 3000] [--small 1500] [--work /tmp/flowers_bench]

Makes a class-per-folder tree of photo-like JPEGs (500x375, imagesets.sample_images: smooth
colour fields, soft shapes and grain, so they compress like photos, not like noise), then builds it twice, each
in a fresh process so peak memory is its own:

* seed-style: the old converters' way -- read each file, decode it with TensorFlow to learn
  its shape, write the Example (same TFDS writer, splits and features as ours);
* flowers: our builder (header read + 1/8-scale draft decode, both cores).

Builds are interleaved `--repeats` times and medians reported, so a load change on this
shared machine hits both kinds alike. Prints img/s of both, their ratio (goal >= 2.3x),
shard/source size and the peak RSS of the build process at `--images` and `--small` images
(goal: flat). Workers are forked from the build process; they hold at most a few chunks of
files each.
"""

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import time

from imagesets import sample_images

CLASSES = ["daisy", "dandelion", "roses", "sunflowers", "tulips"]


def make_tree(root: pathlib.Path, count: int) -> int:
  """root/<class>/<i>.jpg for i < count (reused if present); returns total bytes."""
  total = 0
  for index in range(count):
    path = root / CLASSES[index % len(CLASSES)] / f"{index:05d}.jpg"
    if not path.exists():
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_bytes(sample_images.jpeg(375, 500, seed=index))
    total += path.stat().st_size
  return total


def seed_style_process(item):
  """The old converters' per-image work: decode everything with TF just to learn the size."""
  import tensorflow as tf
  from imagesets import class_folders
  root, relative_path, _ = item
  data = class_folders.read(root, relative_path)
  shape = tf.io.decode_image(data).shape
  return {"image": data, "label": class_folders.label_of(relative_path),
          "file_name": relative_path, "height": shape[0], "width": shape[1],
          "channels": shape[2], "format": "jpeg"}, None


def _use_seed_style():
  """Same builder, splits, features and TFDS writer; seed-style work, in one process."""
  from imagesets import parallel_map
  from imagesets.flowers import flower_files
  flower_files.process_file = seed_style_process
  parallel_map.available_cores = lambda: 1


def build_once(kind: str, root: str, data_dir: str) -> dict:
  """Runs in a child process: one build, its time and peak memory."""
  import imagesets  # noqa: F401
  from imagesets.flowers import flowers_dataset_builder as flowers
  if kind == "seed":
    _use_seed_style()
  builder = flowers.Builder(config=flowers.FlowersConfig(name="bench", root=root),
                            data_dir=data_dir)
  started = time.perf_counter()
  builder.download_and_prepare()
  seconds = time.perf_counter() - started
  examples = sum(split.num_examples for split in builder.info.splits.values())
  shards = sum(p.stat().st_size for p in pathlib.Path(builder.data_dir).glob("*.tfrecord-*"))
  return {
      "seconds": seconds, "examples": examples, "shard_bytes": shards,
      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
  }


def run_child(kind: str, root: pathlib.Path, data_dir: pathlib.Path) -> dict:
  subprocess.run(["rm", "-rf", str(data_dir)], check=True)
  result = subprocess.run(
      [sys.executable, __file__, "--child", kind, "--root", str(root), "--work", str(data_dir)],
      capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
  if result.returncode:
    sys.exit(f"{kind} build failed:\n{result.stderr[-3000:]}")
  return json.loads(result.stdout.strip().splitlines()[-1])


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--images", type=int, default=3000)
  parser.add_argument("--small", type=int, default=1500)
  parser.add_argument("--repeats", type=int, default=3,
                      help="interleaved builds of each kind; medians are reported")
  parser.add_argument("--work", default="/tmp/flowers_bench")
  parser.add_argument("--child", choices=["seed", "flowers"])
  parser.add_argument("--root")
  args = parser.parse_args()
  if args.child:
    print(json.dumps(build_once(args.child, args.root, args.work)))
    return
  work = pathlib.Path(args.work)
  print(f"load average before: {os.getloadavg()}, cores: {os.cpu_count()}")
  roots = {count: work / f"photos_{count}" for count in (args.images, args.small)}
  source_bytes = {count: make_tree(root, count) for count, root in roots.items()}
  for count, total in source_bytes.items():
    print(f"{count} photos, {total / count / 1024:.1f} KiB each on average")
  runs = {("seed", args.images): [], ("flowers", args.images): [], ("flowers", args.small): []}
  for _ in range(args.repeats):  # interleaved, so load changes hit both kinds alike
    for kind, count in runs:
      result = run_child(kind, roots[count], work / f"tfds_{kind}_{count}")
      assert result["examples"] == count, result
      runs[kind, count].append(result)
  for (kind, count), results in runs.items():
    seconds = statistics.median(r["seconds"] for r in results)
    peak = max(r["peak_rss_mib"] for r in results)
    times = ", ".join(f"{r['seconds']:.2f}" for r in results)
    ratio = results[0]["shard_bytes"] / source_bytes[count]
    print(f"  {kind:8s} {count:5d} images: {count / seconds:6,.0f} img/s (median of "
          f"{times} s), peak RSS {peak:,.0f} MiB, "
          f"shards/source bytes {ratio:.4f}")
  seed = statistics.median(r["seconds"] for r in runs["seed", args.images])
  ours = statistics.median(r["seconds"] for r in runs["flowers", args.images])
  print(f"speed-up over seed-style: {seed / ours:.2f}x (goal >= 2.3x)")
  print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
  main()
