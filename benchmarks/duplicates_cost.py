"""What duplicate detection costs: a build with and without it, and the grouping at scale.

    python benchmarks/duplicates_cost.py [--images 3000] [--work /tmp/duplicates_bench]
                                         [--repeats 3] [--grouping 60000,240000]

1. Builds the 3,000-photo benchmark tree (benchmarks/flowers_build.make_tree: 500x375
   photo-like JPEGs) with `leakage="off"` (no fingerprints) and `"warn"` (the default:
   every image decoded and hashed in the workers, grouped, report and card written), each
   build in a fresh process, interleaved `--repeats` times; medians of the build's wall time
   (after TensorFlow started), of the whole process's wall time (what `imagesets build` takes)
   and of the CPU time of the build and its workers.
2. Groups N synthesised fingerprints (random 128-bit hashes, 1 % of them planted copies
   8-20 bits from an original; the grouping sees only hashes, so these stand in for the
   decoded images) for each N of `--grouping`: wall time, and peak Python memory
   (tracemalloc, in a second run: it slows allocations), to show how it scales.
"""

import argparse
import json
import pathlib
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
import tracemalloc

import child_runs
import flowers_build


def child_build(tree: str, work: str, leakage: str) -> dict:
  from imagesets.building import class_folders_builder
  from imagesets.class_folders import named_build

  data_dir = pathlib.Path(work) / f"data_{leakage}"
  shutil.rmtree(data_dir, ignore_errors=True)
  options = class_folders_builder.ClassFoldersConfig(name="bench", leakage=leakage)
  before = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
  start = time.perf_counter()
  named_build.build(tree, "bench", data_dir=str(data_dir), options=options)
  wall = time.perf_counter() - start
  after = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
  cpu = sum(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime for a, b in zip(after, before))
  return {"build_s": wall, "cpu_s": cpu}


def grouping(count: int) -> dict:
  from imagesets.verifying import duplicates
  from imagesets.verifying import image_hashes

  rng = random.Random(count)
  hashes = [rng.getrandbits(image_hashes.HASH_BITS) for _ in range(count - count // 100)]
  for index in range(count // 100):
    copy = hashes[index * 50]
    for bit in rng.sample(range(image_hashes.HASH_BITS), rng.randint(8, 20)):
      copy ^= 1 << bit
    hashes.append(copy)
  fingerprints = [image_hashes.Fingerprint(f"{rng.getrandbits(128):032x}", h, 375, 500, "jpeg")
                  for h in hashes]
  members = [duplicates.Member("train", f"{i}.jpg", "a") for i in range(count)]
  start = time.perf_counter()  # (timed without tracemalloc, which slows every allocation)
  groups = duplicates.find(members, fingerprints)
  seconds = time.perf_counter() - start
  tracemalloc.start()
  duplicates.find(members, fingerprints)
  peak = tracemalloc.get_traced_memory()[1]
  tracemalloc.stop()
  return {"images": count, "seconds": seconds, "peak_mib": peak / 2**20,
          "groups": len(groups), "planted": count // 100}


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--images", type=int, default=3000)
  parser.add_argument("--work", default="/tmp/duplicates_bench")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--grouping", default="60000,240000")
  parser.add_argument("--child", nargs="*")
  args = parser.parse_args()
  if args.child is not None:
    print(json.dumps(child_build(*args.child)))
    return
  work = pathlib.Path(args.work)
  tree = work / f"tree_{args.images}"
  flowers_build.make_tree(tree, args.images)
  runs = {"off": [], "warn": []}
  for _ in range(args.repeats):
    for leakage in runs:
      start = time.perf_counter()
      result = child_runs.run(__file__, tree, work, leakage)
      result["process_s"] = time.perf_counter() - start
      runs[leakage].append(result)
  print(f"{args.images} photos, median of {args.repeats} interleaved runs:")
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
    print(f"{what}: warn / off = {medians['warn'][key] / medians['off'][key]:.2f}")
  print("\n| images (synthesised hashes) | grouping s | peak MiB | groups found / planted |")
  print("|---:|---:|---:|---:|")
  for count in map(int, args.grouping.split(",")):
    g = grouping(count)
    print(f"| {g['images']:,} | {g['seconds']:.2f} | {g['peak_mib']:.0f} | "
          f"{g['groups']} / {g['planted']} |")


if __name__ == "__main__":
  sys.path.insert(0, str(pathlib.Path(__file__).parent))
  main()
