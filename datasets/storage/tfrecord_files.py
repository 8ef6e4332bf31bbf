"""TFRecord files without TensorFlow: each record framed as a little-endian u64 length, the
masked CRC-32C of those 8 bytes, the data, and the masked CRC-32C of the data; no
compression. The bytes are TensorFlow's `tf.io.TFRecordWriter`'s (tested), so a build
that writes its shards here need not import TensorFlow (1-2 s of a build's start).
"""

import struct
from typing import Iterable

import google_crc32c

LENGTH = struct.Struct("<Q")     # a record's length
CRC = struct.Struct("<I")        # a masked CRC-32C (of the length, of the data)
HEADER = struct.Struct("<Q4x")   # a record's length, then its length's CRC
FRAMING = HEADER.size + CRC.size  # bytes around each record: header, data CRC
_WRITE_BUFFER = 1 << 20


def masked_crc(data: bytes) -> int:
  """TFRecord's masked CRC-32C of `data`."""
  crc = google_crc32c.value(data)
  return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def write(path, records: Iterable[bytes]) -> int:
  """Writes `records` as the TFRecord file `path` (a local path); returns their count."""
  count = 0
  with open(path, "wb", buffering=_WRITE_BUFFER) as out:
    for record in records:
      length = LENGTH.pack(len(record))
      out.write(length + CRC.pack(masked_crc(length)))
      out.write(record)
      out.write(CRC.pack(masked_crc(record)))
      count += 1
  return count
