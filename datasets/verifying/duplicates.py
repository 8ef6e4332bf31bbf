"""Groups of duplicate images in a dataset version, within and across splits.

Two images are duplicates when their decoded pixels are identical (`exact`), or when their
128-bit perceptual hashes (`image_hashes`) differ by at most `THRESHOLD` bits (`near`: the
same picture re-encoded, resized, converted, cropped by a few percent). Groups are the
connected components of those pairs. A group whose members sit in different splits is
leakage; one whose members carry different labels is a label conflict.

Finding the near pairs compares no decoded images and not every pair of hashes: it is
bit-sampling LSH. Each of `BANDS` bands is a fixed, seeded choice of `BAND_BITS` of the
128 bits; images whose bits agree on a whole band are candidates, checked with the real
Hamming distance. A pair `d` bits apart agrees on a band with probability
C(128-d, 14)/C(128, 14): at d = 24 (a 5 % crop) 0.055, so 64 bands find it with
probability 0.97 (at d <= 16: > 0.999); distinct photos (d ~ 64) agree on a band with
probability 6e-5, so the candidates checked are ~0.4 % of all pairs. The work is a sort of
N keys per band plus the candidate checks, all numpy; memory is O(N) (the hashes' 128 bits
unpacked, one band's keys and candidates: ~450 bytes an image at 60,000), whatever the
images' sizes (docs/know_your_data.md measures it at 60,000 to 1,000,000 images).
"""

import collections
import dataclasses
from typing import Iterable, Sequence

import numpy as np

from imagesets.verifying import image_hashes

THRESHOLD = 26      # bits of image_hashes.HASH_BITS: 5 % crops measured <= 25, distinct >= 33
BANDS = 64
BAND_BITS = 14
_BAND_SEED = 27
SPLIT_ORDER = ("train", "validation", "test")  # `drop` keeps the copy of the earliest split
EXACT, NEAR = "exact", "near"
REPORT_FILE = "duplicates.json"  # beside dataset_info.json: published and fetched with it
# What a build does about cross-split groups: report them (warn), stop naming them (error),
# keep each group's copies of its earliest split only (drop), or fingerprint nothing (off).
LEAKAGE_ACTIONS = ("warn", "error", "drop", "off")


class LeakageError(ValueError):
  """The same picture is in two splits and the build was told to stop (leakage="error")."""


@dataclasses.dataclass(frozen=True)
class Member:
  split: str
  file_name: str
  label: str | None

  def to_json(self) -> dict:
    return {"split": self.split, "file_name": self.file_name, "label": self.label}


@dataclasses.dataclass(frozen=True)
class Group:
  kind: str                 # EXACT: every member has the same pixels; NEAR otherwise
  members: tuple[Member, ...]  # in split order, then by file name
  # In a NEAR group, the members that have the very same pixels (positions in `members`).
  exact_sets: tuple[tuple[int, ...], ...] = ()

  @property
  def splits(self) -> list[str]:
    return sorted({m.split for m in self.members}, key=split_rank)

  @property
  def cross_split(self) -> bool:
    return len(self.splits) > 1

  @property
  def label_conflict(self) -> bool:
    return len({m.label for m in self.members}) > 1

  def same_pixels(self) -> list[str]:
    """'split/file = split/file' for each set of members with the very same pixels."""
    return [" = ".join(f"{self.members[p].split}/{self.members[p].file_name}" for p in positions)
            for positions in self.exact_sets]

  def to_json(self) -> dict:
    return {"kind": self.kind, "cross_split": self.cross_split,
            "label_conflict": self.label_conflict,
            "members": [m.to_json() for m in self.members],
            "exact_sets": [list(positions) for positions in self.exact_sets]}


def split_rank(split: str) -> tuple:
  return (SPLIT_ORDER.index(split) if split in SPLIT_ORDER else len(SPLIT_ORDER), split)


def _member_order(member: Member) -> tuple:
  return (split_rank(member.split), member.file_name)


def _band_positions() -> np.ndarray:
  rng = np.random.default_rng(_BAND_SEED)
  return np.stack([rng.choice(image_hashes.HASH_BITS, BAND_BITS, replace=False)
                   for _ in range(BANDS)])


def _as_words(hashes: Sequence[int]) -> np.ndarray:
  """N x 2 uint64 (high, low words) of 128-bit hashes."""
  mask = (1 << 64) - 1
  return np.array([(h >> 64, h & mask) for h in hashes], dtype=np.uint64).reshape(-1, 2)


def near_pairs(hashes: Sequence[int], threshold: int = THRESHOLD) -> np.ndarray:
  """K x 2 int array of index pairs (i < j) whose hashes differ by <= threshold bits
  (each pair found by LSH bands, see the module doc; may repeat)."""
  words = _as_words(hashes)
  if len(words) < 2:
    return np.zeros((0, 2), np.int64)
  bits = np.unpackbits(words.byteswap().view(np.uint8).reshape(-1, 16), axis=1)  # N x 128
  weights = 1 << np.arange(BAND_BITS, dtype=np.int64)
  found = []
  for positions in _band_positions():
    keys = bits[:, positions].astype(np.int64) @ weights
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    offset = 1
    while offset < len(order):  # pairs `offset` apart in the sorted order, same key
      same = sorted_keys[:-offset] == sorted_keys[offset:]
      if not same.any():
        break  # runs are contiguous: none is longer than `offset`
      first, second = order[:-offset][same], order[offset:][same]
      distance = (np.bitwise_count(words[first, 0] ^ words[second, 0])
                  + np.bitwise_count(words[first, 1] ^ words[second, 1]))
      close = distance <= threshold
      found.append(np.stack([np.minimum(first, second)[close],
                             np.maximum(first, second)[close]], axis=1))
      offset += 1
  return np.concatenate(found) if found else np.zeros((0, 2), np.int64)


def _components(count: int, pairs: Iterable[tuple[int, int]]) -> list[list[int]]:
  parent = list(range(count))

  def root(i):
    while parent[i] != i:
      parent[i] = parent[parent[i]]
      i = parent[i]
    return i

  for a, b in pairs:
    ra, rb = root(int(a)), root(int(b))
    if ra != rb:
      parent[max(ra, rb)] = min(ra, rb)
  members = collections.defaultdict(list)
  for i in range(count):
    members[root(i)].append(i)
  return [group for group in members.values() if len(group) > 1]


def find(members: Sequence[Member], fingerprints: Sequence[image_hashes.Fingerprint],
         threshold: int = THRESHOLD) -> list[Group]:
  """Every group of duplicates among the images, sorted by their first member."""
  by_pixels = collections.defaultdict(list)
  for index, fingerprint in enumerate(fingerprints):
    by_pixels[fingerprint.pixels].append(index)
  exact = [(same[0], other) for same in by_pixels.values() for other in same[1:]]
  near = near_pairs([f.perceptual for f in fingerprints], threshold)
  groups = []
  for indices in _components(len(members), exact + [tuple(p) for p in near.tolist()]):
    indices = sorted(indices, key=lambda i: _member_order(members[i]))
    same = collections.defaultdict(list)
    for position, index in enumerate(indices):
      same[fingerprints[index].pixels].append(position)
    kind = EXACT if len(same) == 1 else NEAR
    groups.append(Group(kind, tuple(members[i] for i in indices), tuple(
        tuple(p) for p in same.values() if len(p) > 1) if kind == NEAR else ()))
  return sorted(groups, key=lambda g: _member_order(g.members[0]))


def to_drop(groups: Iterable[Group]) -> list[Member]:
  """What `leakage="drop"` removes: in each cross-split group, the members outside its
  earliest split (train -> validation -> test -> others by name). Deterministic."""
  dropped = []
  for group in groups:
    if group.cross_split:
      keep = group.splits[0]
      dropped += [m for m in group.members if m.split != keep]
  return sorted(dropped, key=_member_order)


def _named(group: Group, limit: int = 3) -> str:
  names = [f"{m.split}/{m.file_name}" for m in group.members[:limit]]
  more = f" (+{len(group.members) - limit})" if len(group.members) > limit else ""
  return " = ".join(names) + more


def summary(groups: Sequence[Group], num_images: int, dropped: Sequence[Member] = (),
            show: int = 3) -> str:
  """One line: how many groups, how many cross splits, naming a few of those."""
  if not groups:
    return f"duplicates: none among {num_images} images"
  kinds = collections.Counter(g.kind for g in groups)
  leaks = [g for g in groups if g.cross_split]
  conflicts = sum(g.label_conflict for g in groups)
  line = (f"duplicates: {len(groups)} group(s) ({kinds[EXACT]} exact, {kinds[NEAR]} near) "
          f"among {num_images} images; {len(leaks)} cross splits (leakage)")
  if leaks:
    line += ": " + "; ".join(_named(g) for g in leaks[:show])
    line += f"; and {len(leaks) - show} more" if len(leaks) > show else ""
  if conflicts:
    line += f"; {conflicts} label conflict(s)"
  if dropped:
    line += f"; dropped {len(dropped)} leaked example(s)"
  return line


def to_json(groups: Sequence[Group], num_images: int, dropped: Sequence[Member] = ()) -> dict:
  """The stored report (`REPORT_FILE`) and `imagesets duplicates --json`."""
  return {"groups": [g.to_json() for g in groups],
          "num_images": num_images,
          "num_cross_split": sum(g.cross_split for g in groups),
          "num_label_conflicts": sum(g.label_conflict for g in groups),
          "dropped": [m.to_json() for m in dropped],
          "threshold_bits": THRESHOLD}


def from_json(report: dict) -> tuple[list[Group], list[Member]]:
  groups = [Group(g["kind"], tuple(Member(**m) for m in g["members"]),
                  tuple(tuple(p) for p in g.get("exact_sets", ()))) for g in report["groups"]]
  return groups, [Member(**m) for m in report.get("dropped", [])]
