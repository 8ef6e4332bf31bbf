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


def picked_again(members, fingerprints, new_share: float = 0.01, seed: int = 0) -> dict:
  """Part 3: a version with `new_share` of these pictures new (left out of its base at
  random): the bands picked whole, against the base's picks with only the buckets its new
  pictures are in picked again. A band's picks are a function of each bucket's pictures
  and their order (`duplicates._band_pairs`), so those of every other bucket are the
  base's: the two must be the very same counts. (Not built: docs/incremental_versions.md.)"""
  d = duplicates
  pictures = sorted({f.pixels: (d.member_order(m), f) for m, f in zip(members, fingerprints)
                     }.values(), key=lambda picture: picture[0])  # (one an exact set)
  count = len(pictures)
  is_new = np.zeros(count, bool)
  is_new[np.random.default_rng(seed).choice(count, round(count * new_share), replace=False)] = True
  words = d._as_words([f.perceptual for _, f in pictures])
  thumbnails, _ = d._thumbnail_rows([f.thumbnail for _, f in pictures])
  was = np.flatnonzero(~is_new)  # (the base's pictures, in order)
  base_keys = d._thumbnail_keys(thumbnails[was])
  base_codes, base_votes = d._picked(words[was], base_keys, d.THRESHOLD)
  started = time.perf_counter()
  whole = d._picked(words, d._thumbnail_keys(thumbnails), d.THRESHOLD)
  whole_s = time.perf_counter() - started

  started = time.perf_counter()
  keys = d._Keys(*(np.empty(count, field.dtype) for field in base_keys))
  for field, kept, made in zip(keys, base_keys, d._thumbnail_keys(thumbnails[is_new])):
    field[was], field[is_new] = kept, made
  positions = d._band_positions()
  buckets = d._bucket_keys(words, positions)
  bands = np.arange(len(positions))[:, None]
  touched = np.zeros((len(positions), 1 << d.BAND_BITS), bool)
  touched[bands, buckets[:, is_new]] = True
  inside = touched[bands, buckets]  # (bands, pictures): in a bucket a new picture is in
  keyed_s = time.perf_counter() - started

  def picks_inside(chosen_words, chosen_keys, chosen_buckets, chosen_inside):
    low, high, times = [np.empty(0, np.int64)], [np.empty(0, np.int64)], [np.empty(0, np.uint8)]
    for band, (key, chosen) in enumerate(zip(chosen_buckets, chosen_inside)):
      at = np.flatnonzero(chosen)
      if len(at) > 1:
        i, j, picks = d._band_pairs(chosen_words[at], key[at], d._Keys(*(
            field[at] for field in chosen_keys)), band, d.THRESHOLD)
        low.append(at[i]), high.append(at[j]), times.append(picks)
    return [np.concatenate(column) for column in (low, high, times)]
  started = time.perf_counter()
  then = picks_inside(words[was], base_keys, buckets[:, was], inside[:, was])
  now = picks_inside(words, keys, buckets, inside)
  picked_s = time.perf_counter() - started

  started = time.perf_counter()
  taken_codes, taken_votes = d._counted(*then, len(was))
  at = np.searchsorted(base_codes, taken_codes)
  assert np.array_equal(base_codes[at], taken_codes)  # (the base holds every pick taken off)
  votes = base_votes.astype(np.int16)
  votes[at] -= taken_votes
  held = votes > 0
  codes, votes = base_codes[held], votes[held].astype(np.uint8)
  codes = was[codes // len(was)] * count + was[codes % len(was)]  # (in order: sorted still)
  codes, votes = d._merged(codes, votes, *d._counted(*now, count))
  merged_s = time.perf_counter() - started
  return {"new pictures": int(is_new.sum()),
          "pictures in a changed bucket, a band": round(float(inside.sum()) / len(positions)),
          "the same picks": bool(np.array_equal(codes, whole[0])
                                 and np.array_equal(votes, whole[1])),
          "picked whole s": round(whole_s, 3),
          "picked again s": round(keyed_s + picked_s + merged_s, 3),
          "of which keys and buckets s": round(keyed_s, 3),
          "changed buckets picked s": round(picked_s, 3), "merged s": round(merged_s, 3)}


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--version", default="/tmp/incremental_bench/data/bench/1.0.0")
  args = parser.parse_args()
  members, fingerprints = images_of(pathlib.Path(args.version))
  when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
  print(f"{len(members)} fingerprints of {args.version}, {when}")
  print("pair-local candidate graph:", candidate_graph(fingerprints))
  print("find:", check_share(members, fingerprints))
  print("picked again:", picked_again(members, fingerprints))


if __name__ == "__main__":
  main()
