"""What duplicate detection costs: a build with and without it, and the grouping at scale.

    python benchmarks/duplicates_cost.py [--images 3000] [--work /tmp/duplicates_bench]
                                         [--repeats 3] [--trees distinct,crops]
                                         [--grouping 100000,1000000]

1. Builds each tree of `--images` photos with `leakage="off"` (no fingerprints, no page),
   `"warn"` (the default: every image fingerprinted in the workers, its quality measured,
   grouped, report, card and page written) and "warn+no page" (the default without its
   page, `report.html`), each build in a fresh process, interleaved `--repeats` times; medians of
   the build's wall time (after TensorFlow started), of the whole process's wall time (what
   `imagesets build` takes) and of the CPU time of the build and its workers. Trees:
   `distinct`, benchmarks/flowers_build.make_tree (500x375 photo-like JPEGs, all distinct);
   `crops`, imagesets_testing.photo_crops (500x333 crops and burst frames of five real
   photos: correlated hashes, thousands of near pairs).
2. Groups N fingerprints of real-photo crops and augmentations for each N of `--grouping`
   (crops of 30-90 % of the 15 real photos, flipped or not, brightness jitter, half of them
   in bursts of 8 frames a pixel apart; fingerprinted from their pixels with the build's
   own functions, cached under --work): wall time, and peak memory of the grouping
   (tracemalloc, in a second run: it slows allocations), to show how it scales.
"""

import argparse
import json
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import time
import tracemalloc

import child_runs
import flowers_build

NO_PAGE = "warn+no page"
VARIANTS = ("off", NO_PAGE, "warn")  # leakage off; the default without its page; the default


def child_build(tree: str, work: str, variant: str) -> dict:
  from imagesets.building import class_folders_builder
  from imagesets.class_folders import named_build

  leakage = variant.split("+")[0]
  if variant == NO_PAGE:  # the build as it is but for its page (report.html)
    class_folders_builder.ClassFoldersBuilder._writes_page = lambda self: False
  data_dir = pathlib.Path(work) / f"data_{variant}"
  shutil.rmtree(data_dir, ignore_errors=True)
  options = class_folders_builder.ClassFoldersConfig(name="bench", leakage=leakage)
  before = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
  start = time.perf_counter()
  named_build.build(tree, "bench", data_dir=str(data_dir), options=options)
  wall = time.perf_counter() - start
  after = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
  cpu = sum(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime for a, b in zip(after, before))
  return {"build_s": wall, "cpu_s": cpu}


def _crop_fingerprints(arguments):
  """(pixel digests, hashes, thumbnails) of `count` crops of real photos, from `seed`."""
  import numpy as np
  import PIL.Image
  from imagesets.analysis import image_hashes
  from imagesets_testing import real_photos

  count, seed = arguments
  rng = np.random.default_rng(seed)
  photos = [PIL.Image.fromarray(p) for p in real_photos.photos().values()]
  digests, hashes, thumbnails = [], [], []
  while len(digests) < count:
    photo = photos[int(rng.integers(len(photos)))]
    scale = rng.uniform(0.3, 0.9)
    w, h = photo.width * scale, photo.height * scale
    x, y = rng.uniform(0, photo.width - w), rng.uniform(0, photo.height - h)
    flip, gain = rng.uniform() < 0.5, rng.uniform(0.9, 1.1)
    for _ in range(8 if rng.uniform() < 0.5 else 1):
      crop = photo.resize((96, 64), PIL.Image.Resampling.BILINEAR, box=(x, y, x + w, y + h))
      pixels = np.clip(np.asarray(crop, np.float32) * gain, 0, 255).astype(np.uint8)
      pixels = pixels[:, ::-1] if flip else pixels
      grey = image_hashes._grey(np.ascontiguousarray(pixels))
      digests.append(image_hashes._digest(pixels))
      hashes.append(image_hashes._hash_of(grey))
      thumbnails.append(image_hashes.small_thumbnail(grey))
      x = float(np.clip(x + rng.uniform(-1, 1), 0, photo.width - w))
      y = float(np.clip(y + rng.uniform(-1, 1), 0, photo.height - h))
  return digests[:count], hashes[:count], thumbnails[:count]


def crop_fingerprints(count: int, work: pathlib.Path) -> list:
  """`count` fingerprints of real-photo crops (made on both cores, cached in `work`)."""
  import multiprocessing
  import pickle
  from imagesets.analysis import image_hashes

  import hashlib
  import inspect
  recipe = hashlib.sha256((inspect.getsource(_crop_fingerprints)
                           + inspect.getsource(image_hashes)).encode()).hexdigest()[:12]
  cache = work / f"crop_fingerprints_{count}_{recipe}.pickle"  # (made again when either changes)
  if not cache.exists():
    parts = 32
    with multiprocessing.get_context("spawn").Pool(2) as pool:
      made = pool.map(_crop_fingerprints, [(-(-count // parts), seed) for seed in range(parts)])
    work.mkdir(parents=True, exist_ok=True)
    cache.write_bytes(pickle.dumps([list(sum((list(m[k]) for m in made), []))[:count]
                                    for k in range(3)]))
  digests, hashes, thumbnails = pickle.loads(cache.read_bytes())
  return [image_hashes.Fingerprint(d, h, 64, 96, "jpeg", t)
          for d, h, t in zip(digests, hashes, thumbnails)]


def grouping(count: int, work: pathlib.Path) -> dict:
  from imagesets.analysis import duplicates

  fingerprints = crop_fingerprints(count, work)
  members = [duplicates.Member("train" if i % 10 else "test", f"{i}.jpg", "a")
             for i in range(count)]
  start = time.perf_counter()  # (timed without tracemalloc, which slows every allocation)
  groups = duplicates.find(members, fingerprints)
  seconds = time.perf_counter() - start
  tracemalloc.start()
  duplicates.find(members, fingerprints)
  peak = tracemalloc.get_traced_memory()[1]
  tracemalloc.stop()
  grouped = sum(len(g.members) for g in groups)
  return {"images": count, "seconds": seconds, "peak_mib": peak / 2**20,
          "groups": len(groups), "grouped": grouped,
          "largest": max((len(g.members) for g in groups), default=0)}


def make_crops_tree(root: pathlib.Path, count: int) -> None:
  """root/<scene>/<i>.jpg: `count` 500x333 crops and burst frames of five real photos."""
  from imagesets_testing import photo_crops

  if root.exists():
    return
  for index, (picture, data) in enumerate(photo_crops.jpegs(count, seed=0, scenes=5)):
    path = root / picture.scene / f"{index:05d}.jpg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--images", type=int, default=3000)
  parser.add_argument("--work", default="/tmp/duplicates_bench")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--trees", default="distinct,crops")
  parser.add_argument("--grouping", default="100000,1000000")
  parser.add_argument("--child", nargs="*")
  args = parser.parse_args()
  if args.child is not None:
    print(json.dumps(child_build(*args.child)))
    return
  work = pathlib.Path(args.work)
  trees = {"distinct": work / f"tree_{args.images}", "crops": work / f"crops_{args.images}"}
  flowers_build.make_tree(trees["distinct"], args.images)
  make_crops_tree(trees["crops"], args.images)
  for name in [t for t in args.trees.split(",") if t]:
    runs = {variant: [] for variant in VARIANTS}
    for _ in range(args.repeats):
      for leakage in runs:
        start = time.perf_counter()
        result = child_runs.run(__file__, trees[name], work, leakage)
        result["process_s"] = time.perf_counter() - start
        runs[leakage].append(result)
    print(f"\n{name}: {args.images} photos, median of {args.repeats} interleaved runs:")
    print("| leakage | build wall s | whole process wall s | CPU s (build + workers) |")
    print("|---|---:|---:|---:|")
    medians = {}
    for leakage, results in runs.items():
      medians[leakage] = {k: statistics.median(r[k] for r in results)
                          for k in ("build_s", "process_s", "cpu_s")}
      m = medians[leakage]
      print(f"| {leakage} | {m['build_s']:.2f} | {m['process_s']:.2f} | {m['cpu_s']:.2f} |")
    for key, what in (("build_s", "build wall"), ("process_s", "whole process wall"),
                      ("cpu_s", "CPU")):
      print(f"{what}: " + ", ".join(f"{v} / off = {medians[v][key] / medians['off'][key]:.2f}"
                                    for v in VARIANTS[1:]))
  print("\n| images (real-photo crops) | grouping s | peak MiB | groups | grouped | largest |")
  print("|---:|---:|---:|---:|---:|---:|")
  for count in [int(c) for c in args.grouping.split(",") if c]:
    g = grouping(count, work)
    print(f"| {g['images']:,} | {g['seconds']:.2f} | {g['peak_mib']:.0f} | {g['groups']:,} | "
          f"{g['grouped']:,} | {g['largest']:,} |", flush=True)


if __name__ == "__main__":
  sys.path.insert(0, str(pathlib.Path(__file__).parent))
  main()
