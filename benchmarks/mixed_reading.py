"""CPU per image of reading a mix of 3 datasets against reading one (goal: <= 1.1x).

    python benchmarks/mixed_reading.py [--images 3000] [--size 320x240] [--rounds 7]
                                       [--measure 6144] [--warmup 4] [--work-dir DIR]
                                       [--file-format tfrecord|array_record] [--grain]

Builds (with `imagesets_testing.photo_datasets`, into a temporary folder, or into
`--work-dir`, where builds are kept and reused) four folder datasets of JPEG crops of
real photos at `--size`: three parts of `--images // 3` photos each, with their own class
names (5 each), and one dataset of all `3 * (--images // 3)` photos (5 classes) for the
one-source baseline. Then, in this one process, times the training pipelines (random
crop fused into JPEG decoding, flip, `--image-size` squares, batch `--batch-size`, seed 0):

* one source      `input_pipeline.classification_train("all", data_dir=...)`
* mix of one      the same dataset as `mixing.mix([Part("all")])` (read by position)
* mix of 3 1:1:1  `mixing.mix([Part(a), Part(b), Part(c)], labels="union")`, weights 1,1,1
* mix of 3 1:2:3  the same with weights 1, 2, 3

and with `--grain` (which builds ArrayRecord) the same four through
`grain_pipeline.classification_train(..., worker_count=0)`.

Each measurement makes a fresh pipeline, takes `--warmup` batches (the shuffle buffer's
fill, autotuning), then counts process CPU time (`time.process_time()`: every thread of
the process) and wall time over `--measure` images. The variants run alternately,
`--rounds` times (the order rotated each round: the machine is shared and noisy), and the
table shows medians; the ratios are medians of each round's ratio (a round's runs share
its conditions), with the range over rounds. Against "one source" a mix saves its
2048-record shuffle buffer and parses records in batches; "mix of one" isolates the cost of
more parts. Defaults take about 2 minutes on 2 cores
(about 5 with --grain).
"""

import argparse
import gc
import os
import pathlib
import shutil
import statistics
import tempfile
import time

import numpy as np

GOAL = 1.1          # mixing 3 sources costs <= 1.1x the CPU per image of reading one
CLASSES = ["cat", "dog", "fox", "owl", "yak"]
PART_NAMES = ["mixbench_a", "mixbench_b", "mixbench_c"]


def build_datasets(data_dir: pathlib.Path, images: int, size, file_format: str):
  """(the all-images dataset, [the three parts]) as "name:1.0.0", built unless present."""
  from imagesets_testing import photo_datasets
  per_part = images // 3
  tag = f"{per_part}_{size[0]}x{size[1]}_{file_format}"
  wanted = [(f"{name}_{tag}", [f"{name[-1]}_{c}" for c in CLASSES], per_part, k + 1)
            for k, name in enumerate(PART_NAMES)]
  wanted.insert(0, (f"mixbench_all_{tag}", CLASSES, 3 * per_part, 0))
  made = []
  for name, classes, count, seed in wanted:
    if not (data_dir / name / "1.0.0" / "dataset_info.json").exists():
      photo_datasets.build(data_dir, name, classes, count, seed=seed, size=size,
                           file_format=file_format)
    made.append(f"{name}:1.0.0")
  return made[0], made[1:]


def variants(all_name, parts, data_dir, args):
  """name -> a function making a fresh iterable of batches."""
  from imagesets.reading import input_pipeline
  from imagesets.reading import mixing
  data_dir = str(data_dir)
  common = dict(batch_size=args.batch_size, image_size=args.image_size)
  mixes = {
      "mix of one": lambda: mixing.mix([mixing.Part(all_name, data_dir)], seed=0),
      "mix of 3 1:1:1": lambda: mixing.mix(
          [mixing.Part(p, data_dir, weight=1) for p in parts], seed=0, labels="union"),
      "mix of 3 1:2:3": lambda: mixing.mix(
          [mixing.Part(p, data_dir, weight=w) for p, w in zip(parts, (1, 2, 3))], seed=0,
          labels="union"),
  }
  out = {"tf.data one source": lambda: input_pipeline.classification_train(
      all_name, data_dir=data_dir, seed=0, **common)}
  for name, make in mixes.items():
    out[f"tf.data {name}"] = (
        lambda make=make: input_pipeline.classification_train(make(), seed=0, **common))
  if args.grain:
    from imagesets.reading import grain_pipeline
    out["grain one source"] = lambda: grain_pipeline.classification_train(
        all_name, data_dir=data_dir, seed=0, worker_count=0, **common)
    for name, make in mixes.items():
      out[f"grain {name}"] = (lambda make=make: grain_pipeline.classification_train(
          make(), worker_count=0, **common))
  return out


def measure(make, warmup: int, count: int) -> dict:
  """CPU s per image, images/s (wall) and each source's count over `count` images."""
  batches = make()
  it = iter(batches)
  for _ in range(warmup):
    next(it)
  cpu, wall, seen, sources = time.process_time(), time.perf_counter(), 0, {}
  while seen < count:
    batch = next(it)
    seen += int(batch["image"].shape[0])
    if "source" in batch:   # (a few microseconds a batch)
      for k, n in enumerate(np.bincount(np.asarray(batch["source"]))):
        sources[k] = sources.get(k, 0) + int(n)
  cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
  del it, batches
  gc.collect()
  return {"cpu": cpu / seen, "rate": seen / wall, "sources": sources}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--images", type=int, default=3000,
                      help="photos in all (the three parts share them)")
  parser.add_argument("--size", default="320x240", help="stored photo size, WxH")
  parser.add_argument("--image-size", type=int, default=224, help="training crop side")
  parser.add_argument("--batch-size", type=int, default=64)
  parser.add_argument("--measure", type=int, default=6144, help="images timed per run")
  parser.add_argument("--warmup", type=int, default=4, help="batches before timing")
  parser.add_argument("--rounds", type=int, default=7)
  parser.add_argument("--file-format", choices=["tfrecord", "array_record"], default=None,
                      help="default tfrecord (array_record with --grain)")
  parser.add_argument("--grain", action="store_true",
                      help="also Grain (worker_count=0); needs array_record")
  parser.add_argument("--work-dir", default=None,
                      help="keep the builds here (WORK/data) and reuse them (default: a "
                           "temporary folder, removed at the end)")
  args = parser.parse_args()
  file_format = args.file_format or ("array_record" if args.grain else "tfrecord")
  if args.grain and file_format != "array_record":
    parser.error("--grain reads one source from an ArrayRecord build: "
                 "use --file-format array_record")
  size = tuple(int(v) for v in args.size.lower().split("x"))

  import imagesets  # noqa: F401  (the package's import hooks)
  import tensorflow as tf
  tf.constant(0)

  work = pathlib.Path(args.work_dir or tempfile.mkdtemp(prefix="mixed_reading_"))
  try:
    data_dir = work / "data"
    started = time.perf_counter()
    all_name, parts = build_datasets(data_dir, args.images, size, file_format)
    print(f"datasets {all_name} and {', '.join(parts)} ({file_format}, {size[0]}x{size[1]} "
          f"JPEG crops) ready in {time.perf_counter() - started:.0f} s", flush=True)

    runs = variants(all_name, parts, data_dir, args)
    names = list(runs)
    measured = {name: [] for name in names}
    load_at_start = os.getloadavg()
    for round_index in range(args.rounds):
      shift = round_index % len(names)
      for name in names[shift:] + names[:shift]:
        got = measure(runs[name], args.warmup, args.measure)
        measured[name].append(got)
        shares = ""
        if len(got["sources"]) > 1:
          total = sum(got["sources"].values())
          shares = "  sources " + ":".join(f"{got['sources'][k] / total:.2f}"
                                           for k in sorted(got["sources"]))
        print(f"  round {round_index + 1}: {name:24s} {got['rate']:7,.0f} img/s "
              f"{1000 * got['cpu']:6.3f} CPU ms/img{shares}", flush=True)

    print(f"\nload average (1, 5, 15 min) at the start: {load_at_start}, at the end: "
          f"{os.getloadavg()}; {os.cpu_count()} cores")
    print(f"{args.image_size}x{args.image_size} crops of {size[0]}x{size[1]} JPEGs, batch "
          f"{args.batch_size}, {args.measure} images per run after {args.warmup} batches, "
          f"median of {args.rounds} rounds\n")
    print("| pipeline | img/s (wall) | CPU ms / image |")
    print("|---|---:|---:|")
    for name in names:
      print(f"| {name} | {statistics.median(g['rate'] for g in measured[name]):,.0f} | "
            f"{1000 * statistics.median(g['cpu'] for g in measured[name]):.3f} |")

    print(f"\n| CPU per image, ratio | median | range over rounds | goal <= {GOAL} |")
    print("|---|---:|---:|---|")
    for library in ("tf.data", "grain"):
      mixes = [n for n in names if n.startswith(f"{library} mix of 3")]
      for mixed in mixes:
        for reference in (f"{library} one source", f"{library} mix of one"):
          ratios = [m["cpu"] / r["cpu"] for m, r in zip(measured[mixed], measured[reference])]
          ratio = statistics.median(ratios)
          verdict = "yes" if ratio <= GOAL else "NO"
          print(f"| {mixed} / {reference} | {ratio:.3f} | {min(ratios):.3f} - "
                f"{max(ratios):.3f} | {verdict} |")
  finally:
    if args.work_dir is None:
      shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
  main()
