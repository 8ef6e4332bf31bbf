"""Stable, seeded train/validation/test assignment by hashing each file's split key.

A file's split depends only on (seed, its split key, the proportions): adding or removing
other files never moves it (unlike shuffling a list and cutting it). The key is one of
`SPLIT_KEYS`: the relative path (versions built before split keys were recorded), or the
file's content, so that renaming a photo or moving it to another class folder (fixing its
label) never moves it between splits, and exact copies always land in one split. Each class
is split by the same thresholds on the same uniform hash, so every class gets the target
proportions up to sampling noise -- stratified in expectation, as TF's image-retraining
example did with its hashed `which_set`. Changing the seed or the proportions does move
files: that is a new dataset version.
"""

import hashlib
from typing import Iterable, Mapping

DEFAULT_PROPORTIONS = {"train": 0.8, "validation": 0.1, "test": 0.1}
PATH, CONTENT = "path", "content"
SPLIT_KEYS = (PATH, CONTENT)


def check_split_key(split_key: str) -> str:
  """The split key's name ("" is PATH: what versions that recorded none used)."""
  if split_key not in ("", *SPLIT_KEYS):
    raise ValueError(f"split_key={split_key!r}: use one of {', '.join(SPLIT_KEYS)}")
  return split_key or PATH


def content_key(sha256_hex: str) -> str:
  """The split key of a file whose bytes have this SHA-256 (never a relative path: no '/')."""
  return f"sha256:{sha256_hex}"


def validate(proportions: Mapping[str, float]) -> dict[str, float]:
  """Returns the proportions as a dict, or raises ValueError saying what is wrong."""
  proportions = dict(proportions)
  if not proportions or any(not (0 < p <= 1) for p in proportions.values()):
    raise ValueError(f"split proportions must each be in (0, 1]: {proportions}")
  if abs(sum(proportions.values()) - 1) > 1e-6:
    raise ValueError(f"split proportions must sum to 1, not {sum(proportions.values())}: "
                     f"{proportions}")
  if "all" in proportions:
    raise ValueError("'all' is reserved by TFDS and cannot be a split name")
  return proportions


def unit_hash(relative_path: str, seed: int) -> float:
  """A uniform number in [0, 1) that depends only on the seed and the path."""
  digest = hashlib.sha256(f"{seed}\0{relative_path}".encode("utf-8")).digest()
  return int.from_bytes(digest[:8], "big") / 2**64


def split_of(relative_path: str, proportions: Mapping[str, float], seed: int = 0) -> str:
  """The split `relative_path` belongs to (proportions in their given order)."""
  point = unit_hash(relative_path, seed)
  total = 0.0
  for name, proportion in proportions.items():
    total += proportion
    if point < total:
      return name
  return name  # rounding: proportions summed to 1 - epsilon


def assign(relative_paths: Iterable[str], proportions: Mapping[str, float],
           seed: int = 0, exact_sizes: bool = False,
           keys: Mapping[str, str] | None = None) -> dict[str, list[str]]:
  """{split: sorted relative paths}, with every split of `proportions` present.

  `keys`: each path's split key (`content_key`); None: the path itself.

  `exact_sizes`: every split but the first gets exactly int(proportion * n) files, the
  first the rest (keras' `validation_split` rule), chosen by rank of the same hash. Then
  adding files can move others, which the default (thresholds on the hash) never does.
  """
  proportions = validate(proportions)
  if exact_sizes:
    if keys is not None:  # (keras' rule ranks paths; nothing asks for both)
      raise ValueError("exact split sizes rank files by path: no split keys with them")
    return _assign_by_rank(list(relative_paths), proportions, seed)
  out = {name: [] for name in proportions}
  for path in relative_paths:
    out[split_of(keys[path] if keys is not None else path, proportions, seed)].append(path)
  return {name: sorted(paths) for name, paths in out.items()}


def _assign_by_rank(relative_paths, proportions, seed):
  ranked = sorted(relative_paths, key=lambda path: (unit_hash(path, seed), path))
  names = list(proportions)
  sizes = [int(proportions[name] * len(ranked)) for name in names[1:]]
  sizes.insert(0, len(ranked) - sum(sizes))
  out, start = {}, 0
  for name, size in zip(names, sizes):
    out[name] = sorted(ranked[start:start + size])
    start += size
  return out
