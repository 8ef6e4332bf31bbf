"""Cap the RAM TFDS uses to sort examples while writing a split.

TFDS's writer keeps every serialized example of a split in memory, up to 1 GB, before it
spills them to temporary bucket files (tensorflow_datasets/core/shuffle.py). For image
datasets that makes peak memory grow with the number of images until 1 GB. Under
`limit(max_bytes)` it spills beyond `max_bytes` instead. The output is the same bytes:
examples are ordered by their hashed key either way.
"""

import contextlib

from tensorflow_datasets.core import shuffle

DEFAULT_LIMIT = 64 << 20


@contextlib.contextmanager
def limit(max_bytes: int | None = None):
  """Within the block, TFDS holds at most `max_bytes` (default DEFAULT_LIMIT) in RAM."""
  previous = shuffle.MAX_MEM_BUFFER_SIZE
  shuffle.MAX_MEM_BUFFER_SIZE = min(previous, max_bytes or DEFAULT_LIMIT)
  try:
    yield
  finally:
    shuffle.MAX_MEM_BUFFER_SIZE = previous
