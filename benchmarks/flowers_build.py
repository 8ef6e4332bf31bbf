"""Build speed and peak memory of the flowers builder against a seed-style build.

    python benchmarks/flowers_build.py [--images 3000] [--small 1500] [--work /tmp/flowers_bench]

Makes a class-per-folder tree of photo-like JPEGs (500x375, imagesets.sample_images: smooth
colour fields, soft shapes and grain, so they compress like photos, not like noise), then builds it twice, each
in a fresh process so peak memory is its own:

* seed-style: the old converters' way -- read each file, decode it with TensorFlow to learn
  its shape, write the Example (same TFDS writer, splits and features as ours);
* flowers: our builder (header read + 1/8-scale draft decode, both cores).

Prints img/s of both, their ratio (goal >= 2.3x) and peak RSS at `--images` and `--small`
images (goal: flat).
"""

import argparse
import json
import os
import pathlib
import resource
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


def _seed_style_builder():
  """The seed-style build, as a builder sharing everything but the per-image work."""
  import tensorflow as tf
  from imagesets import class_folders
  from imagesets.flowers import flowers_dataset_builder as flowers

  class SeedStyle(flowers.Builder):
    @classmethod
    def _get_pkg_dir_path(cls):  # read the README etc. of the real builder
      return flowers.Builder._get_pkg_dir_path()

    def _generate_examples(self, relative_paths):
      for relative_path in relative_paths:
        data = class_folders.read(self._root, relative_path)
        shape = tf.io.decode_image(data).shape  # decode everything just to learn the size
        yield relative_path, {
            "image": data, "label": relative_path.split("/", 1)[0],
            "file_name": relative_path, "height": shape[0], "width": shape[1],
            "channels": shape[2], "format": "jpeg"}

  return SeedStyle


def build_once(kind: str, root: str, data_dir: str) -> dict:
  """Runs in a child process: one build, its time and peak memory."""
  import imagesets  # noqa: F401
  from imagesets.flowers import flowers_dataset_builder as flowers
  cls = _seed_style_builder() if kind == "seed" else flowers.Builder
  config = flowers.FlowersConfig(name="bench", root=root)
  builder = cls(config=config, data_dir=data_dir)
  started = time.perf_counter()
  builder.download_and_prepare()
  seconds = time.perf_counter() - started
  examples = sum(split.num_examples for split in builder.info.splits.values())
  shards = sum(p.stat().st_size for p in pathlib.Path(builder.data_dir).glob("*.tfrecord-*"))
  return {
      "seconds": seconds, "examples": examples, "shard_bytes": shards,
      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
      "worker_peak_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
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
  parser.add_argument("--work", default="/tmp/flowers_bench")
  parser.add_argument("--child", choices=["seed", "flowers"])
  parser.add_argument("--root")
  args = parser.parse_args()
  if args.child:
    print(json.dumps(build_once(args.child, args.root, args.work)))
    return
  work = pathlib.Path(args.work)
  print(f"load average before: {os.getloadavg()}, cores: {os.cpu_count()}")
  results = {}
  for count in (args.images, args.small):
    root = work / f"photos_{count}"
    source_bytes = make_tree(root, count)
    print(f"{count} photos, {source_bytes / count / 1024:.1f} KiB each on average")
    for kind in (("seed", "flowers") if count == args.images else ("flowers",)):
      results[kind, count] = result = run_child(kind, root, work / f"tfds_{kind}_{count}")
      assert result["examples"] == count, result
      print(f"  {kind:8s} {count / result['seconds']:8,.0f} img/s  ({result['seconds']:.2f} s)"
            f"  peak RSS {result['peak_rss_mib']:,.0f} MiB (workers {result['worker_peak_rss_mib']:,.0f})"
            f"  shards/source bytes {result['shard_bytes'] / source_bytes:.4f}")
  seed, ours = results["seed", args.images], results["flowers", args.images]
  print(f"speed-up over seed-style: {seed['seconds'] / ours['seconds']:.2f}x (goal >= 2.3x)")
  small = results["flowers", args.small]
  print(f"peak RSS flowers: {small['peak_rss_mib']:,.0f} MiB at {args.small} images, "
        f"{ours['peak_rss_mib']:,.0f} MiB at {args.images} images")
  print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
  main()
