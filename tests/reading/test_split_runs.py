"""split_runs: a split's shards checked against its readers, one line naming the fix."""

import types

import pytest

from imagesets.reading import split_runs


def _builder():
  return types.SimpleNamespace(info=types.SimpleNamespace(full_name="pets/1.0.0"))


@pytest.mark.parametrize("split, fix", [
    ("train", "rebuild with --num_shards 3 or more, or read it with fewer"),
    ("train[90%:]", "read a wider slice of the split, or read it with fewer"),
])
def test_fewer_shards_than_readers_is_one_line_naming_a_fix_that_works(split, fix):
  """A slice's shards are fewer than the split's: rebuilding with more shards need not
  give it more (train[90%:] of a split of 3 shards is 1), a wider slice does."""
  shards = ["pets-train.tfrecord-00002-of-00003"]
  with pytest.raises(ValueError) as error:
    split_runs.check_readers(_builder(), split, shards, 3, "input pipelines")
  assert str(error.value) == (
      f"pets/1.0.0 split {split!r} has 1 shard file(s), fewer than the 3 input pipelines "
      f"reading it (each reads whole shards): {fix}")
  split_runs.check_readers(_builder(), split, shards, 1, "input pipelines")
