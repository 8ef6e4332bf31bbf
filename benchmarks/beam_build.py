"""One tree built on Beam's local runner and locally: the same duplicates.json, quality.json
and card, byte for byte, and what each build cost.

    python benchmarks/beam_build.py [--images 20000] [--work /tmp/beam_build] [--workers 2]
                                    [--leakage warn|drop] [--new 0.01]

A tree of `--images` real-photo crops (500x333 JPEGs with bursts of near copies, the tree
benchmarks/incremental_version.py builds) built twice, each in a fresh process, the way
`imagesets build` builds it (`named_build.build`): locally, and on the DirectRunner with
`--workers` worker processes (multi-processing), where the workers group the images, find
the quality findings and count the card (`beam_report`). Printed: whether the three files
are the same bytes, the groups and findings, each build's wall time and peak memory (the
driver's and, on Beam, its worker processes'), and the grouping's counters per picture.

`--new F`: a version built on another on Beam instead. The tree is built locally as
bench:1.0.0 (`imagesets build`), F of its count more crops (another seed) are added, and
bench:1.1.0 is built on 1.0.0 on Beam (`--workers` processes) and, to compare, locally in
full, and on Beam in full: the same three files and records, the images the Beam workers
fingerprinted (the "fingerprinted" counter), and each build's cost.
"""

import argparse
import json
import pathlib
import resource
import shutil
import sys
import time

import child_runs
import incremental_version

NAME = "bench"
FILES = ("duplicates.json", "quality.json", "README.md")


def child_build(tree: str, data_dir: str, workers: str, leakage: str, version: str = "",
                built_on: str = "") -> dict:
  """One build in this process; `version`: as `imagesets build` builds it (a line of
  versions), on the latest below it when `built_on` is "latest", else in full."""
  from imagesets.building import class_folders_builder
  from imagesets.class_folders import named_build

  beam_options = None
  if workers != "0":
    from apache_beam.options import pipeline_options
    beam_options = pipeline_options.PipelineOptions(
        direct_num_workers=int(workers), direct_running_mode="multi_processing")
  start = time.perf_counter()
  line = {"version": version, "versioned": True, "from_version": (
      named_build.LATEST if built_on == "latest" else named_build.FULL)} if version else {}
  builder = named_build.build(tree, NAME, data_dir=data_dir, beam_options=beam_options,
                              log=lambda line: print(line, file=sys.stderr), progress=None,
                              options=class_folders_builder.ClassFoldersConfig(
                                  name=NAME, leakage=leakage), **line)
  return {"build_s": round(time.perf_counter() - start, 1),
          "driver_peak_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
          "workers_peak_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024),
          "counters": dict(builder.generation.beam_counters)}


def _records(version: pathlib.Path) -> dict[str, list[bytes]]:
  """{split: its serialized records, sorted} (Beam picks its own number of shards)."""
  import tensorflow as tf
  splits = {}
  for shard in sorted(version.glob("*.tfrecord-*")):
    split = shard.name.split("-")[1].split(".")[0]
    splits.setdefault(split, []).extend(r.numpy() for r in tf.data.TFRecordDataset(str(shard)))
  return {split: sorted(records) for split, records in splits.items()}


def _per_round(counters: dict) -> list[int]:
  """Links each components round changed (its large-star and small-star steps)."""
  rounds = {}
  for name, value in counters.items():
    if name.startswith("changed_"):
      number = int(name.rsplit("_", 1)[1])
      rounds[number] = rounds.get(number, 0) + value
  return [rounds[number] for number in sorted(rounds)]


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--images", type=int, default=20000)
  parser.add_argument("--work", default="/tmp/beam_build")
  parser.add_argument("--workers", type=int, default=2)
  parser.add_argument("--leakage", default="warn", choices=["warn", "drop"])
  parser.add_argument("--new", type=float, default=0.0)
  parser.add_argument("--child", nargs="*")
  args = parser.parse_args()
  if args.child is not None:
    print(json.dumps(child_build(*args.child)))
    return
  work = pathlib.Path(args.work)
  tree = work / "tree"
  if not (work / "tree.done").exists():
    shutil.rmtree(work, ignore_errors=True)
    incremental_version.make_tree(tree, args.images, seed=0, prefix="")
    (work / "tree.done").write_text(str(args.images))
  if args.new:
    on_a_base(args, work, tree)
    return
  runs = {}
  for kind, workers in (("local", 0), ("beam", args.workers)):
    shutil.rmtree(work / kind, ignore_errors=True)
    runs[kind] = child_runs.run(__file__, tree, work / kind, workers, args.leakage)
  folders = {kind: next((work / kind / NAME).glob("*/dataset_info.json")).parent
             for kind in runs}
  same = {name: (folders["local"] / name).read_bytes() == (folders["beam"] / name).read_bytes()
          for name in FILES}
  same["records"] = _records(folders["local"]) == _records(folders["beam"])
  found = json.loads((folders["local"] / "duplicates.json").read_text())
  quality = json.loads((folders["local"] / "quality.json").read_text())
  counters = runs["beam"].pop("counters")
  pictures = counters.get("bucket_entries", 0) / 64 or 1
  runs["local"].pop("counters")
  print(json.dumps({
      "images": args.images, "workers": args.workers, "leakage": args.leakage,
      "same_bytes": same, "groups": len(found["groups"]),
      "cross_split": found["num_cross_split"], "dropped": len(found["dropped"]),
      "findings": len(quality["findings"]), "runs": runs,
      "per_picture": {name: round(counters.get(name, 0) / pictures, 2)
                      for name in ("picks", "picks_arrived", "kept_pairs", "checks")},
      "largest_bucket": counters.get("bucket_size_max"),
      "changes_per_round": _per_round(counters)}, indent=1))


def on_a_base(args, work: pathlib.Path, tree: pathlib.Path) -> None:
  """`--new`: 1.1.0 built on 1.0.0 on Beam against 1.1.0 built locally in full."""
  grown = work / "grown"
  shutil.rmtree(grown, ignore_errors=True)
  shutil.copytree(tree, grown)
  new = round(args.images * args.new)
  incremental_version.make_tree(grown, new, seed=1, prefix="new_")
  base = work / "base"
  shutil.rmtree(base, ignore_errors=True)
  runs = {"base (1.0.0, local)": child_runs.run(__file__, tree, base, 0, args.leakage, "1.0.0")}
  beam, full, full_beam = work / "on_base", work / "full", work / "full_beam"
  for folder in (beam, full, full_beam):
    shutil.rmtree(folder, ignore_errors=True)
  shutil.copytree(base, beam)
  runs["on 1.0.0, beam"] = child_runs.run(__file__, grown, beam, args.workers, args.leakage,
                                          "1.1.0", "latest")
  runs["in full, beam"] = child_runs.run(__file__, grown, full_beam, args.workers,
                                         args.leakage, "1.1.0")
  runs["in full, local"] = child_runs.run(__file__, grown, full, 0, args.leakage, "1.1.0")
  folders = [folder / NAME / "1.1.0" for folder in (beam, full)]
  same = {name: (folders[0] / name).read_bytes() == (folders[1] / name).read_bytes()
          for name in FILES}
  same["records"] = _records(folders[0]) == _records(folders[1])
  found = json.loads((folders[1] / "duplicates.json").read_text())
  counters = runs["on 1.0.0, beam"]["counters"]
  for run in runs.values():
    run["counters"] = {"fingerprinted": run["counters"].get("fingerprinted")}
    run.pop("workers_peak_mib")  # (a forked child's peak counts its parent's pages)
  print(json.dumps({
      "images": args.images, "new": new, "workers": args.workers, "same_bytes": same,
      "groups": len(found["groups"]), "fingerprinted_on_beam": counters.get("fingerprinted"),
      "runs": runs, "changes_per_round": _per_round(counters)}, indent=1))


if __name__ == "__main__":
  sys.path.insert(0, str(pathlib.Path(__file__).parent))
  main()
