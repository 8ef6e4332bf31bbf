"""How well duplicate detection finds planted copies, and how often it pairs distinct photos.

    python benchmarks/duplicates_quality.py [--photos 2000] [--copies 200] [--seed 0] [--real]

With `--real`, the distinct pictures are real photos instead: the 15 scikit-image sample
photos of imagesets_testing.real_photos and their 5x5 tiles (390 pictures, 40-100 px);
pairs of pictures from the same photo (a photo and its own tile) are not counted as false.

Makes `--photos` distinct photo-like images (imagesets_testing.sample_images.photo: smooth
colour fields, soft discs and grain; sizes 240-480 x 320-640), stored as JPEG quality 90,
and, of the first `--copies` of them, one copy of each kind of
imagesets_testing.planted_copies (exact: same pixels, other bytes; JPEG quality 60; resized to
50 %; PNG; 5 % border crop) plus two harder crops that are reported but not promised: 10 %
(5 % off every border) and 5 % off the left border only. Fingerprints every image as a build
does (`image_hashes.of_bytes`) and groups them (`duplicates.find`); reports, per kind, the
share of copies grouped with their original (recall) and how many have exactly its
pixels; and the pairs of distinct photos that share a group (false pairs).

The generated photos all share one recipe (red-ish top, blue-ish bottom), so they are more
alike than a real collection's: a harsh test of false pairs.
"""

import argparse
import collections
import itertools
import time

import numpy as np

from imagesets.analysis import duplicates
from imagesets.analysis import image_hashes
from imagesets_testing import planted_copies
from imagesets_testing import real_photos
from imagesets_testing import sample_images


def _left_crop(pixels):
  return sample_images.encode(pixels[:, round(pixels.shape[1] * 0.05):], "JPEG", quality=90)


EXTRA = {"crop_10 (5 % each border)": lambda p: planted_copies.border_crop(p, 0.10),
         "crop_5_left (one border)": _left_crop}


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--photos", type=int, default=2000)
  parser.add_argument("--copies", type=int, default=200)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--real", action="store_true")
  args = parser.parse_args()
  rng = np.random.default_rng(args.seed)
  start = time.perf_counter()
  members, fingerprints, original_of, source = [], [], {}, {}
  kinds = {**planted_copies.KINDS, **EXTRA}
  if args.real:
    real = {**real_photos.photos(), **real_photos.tiles(5)}
    pictures = list(real.values())
    args.photos, args.copies = len(pictures), min(args.copies, len(pictures))
  for index in range(args.photos):
    pixels = pictures[index] if args.real else sample_images.photo(
        int(rng.integers(240, 481)), int(rng.integers(320, 641)),
        seed=args.seed * 1_000_000 + index)
    source[len(members)] = list(real)[index].split("#")[0] if args.real else index
    original = len(members)
    members.append(duplicates.Member("train", f"photo_{index}", None))
    fingerprints.append(image_hashes.of_bytes(planted_copies.original(pixels)))
    if index < args.copies:
      for kind, make in kinds.items():
        original_of[len(members)] = (original, kind)
        members.append(duplicates.Member("test", f"{kind}_{index}", None))
        fingerprints.append(image_hashes.of_bytes(make(pixels)))
  made = time.perf_counter() - start
  start = time.perf_counter()
  groups = duplicates.find(members, fingerprints)
  grouped = time.perf_counter() - start
  group_of = {}
  position = {m: i for i, m in enumerate(members)}
  for number, group in enumerate(groups):
    for member in group.members:
      group_of[position[member]] = number
  found, exact = collections.Counter(), collections.Counter()
  for copy, (original, kind) in original_of.items():
    if copy in group_of and group_of[copy] == group_of.get(original):
      found[kind] += 1
    exact[kind] += fingerprints[copy].pixels == fingerprints[original].pixels
  originals = collections.defaultdict(list)
  for index in range(len(members)):
    if index not in original_of and index in group_of:
      originals[group_of[index]].append(index)
  false_pairs = sum(source[a] != source[b] for o in originals.values()
                    for a, b in itertools.combinations(o, 2))
  print(f"{args.photos} distinct photos, {args.copies} copies of each kind "
        f"(fingerprints {made:.0f} s, grouping {grouped:.2f} s, threshold "
        f"{duplicates.THRESHOLD} of {image_hashes.HASH_BITS} bits)")
  print("| copy | recall | same pixels (exact) |")
  print("|---|---:|---:|")
  for kind in kinds:
    print(f"| {kind} | {found[kind]}/{args.copies} ({found[kind] / args.copies:.1%}) | "
          f"{exact[kind]} |")
  pairs = args.photos * (args.photos - 1) // 2
  print(f"false pairs among the {args.photos} distinct photos: {false_pairs} of {pairs:,}")


if __name__ == "__main__":
  main()
