"""Grain transforms for tests that count records: each record's id, in worker processes
too (a transform must be importable there, so not in a test module)."""

import hashlib

import grain.python as grain
import numpy as np


def record_id(record: bytes) -> int:
  """A record's id: the first 7 bytes of its SHA-256, as an int."""
  return int.from_bytes(hashlib.sha256(record).digest()[:7], "big")


class RecordIds(grain.MapTransform):
  """{"id": the record's id}."""

  def map(self, record):
    return {"id": np.int64(record_id(record))}
