"""Could a build on a base group only its new photos? What the grouping's work is made of.

    python benchmarks/grouping_locality.py [--version /tmp/incremental_bench/data/bench/1.0.0]

Reads the fingerprints a build stored in a local version's record index (by default the
20,000 real-photo crops of benchmarks/incremental_version.py) and measures:

1. The pair-local candidate graph: every pair of pictures (exact sets) that share a band's
   bucket, are at most `duplicates.THRESHOLD` bits apart and whose thumbnails' SimHashes
   are not far apart: the pairs a rule without windows or budgets would have to check.
   Its connected components bound what new photos can change: a grouping over each
   component alone could keep every component no new photo touches. Printed: pairs, the
   largest component, the pictures outside singletons.
2. `duplicates.find`'s time, and the share of it spent on thumbnail checks (`_alike`):
   what a grouping that took a base's check answers, instead of checking again, could save
   at most.
"""

import argparse
import collections
import pathlib
import time

import numpy as np

from imagesets.analysis import duplicates
from imagesets.building import incremental


def images_of(version_dir: pathlib.Path):
  base = incremental.load(version_dir)
  members, fingerprints = [], []
  for split, shards in base.splits.items():
    for shard in shards:
      for key, _, fingerprint in shard.records:
        if fingerprint is not None:
          members.append(duplicates.Member(split, key, key.split("/")[0]))
          fingerprints.append(fingerprint)
  return members, fingerprints


def candidate_graph(fingerprints) -> dict:
  """Part 1, over one picture per exact set."""
  start = time.perf_counter()
  by_pixels = {}
  for fingerprint in fingerprints:
    by_pixels.setdefault(fingerprint.pixels, fingerprint)
  pictures = list(by_pixels.values())
  words = duplicates._as_words([f.perceptual for f in pictures])
  thumbnails, _ = duplicates._thumbnail_rows([f.thumbnail for f in pictures])
  keys = duplicates._thumbnail_keys(thumbnails)
  count = len(pictures)
  components = duplicates._Components(count)
  pairs, codes, largest_bucket = 0, [], 0
  for key in duplicates._bucket_keys(words, duplicates._band_positions()):
    order = np.argsort(key, kind="stable")
    sorted_keys = key[order]
    runs = np.diff(np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1], True]))
    largest_bucket = max(largest_bucket, int(runs.max()))
    for offset in range(1, int(runs.max())):  # (every pair of each bucket)
      at = np.flatnonzero(sorted_keys[:-offset] == sorted_keys[offset:])
      first, second = order[at], order[at + offset]
      distance = (np.bitwise_count(words[first, 0] ^ words[second, 0])
                  + np.bitwise_count(words[first, 1] ^ words[second, 1]))
      near = ((distance <= duplicates.THRESHOLD)
              & ~duplicates._far_apart(keys, first, second))
      pairs += int(near.sum())
      codes.append(np.minimum(first, second)[near] * count + np.maximum(first, second)[near])
      if near.any():
        components.join(first[near], second[near])
  sizes = collections.Counter(components.roots(np.arange(count)).tolist()).values()
  return {"pictures": count, "candidate pairs (with repeats across bands)": pairs,
          "distinct candidate pairs": len(np.unique(np.concatenate(codes))) if codes else 0,
          "largest bucket": largest_bucket, "largest component": max(sizes),
          "pictures in components of 2 or more": sum(s for s in sizes if s > 1),
          "seconds": round(time.perf_counter() - start, 2)}


def check_share(members, fingerprints, rounds: int = 5) -> dict:
  """Part 2: the fastest of `rounds` runs of `find`, and its thumbnail checks' time."""
  spent, real = [0.0], duplicates._alike

  def timed(*args):
    started = time.perf_counter()
    try:
      return real(*args)
    finally:
      spent[0] += time.perf_counter() - started
  duplicates._alike = timed
  best = None
  try:
    for _ in range(rounds):
      spent[0] = 0.0
      started = time.perf_counter()
      duplicates.find(members, fingerprints)
      took = time.perf_counter() - started
      if best is None or took < best[0]:
        best = (took, spent[0])
  finally:
    duplicates._alike = real
  return {"find s": round(best[0], 3), "thumbnail checks s": round(best[1], 3),
          "checks' share": f"{best[1] / best[0]:.0%}"}


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--version", default="/tmp/incremental_bench/data/bench/1.0.0")
  args = parser.parse_args()
  members, fingerprints = images_of(pathlib.Path(args.version))
  when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
  print(f"{len(members)} fingerprints of {args.version}, {when}")
  print("pair-local candidate graph:", candidate_graph(fingerprints))
  print("find:", check_share(members, fingerprints))


if __name__ == "__main__":
  main()
