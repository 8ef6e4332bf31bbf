"""The record index's pipeline on Beam (`beam_index`): what it hands back to the driver.
Its pipeline itself runs in the Beam builds of tests/building/test_incremental.py."""

import json

import pytest

from imagesets.building import beam_index
from imagesets.building import record_index

A, B = "pets-train.tfrecord-00000-of-00002", "pets-train.tfrecord-00001-of-00002"


def _lines(tmp_path, *rows) -> list[str]:
  paths = []
  for number, part in enumerate(rows):
    path = tmp_path / f"digests-{number:05d}.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in part))
    paths.append(str(path))
  return paths


def test_each_shard_s_sha256_is_read_from_the_workers_files(tmp_path):
  paths = _lines(tmp_path, [[A, "a" * 64]], [[B, "b" * 64]])
  assert beam_index._digests_read(paths, [A, B]) == {A: "a" * 64, B: "b" * 64}


@pytest.mark.parametrize("rows, said", [
    ([[[A, "a" * 64]]], r"hashed 1 shards for the 2 written \(not hashed: \['pets-train.tfrecord-00001"),
    ([[[A, "a" * 64], [B, "b" * 64], [A, "a" * 64]]], "not one SHA-256 a shard"),
    ([[[A, "a" * 64], [B, "B" * 64]]], "not one SHA-256 a shard"),
    ([[[A, "a" * 64], [B, "b" * 64, "x"]]], "not one SHA-256 a shard"),
    ([[[A, "a" * 64], "not a row"]], "not one SHA-256 a shard"),
    ([[[A, "a" * 64], [B, "b" * 64], ["other", "c" * 64]]], r"hashed 3 .* not written: \['other'\]"),
    ([[[A, "a" * 64], ["other", "c" * 64]]], r"hashed 2 shards for the 2 written \(not hashed: \['pets"),
])
def test_a_missing_repeated_or_malformed_digest_is_refused(tmp_path, rows, said):
  with pytest.raises(record_index.RecordIndexError, match=said):
    beam_index._digests_read(_lines(tmp_path, *rows), [A, B])
