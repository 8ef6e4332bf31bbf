"""Duplicates grouped on Beam's workers (`beam_duplicates.Groups`) against one process
(`duplicates.find`): the same groups, and what each stage does per image.

    python benchmarks/beam_grouping.py [--images 20000] [--source crops|build]
                                       [--work /tmp/beam_grouping] [--workers 2]
                                       [--mode multi_processing|multi_threading|in_memory]

`--source crops`: N fingerprints of real-photo crops and augmentations (the ones
benchmarks/duplicates_cost.py groups, cached under its --work); `--source build` with
`--fingerprints F`: a pickle of (members, fingerprints), e.g. a built version's. The
images are written as JSON lines in 16 files; the pipeline reads them, groups them and
writes every group as a line (DirectRunner, `--workers` processes or threads, `--mode`). Then
the groups read back are compared with `duplicates.find` over the same images in this
process. Printed: wall times, per-image counters (bucket entries, picks, kept pairs,
thumbnail checks), the largest bucket, each component round's changes, and the peak
memory of this process (the driver) and of the workers.
"""

import argparse
import json
import pathlib
import pickle
import resource
import shutil
import sys
import time


def _member_line(image) -> str:
  member, fingerprint = image
  return json.dumps([member.split, member.file_name, member.label, fingerprint.to_json()])


def _image(line: str):
  from imagesets.analysis import duplicates
  from imagesets.analysis import image_hashes

  split, file_name, label, fingerprint = json.loads(line)
  return (duplicates.Member(split, file_name, label),
          image_hashes.Fingerprint.from_json(fingerprint))


def _group_line(group) -> str:
  return json.dumps(group.to_json())


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--images", type=int, default=20000)
  parser.add_argument("--source", default="crops", choices=["crops", "build"])
  parser.add_argument("--fingerprints", default="")
  parser.add_argument("--work", default="/tmp/beam_grouping")
  parser.add_argument("--workers", type=int, default=2)
  parser.add_argument("--mode", default="multi_processing",
                      choices=["multi_processing", "multi_threading", "in_memory"])
  args = parser.parse_args()

  import apache_beam as beam
  from apache_beam.options import pipeline_options

  import duplicates_cost
  from imagesets.analysis import beam_components
  from imagesets.analysis import beam_duplicates
  from imagesets.analysis import duplicates

  work = pathlib.Path(args.work)
  if args.source == "crops":
    fingerprints = duplicates_cost.crop_fingerprints(args.images, pathlib.Path(
        "/tmp/duplicates_bench"))
    members = [duplicates.Member(("train", "train", "validation", "test")[i % 4],
                                 f"{i:07d}.jpg", f"class_{i % 7}")
               for i in range(len(fingerprints))]
  else:
    members, fingerprints = pickle.loads(pathlib.Path(args.fingerprints).read_bytes())
    members, fingerprints = members[:args.images], fingerprints[:args.images]
  images = list(zip(members, fingerprints))
  inputs, outputs = work / "images", work / "groups"
  shutil.rmtree(work, ignore_errors=True)
  inputs.mkdir(parents=True)
  for part in range(16):
    (inputs / f"part-{part:02d}.jsonl").write_text(
        "".join(_member_line(image) + "\n" for image in images[part::16]))
  del images

  options = pipeline_options.PipelineOptions(
      direct_num_workers=args.workers, direct_running_mode=args.mode)
  pipeline = beam.Pipeline(options=options)
  groups = beam_duplicates.Groups()
  _ = (pipeline
       | beam.io.ReadFromText(str(inputs / "part-*.jsonl"))
       | beam.Map(_image)
       | groups
       | beam.Map(_group_line)
       | beam.io.WriteToText(str(outputs / "groups"), file_name_suffix=".jsonl"))
  start = time.perf_counter()
  result = pipeline.run()
  result.wait_until_finish()
  beam_s = time.perf_counter() - start
  try:
    counters, refused = groups.check(result), None
  except beam_components.NotConverged as error:  # (still compared: what was lost shows)
    refused = str(error)
    counters = groups.counters(result)
  driver_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  workers_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024

  found = [json.loads(line) for path in sorted(outputs.glob("groups*.jsonl"))
           for line in path.read_text().splitlines()]
  start = time.perf_counter()
  local = duplicates.find(members, fingerprints)
  local_s = time.perf_counter() - start
  key = lambda group: (duplicates.split_rank(group["members"][0]["split"]),
                       group["members"][0]["file_name"])
  same = sorted(found, key=key) == [group.to_json() for group in local]

  pictures = len({f.pixels for f in fingerprints})
  rounds = sorted((int(name.rsplit("_", 1)[1]), name.split("_")[1], value)
                  for name, value in counters.items() if name.startswith("changed_"))
  changes = {}
  for number, step, value in rounds:
    changes.setdefault(number, {})[step] = value
  print(json.dumps({"refused": refused, "mode": args.mode, "images": len(members), "pictures": pictures, "workers": args.workers,
                    "beam_s": round(beam_s, 1), "find_s": round(local_s, 2),
                    "same_groups": same, "groups": len(local),
                    "per_picture": {name: round(counters[name] / pictures, 2)
                                    for name in ("bucket_entries", "picks", "picks_arrived",
                                                 "kept_pairs", "checks")},
                    "largest_bucket": counters.get("bucket_size_max"),
                    "astray_pairs": counters.get("astray_pairs", 0),
                    "changes_per_round": [changes[n].get("large", 0) + changes[n].get("small", 0)
                                          for n in sorted(changes)],
                    "driver_peak_mib": round(driver_mib), "workers_peak_mib": round(workers_mib)},
                   indent=1))


if __name__ == "__main__":
  sys.path.insert(0, str(pathlib.Path(__file__).parent))
  main()
