"""What a Beam build's grouping shuffles per image, and a projection to 10 M and 100 M images.

    python benchmarks/beam_projection.py [--images 2000] [--picks 226.8] [--pairs 27]
        [--kept 13.2] [--rounds 6] [--cpu-ms 13.6] [--usd-per-shuffle-gb 0.011]
        [--usd-per-vcpu-hour 0.056]

Each shuffle's elements are made by `beam_duplicates`' own functions from the fingerprints
of `--images` real-photo crops (benchmarks/duplicates_cost.py's) and encoded with the coder
Beam gives them (`FastPrimitivesCoder`, what these PCollections of tuples get); each
is counted per picture as measured on the DirectRunner (defaults: the 100,000 crops of
docs/scaling.md: 226.8 picks, 12.7-13.2 kept pairs, about 27 distinct picked pairs, 5-6
component rounds). Printed: bytes per image per shuffle, their sum, the CPU a worker spends
placing a picture in its 64 bands (`_band_entries`, ms of process time), and at 10 M and 100 M
images the bytes shuffled and, at the prices given (Dataflow's batch shuffle per GB
processed and a vCPU hour, list prices to check on the day), what the shuffle and the CPU
cost. `--cpu-ms`: CPU per image of the grouping; the default is the DirectRunner's (136 s
on 2 cores for 20,000 images, the image work included): an upper bound, the local
runner's per-element overhead included.
"""

import argparse
import collections
import json
import pathlib
import sys
import time


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--images", type=int, default=2000)
  parser.add_argument("--picks", type=float, default=226.8)
  parser.add_argument("--pairs", type=float, default=27.0)
  parser.add_argument("--kept", type=float, default=13.2)
  parser.add_argument("--rounds", type=int, default=6)
  parser.add_argument("--cpu-ms", type=float, default=13.6)
  parser.add_argument("--usd-per-shuffle-gb", type=float, default=0.011)
  parser.add_argument("--usd-per-vcpu-hour", type=float, default=0.056)
  args = parser.parse_args()

  from apache_beam import coders

  import duplicates_cost
  from imagesets.analysis import beam_duplicates
  from imagesets.analysis import duplicates

  fingerprints = duplicates_cost.crop_fingerprints(args.images,
                                                   pathlib.Path("/tmp/duplicates_bench"))
  members = [duplicates.Member(("train", "train", "validation", "test")[i % 4],
                               f"class_{i % 7}/{i:07d}.jpg", f"class_{i % 7}")
             for i in range(len(fingerprints))]
  coder = coders.FastPrimitivesCoder()
  size = lambda element: len(coder.encode(element))
  mean = lambda values: sum(values) / len(values)

  keyed = [beam_duplicates._keyed(image) for image in zip(members, fingerprints)]
  sets = [beam_duplicates._exact_set((key, [value])) for key, value in keyed]
  started = time.process_time()  # (a worker's placing of each picture in its 64 bands)
  for picture_set in sets:
    collections.deque(beam_duplicates._band_entries(picture_set), maxlen=0)
  band_entries_ms = (time.process_time() - started) * 1000 / len(sets)
  entries = [list(beam_duplicates._band_entries(picture_set)) for picture_set in sets[:200]]
  ids = [picture for picture, _ in sets]
  pick = ((ids[0], ids[1]), 17)
  thumbnail = fingerprints[0].thumbnail
  per_image = {  # shuffle -> bytes a picture
      "exact sets (fingerprint by pixels)": mean([size(element) for element in keyed]),
      "band entries (64 a picture)": mean([sum(map(size, bands)) for bands in entries]),
      "picks, by pair": args.picks * size(pick),
      "pairs of a picture (both ends)": 2 * args.pairs * size((ids[0], (ids[1], 3, 17))),
      "keeps of a pair": args.pairs * size(pick),
      "checks: first join": args.kept * size((ids[0], (ids[1], ids[0], 17))) + size(
          (ids[0], thumbnail)),
      "checks: second join (one thumbnail a pair)": args.kept * size(
          (ids[1], (ids[0], thumbnail, 17))) + size((ids[1], thumbnail)),
      # (a step shuffles its links both ways and the step before's links, each tagged)
      "components (2 steps a round)": args.rounds * 2 * 3 * args.kept * size(
          (ids[0], (0, ids[1]))),
      "groups (sets and pairs by component)": size((ids[0], ("set", sets[0][1]))) + args.kept
      * size((ids[0], ("pair", (ids[0], ids[1], 17)))),
  }
  total = sum(per_image.values())
  projection = {}
  for images in (10_000_000, 100_000_000):
    gigabytes = total * images / 1e9
    cpu_hours = args.cpu_ms * images / 1000 / 3600
    projection[f"{images:,}"] = {
        "shuffled_gb": round(gigabytes), "shuffle_usd": round(gigabytes * args.usd_per_shuffle_gb),
        "vcpu_hours": round(cpu_hours), "cpu_usd": round(cpu_hours * args.usd_per_vcpu_hour),
        "hours_on_100_vcpus": round(cpu_hours / 100, 1)}
  print(json.dumps({"bytes_per_image": {name: round(value) for name, value in per_image.items()},
                    "total_bytes_per_image": round(total),
                    "band_entries_cpu_ms_per_image": round(band_entries_ms, 3),
                    "projection": projection,
                    "assumed": vars(args)}, indent=1))


if __name__ == "__main__":
  sys.path.insert(0, str(pathlib.Path(__file__).parent))
  main()
