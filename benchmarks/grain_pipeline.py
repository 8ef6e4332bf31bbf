"""Grain's training pipeline against our tf.data one, on the same ArrayRecord build.

    python benchmarks/grain_pipeline.py [--photos 2000] [--epochs 1] [--work /tmp/grain_bench]

Builds `--photos` photo-like 500x375 JPEGs (the tree of benchmarks/from_directory.py) with
class_folders as ArrayRecord, then runs in fresh processes, one after the other,
repeated `--repeats` times (medians): `input_pipeline.classification_train` (tf.data) and
`grain_pipeline.classification_train` with 0 and 2 worker processes; 224x224 crops,
batch 64, seed 0, `--epochs` epochs. Reported: wall seconds, images/s and CPU ms per image
(user + system of the process and its workers), and Grain's CPU per image over tf.data's.
"""

import argparse
import json
import pathlib
import resource
import statistics
import time

import child_runs
import from_directory

RUNS = ["tf.data", "grain, 0 workers", "grain, 2 workers"]


def one_run(which: str, data_dir: str, epochs: int) -> dict:
  import imagesets  # noqa: F401
  from imagesets.reading import grain_pipeline
  from imagesets.reading import input_pipeline
  import tensorflow as tf
  tf.constant(0)
  usage = lambda who: resource.getrusage(who)  # noqa: E731
  cpu = lambda: sum(u.ru_utime + u.ru_stime for u in (usage(resource.RUSAGE_SELF),  # noqa: E731
                                                      usage(resource.RUSAGE_CHILDREN)))
  kwargs = dict(data_dir=data_dir, batch_size=64, image_size=224, seed=0, split="train",
                num_epochs=epochs)
  before, started = cpu(), time.perf_counter()
  if which == "tf.data":
    batches = input_pipeline.classification_train("class_folders/bench", **kwargs)
  else:
    batches = grain_pipeline.classification_train(
        "class_folders/bench", worker_count=int(which.split()[1]), **kwargs)
  images = sum(int(batch["image"].shape[0]) for batch in batches)
  return {"images": images, "wall": time.perf_counter() - started, "cpu": cpu() - before}


def build(root: pathlib.Path, data_dir: pathlib.Path) -> None:
  import imagesets  # noqa: F401
  from imagesets.class_folders import class_folders_dataset_builder as class_folders
  config = class_folders.ClassFoldersConfig(name="bench", root=str(root),
                                                split_proportions={"train": 1.0})
  class_folders.Builder(config=config, data_dir=data_dir,
                          file_format="array_record").download_and_prepare()


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--photos", type=int, default=2000)
  parser.add_argument("--epochs", type=int, default=1)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--work", default="/tmp/grain_bench")
  parser.add_argument("--child", nargs=3, metavar=("RUN", "DATA_DIR", "EPOCHS"))
  args = parser.parse_args()
  if args.child:
    which, data_dir, epochs = args.child
    print(json.dumps(one_run(which, data_dir, int(epochs))))
    return
  work = pathlib.Path(args.work)
  data_dir = work / f"tfds_{args.photos}"
  if not (data_dir / "class_folders").exists():
    build(from_directory.tree(work, "photos", args.photos), data_dir)
  runs = {which: [] for which in RUNS}
  for _ in range(args.repeats):
    for which in RUNS:
      runs[which].append(child_runs.run(__file__, which, data_dir, args.epochs))
  cpu = {}
  print("| pipeline | wall s | img/s | CPU ms / image |\n|---|---|---|---|")
  for which, results in runs.items():
    count = results[0]["images"]
    wall = statistics.median(r["wall"] for r in results)
    cpu[which] = statistics.median(r["cpu"] for r in results) / count
    print(f"| {which} | {wall:.2f} | {count / wall:,.0f} | {1000 * cpu[which]:.2f} |")
  for which in RUNS[1:]:
    print(f"{which}: {cpu[which] / cpu['tf.data']:.2f}x tf.data's CPU per image (goal <= 1.3)")


if __name__ == "__main__":
  main()
