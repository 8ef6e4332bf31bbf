"""The record index (`record_index`) of the shards a build wrote on Beam, made by its workers.

TFDS's Beam writer chooses which shard holds an example and where; the index says it of
the shards as written. While the build's pipeline makes the examples, each fingerprinted
example's row goes to a file (`rows`: [split, key, fingerprint json]); once the shards are
written, a second pipeline on the same runner reads every new shard (each record's file
name, which is its key, and size, in order), joins each record with its row by (split,
key), and writes each shard's index with its SHA-256 (`record_index.write`). The driver
gives it one element a shard, holds no row, and gets each shard's SHA-256 back (the next
build does not read the shard again: `shard_hashes`).
"""

import glob
import json
import os

import apache_beam as beam

from imagesets.building import incremental
from imagesets.building import record_index


def rows(outcomes, split: str, path_prefix: str, label: str):
  """Writes the row of each fingerprinted example of a split's outcomes
  (`generation._beam_outcome`) to files `path_prefix*.jsonl`."""
  return (outcomes
          | f"{label}: rows" >> beam.FlatMap(_row_of, split)
          | f"{label}: write rows" >> beam.io.WriteToText(path_prefix, file_name_suffix=".jsonl"))


def _row_of(outcome, split: str):
  key, example, _, _, identity = outcome
  if example is not None and identity is not None and identity[2] is not None:
    yield json.dumps([split, key, identity[2].to_json()])


def write(version_dir, shards: list[tuple[str, str]], rows_pattern: str | None,
          file_format: str, work_dir, options=None, runner=None) -> dict[str, str]:
  """Writes the index of each (split, shard file name) of `shards` in `version_dir`, its
  records' fingerprints from the rows at `rows_pattern` (None: none fingerprinted);
  returns {shard name: its SHA-256}, as hashed by the workers (their files in `work_dir`)."""
  if not shards:
    return {}
  version_dir, digests = os.fspath(version_dir), os.path.join(os.fspath(work_dir), "digests")
  with beam.Pipeline(runner=runner, options=options) as pipeline:
    records = (pipeline
               | "Shards" >> beam.Create(shards)
               | "Records" >> beam.FlatMap(_records_of, version_dir, file_format))
    joined = {"record": records}
    if rows_pattern is not None:
      joined["fingerprint"] = (pipeline
                               | "Rows" >> beam.io.ReadFromText(rows_pattern)
                               | "Parsed" >> beam.Map(_parsed_row))
    _ = (joined
         | "Join" >> beam.CoGroupByKey()
         | "Placed" >> beam.FlatMap(_placed)
         | "By shard" >> beam.GroupByKey()
         | "Index" >> beam.Map(_write_index, version_dir)
         | "Digests" >> beam.io.WriteToText(digests, file_name_suffix=".jsonl"))
  return _digests_read(glob.glob(f"{glob.escape(digests)}*.jsonl"), [name for _, name in shards])


def _digests_read(paths: list[str], names: list[str]) -> dict[str, str]:
  """{shard name: SHA-256} of the index pipeline's lines, one for each shard of `names`."""
  found = {}
  for path in paths:
    with open(path, encoding="utf-8") as lines:
      for line in lines:
        try:
          row = json.loads(line)
        except ValueError:
          row = None
        if not (isinstance(row, list) and len(row) == 2 and isinstance(row[0], str)
                and row[0] not in found and record_index.is_sha256(row[1])):
          raise record_index.RecordIndexError(f"{path}: not one SHA-256 a shard: {line!r:.200}")
        found[row[0]] = row[1]
  missing, other = sorted(set(names) - set(found)), sorted(set(found) - set(names))
  if missing or other:
    raise record_index.RecordIndexError(
        f"the index pipeline hashed {len(found)} shards for the {len(names)} written "
        f"(not hashed: {missing[:3]}; not written: {other[:3]})")
  return found


def _records_of(shard: tuple[str, str], version_dir: str, file_format: str):
  """((split, key), (split, shard name, position, size)) of each record of a shard."""
  split, name = shard
  path = os.path.join(version_dir, name)
  for position, record in enumerate(incremental.shard_records(path, file_format)):
    key = record_index.example_fields(record)[0]
    if key is None:
      raise record_index.RecordIndexError(f"{path}: record {position} has no file name")
    yield (split, key), (split, name, position, len(record))


def _parsed_row(line: str):
  split, key, fingerprint = json.loads(line)
  return (split, key), fingerprint


def _placed(joined):
  """(shard name, (split, position, key, size, fingerprint json or None)) of a record."""
  (split, key), found = joined
  records, fingerprints = list(found["record"]), list(found.get("fingerprint", ()))
  if len(records) > 1 or len(fingerprints) > 1:
    raise record_index.RecordIndexError(
        f"{split}: {key!r} is {len(records)} records with {len(fingerprints)} fingerprints")
  for _, name, position, size in records:  # (a row without a record: a dropped example)
    yield name, (split, position, key, size, fingerprints[0] if fingerprints else None)


def _write_index(shard, version_dir: str) -> str:
  """Writes a shard's index; returns [shard name, its SHA-256] as a JSON line."""
  name, placed = shard
  placed = sorted(placed, key=lambda row: row[1])
  if [row[1] for row in placed] != list(range(len(placed))):
    raise record_index.RecordIndexError(f"{name}: its records were not all indexed")
  return json.dumps([name, record_index.write(
      version_dir, name, placed[0][0],
      [[key, size, fingerprint] for _, _, key, size, fingerprint in placed])])
