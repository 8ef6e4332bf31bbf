"""A PNG file's framing: its signature and its chunks (length, type, data, CRC), read and
written. The checks of stored images, the re-framed masks and the stored-block encoder
share it."""

import struct
import zlib
from typing import Iterator

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def chunks(data: bytes) -> Iterator[tuple[bytes, int, int]]:
  """(type, start, end) of each chunk after the signature, in order: data[start:end] is the
  whole chunk, and `end` passes len(data) for one cut short. Ends where no chunk's length
  and type (8 bytes) fit."""
  position = len(SIGNATURE)
  while position + 8 <= len(data):
    length, kind = struct.unpack(">I4s", data[position:position + 8])
    end = position + 12 + length
    yield kind, position, end
    position = end


def crc_matches(raw) -> bool:
  """Whether a whole chunk (bytes or a memoryview: length, type, data, CRC) carries the CRC
  of its type and data."""
  return len(raw) >= 12 and zlib.crc32(raw[4:-4]) == int.from_bytes(raw[-4:], "big")


def chunk(kind: bytes, data: bytes) -> bytes:
  return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
