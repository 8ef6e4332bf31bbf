"""splits: stable seeded hash assignment, stratified in expectation, never moving files."""

import collections

import pytest

from imagesets.building import splits

CLASSES = ["daisy", "dandelion", "roses", "sunflowers", "tulips"]


def paths(per_class, start=0):
  return [f"{c}/{i:05d}.jpg" for c in CLASSES for i in range(start, start + per_class)]


def test_every_class_gets_the_proportions():
  assigned = splits.assign(paths(2000), splits.DEFAULT_PROPORTIONS, seed=0)
  assert list(assigned) == ["train", "validation", "test"]
  for cls in CLASSES:
    counts = {name: sum(p.startswith(cls + "/") for p in members)
              for name, members in assigned.items()}
    for name, proportion in splits.DEFAULT_PROPORTIONS.items():
      assert abs(counts[name] / 2000 - proportion) < 0.025, (cls, counts)


def test_assignment_is_a_pure_function_of_seed_and_path():
  first = splits.assign(paths(100), splits.DEFAULT_PROPORTIONS, seed=7)
  again = splits.assign(list(reversed(paths(100))), splits.DEFAULT_PROPORTIONS, seed=7)
  assert first == again
  other_seed = splits.assign(paths(100), splits.DEFAULT_PROPORTIONS, seed=8)
  assert other_seed != first
  assert sorted(sum(other_seed.values(), [])) == sorted(paths(100))  # nothing lost


def test_adding_or_removing_files_never_moves_existing_ones():
  before = splits.assign(paths(300), splits.DEFAULT_PROPORTIONS)
  grown = splits.assign(paths(300) + paths(200, start=300), splits.DEFAULT_PROPORTIONS)
  shrunk = splits.assign(paths(150), splits.DEFAULT_PROPORTIONS)
  where = lambda assigned: {p: name for name, ps in assigned.items() for p in ps}
  before, grown, shrunk = where(before), where(grown), where(shrunk)
  assert all(grown[p] == split for p, split in before.items())
  assert all(before[p] == split for p, split in shrunk.items())


def test_custom_proportions_and_names():
  assigned = splits.assign(paths(1000), {"train": 0.5, "holdout": 0.5}, seed=1)
  assert set(assigned) == {"train", "holdout"}
  assert abs(len(assigned["train"]) / 5000 - 0.5) < 0.02
  hashes = collections.Counter(splits.unit_hash(p, 1) < 0.5 for p in paths(1000))
  assert hashes[True] == len(assigned["train"])


@pytest.mark.parametrize("bad", [
    {"train": 0.8, "test": 0.1},          # sums to 0.9
    {"train": 1.2, "test": -0.2},         # out of range
    {},
    {"all": 1.0},                         # reserved by TFDS
])
def test_bad_proportions_are_refused(bad):
  with pytest.raises(ValueError, match="split|'all'"):
    splits.assign(paths(2), bad)
