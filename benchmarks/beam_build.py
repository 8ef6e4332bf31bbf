"""Per-worker throughput of flowers generation: the per-image work alone, a local build,
and a Beam DirectRunner build (2 workers, multi-processing) of the same photos.

    python benchmarks/beam_build.py [--images 2000] [--work /tmp/beam_bench]

The first figure is what one Beam worker core does in its map stage; docs/scaling.md turns
it into wall time and worker-hours for ImageNet-scale trees.
"""

import argparse
import os
import pathlib
import resource
import shutil
import time

from apache_beam.options.pipeline_options import PipelineOptions
from flowers_build import make_tree
import tensorflow_datasets as tfds

import imagesets  # noqa: F401
from imagesets.building import class_folders_examples
from imagesets.class_folders import class_folders_dataset_builder as class_folders


def per_image_work(root: pathlib.Path) -> tuple[float, float]:
  """(images/s, CPU ms per image) of `process_file` on one process, no writer."""
  paths = sorted(str(p.relative_to(root)) for p in root.glob("*/*.jpg"))
  cpu, started = time.process_time(), time.perf_counter()
  for path in paths:
    class_folders_examples.process_file(class_folders_examples.work_item(str(root), path))
  wall, cpu = time.perf_counter() - started, time.process_time() - cpu
  return len(paths) / wall, 1000 * cpu / len(paths)


def build(root: pathlib.Path, data_dir: pathlib.Path, beam: bool) -> float:
  """Seconds for one full build into a fresh data_dir."""
  shutil.rmtree(data_dir, ignore_errors=True)
  download_config = None
  if beam:
    download_config = tfds.download.DownloadConfig(beam_options=PipelineOptions(
        ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]))
  builder = class_folders.Builder(config=class_folders.ClassFoldersConfig(name="bench", root=str(root)),
                            data_dir=data_dir)
  started = time.perf_counter()
  builder.download_and_prepare(download_config=download_config)
  return time.perf_counter() - started


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--images", type=int, default=2000)
  parser.add_argument("--work", default="/tmp/beam_bench")
  args = parser.parse_args()
  work = pathlib.Path(args.work)
  root = work / "photos"
  source = make_tree(root, args.images)
  print(f"load average before: {os.getloadavg()}; {args.images} photos of 500x375, "
        f"{source / args.images / 1024:.1f} KiB each")
  rate, cpu_ms = per_image_work(root)
  print(f"per-image work, 1 process:     {rate:7,.0f} img/s ({cpu_ms:.2f} ms CPU per image)")
  local = build(root, work / "local", beam=False)
  print(f"local build, 2 cores:          {args.images / local:7,.0f} img/s ({local:.1f} s)")
  beam = build(root, work / "beam", beam=True)
  print(f"Beam DirectRunner, 2 workers:  {args.images / beam:7,.0f} img/s ({beam:.1f} s, "
        f"{args.images / beam / 2:,.0f} img/s per worker)")
  print(f"load average after: {os.getloadavg()}; peak RSS of this process "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB")


if __name__ == "__main__":
  main()
