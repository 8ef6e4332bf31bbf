"""Builds from annotations against class-folder builds of the same photos, and the detection
pipeline against the classification one (issue 48's cost goals: ≤ 1.1x and ≤ 1.3x).

    python benchmarks/annotated_build.py [--images 800] [--rounds 3] [--work /tmp/annotated_bench]

The photos are real-photo crops (imagesets_testing.photo_crops, 500x333 JPEGs), written once
as class folders and once flat with a COCO file of 1-6 random boxes each. Each round builds
both (`imagesets build` as the command line runs it: versioned, record index, duplicates and
page), alternating which goes first; CPU is this process's and its workers' (rusage of
children), so a busy machine moves the ratios little. Then each pipeline's CPU per image:
`classification_train` on the class-folder build, `detection_train` on the COCO build (224
px, batch 32), alternating too. Ratios are of medians, all measured in one run.
"""

import argparse
import json
import pathlib
import resource
import shutil
import statistics
import time

import numpy as np

from imagesets.annotated import annotated_build
from imagesets.building import annotated_builder
from imagesets.building import class_folders_builder
from imagesets.class_folders import named_build
from imagesets.reading import input_pipeline
from imagesets_testing import photo_crops

CLASSES = ("bolt", "gear", "nut", "spring", "washer")


def make_photos(work: pathlib.Path, count: int) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
  """(class-folder root, flat images folder, COCO file), made once per count."""
  tree, flat, coco = work / "tree", work / "flat", work / "instances.json"
  marker = work / f".complete-{count}"
  if marker.exists():
    return tree, flat, coco
  shutil.rmtree(work, ignore_errors=True)
  rng = np.random.default_rng(0)
  images, annotations = [], []
  for i, (picture, data) in enumerate(photo_crops.jpegs(count, seed=1)):
    name = f"{i:05d}.jpg"
    (tree / CLASSES[i % len(CLASSES)]).mkdir(parents=True, exist_ok=True)
    (tree / CLASSES[i % len(CLASSES)] / name).write_bytes(data)
    flat.mkdir(parents=True, exist_ok=True)
    (flat / name).write_bytes(data)
    height, width = picture.pixels.shape[:2]
    images.append({"id": i, "file_name": name, "width": width, "height": height})
    for _ in range(int(rng.integers(1, 7))):
      w, h = rng.uniform(10, width / 2), rng.uniform(10, height / 2)
      x, y = rng.uniform(0, width - w), rng.uniform(0, height - h)
      annotations.append({"id": len(annotations), "image_id": i, "bbox": [x, y, w, h],
                          "category_id": int(rng.integers(1, len(CLASSES) + 1)),
                          "area": w * h, "iscrowd": 0})
  coco.write_text(json.dumps({"images": images, "annotations": annotations, "categories": [
      {"id": k + 1, "name": name} for k, name in enumerate(CLASSES)]}))
  marker.touch()
  return tree, flat, coco


def _cpu() -> float:
  own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                        resource.RUSAGE_CHILDREN))
  return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(build) -> tuple[float, float]:
  """(wall s, CPU s) of one build."""
  cpu, started = _cpu(), time.perf_counter()
  build()
  return time.perf_counter() - started, _cpu() - cpu


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--images", type=int, default=800)
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--batches", type=int, default=15)
  parser.add_argument("--work", default="/tmp/annotated_bench")
  args = parser.parse_args()
  work = pathlib.Path(args.work)
  tree, flat, coco = make_photos(work, args.images)
  data_dir = work / "tfds"
  splits = {"train": 0.8, "test": 0.2}

  def folders():
    shutil.rmtree(data_dir / "tree_build", ignore_errors=True)
    named_build.build(tree, "tree_build", data_dir=data_dir, check_registered=False,
                      versioned=True, log=lambda line: None,
                      options=class_folders_builder.ClassFoldersConfig(
                          name="tree_build", split_proportions=splits))

  def annotated():
    shutil.rmtree(data_dir / "coco_build", ignore_errors=True)
    annotated_build.build(flat, coco, "coco_build", data_dir=data_dir, check_registered=False,
                          log=lambda line: None, options=annotated_builder.AnnotatedConfig(
                              name="coco_build", split_proportions=splits))

  runs = {"class folders": [], "COCO": []}
  for round_ in range(args.rounds):
    order = [("class folders", folders), ("COCO", annotated)]
    for name, build in (order if round_ % 2 == 0 else order[::-1]):
      runs[name].append(timed(build))
  print(f"build of {args.images} photos, median of {args.rounds} (wall s, CPU s):")
  medians = {name: tuple(statistics.median(v[i] for v in values) for i in (0, 1))
             for name, values in runs.items()}
  for name, (wall, cpu) in medians.items():
    print(f"  {name:14s} wall {wall:6.2f} s  CPU {cpu:6.2f} s")
  print(f"  COCO / class folders: wall {medians['COCO'][0] / medians['class folders'][0]:.2f}x"
        f", CPU {medians['COCO'][1] / medians['class folders'][1]:.2f}x")

  pipelines = {
      "classification": lambda: input_pipeline.classification_train(
          "tree_build", data_dir=str(data_dir), batch_size=32, seed=0, split="train"),
      "detection": lambda: input_pipeline.detection_train(
          "coco_build", data_dir=str(data_dir), batch_size=32, seed=0),
  }
  per_image = {name: [] for name in pipelines}
  for round_ in range(args.rounds):
    names = list(pipelines) if round_ % 2 == 0 else list(pipelines)[::-1]
    for name in names:
      per_image[name].append(_measure(pipelines[name](), args.batches))
  print(f"training pipeline CPU ms per image (224 px, batch 32, {args.batches} batches after "
        "5 of warm-up), median:")
  cpu = {name: statistics.median(values) for name, values in per_image.items()}
  for name, value in cpu.items():
    print(f"  {name:14s} {value:6.2f} ms")
  print(f"  detection / classification: {cpu['detection'] / cpu['classification']:.2f}x")


def _measure(ds, batches: int, warmup: int = 5) -> float:
  """CPU ms per image of `batches` batches after `warmup` (this process, all threads)."""
  iterator = iter(ds)
  for _ in range(warmup):
    next(iterator)
  count, cpu = 0, time.process_time()
  for _ in range(batches):
    batch = next(iterator)
    count += int((batch["images"] if "images" in batch else batch["image"]).shape[0])
  return 1000 * (time.process_time() - cpu) / count


if __name__ == "__main__":
  main()
