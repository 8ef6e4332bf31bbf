"""Cap the RAM TFDS uses to sort examples while writing a split.

TFDS's writer keeps every serialized example of a split in memory, up to 1 GB, before it
spills them to temporary bucket files (tensorflow_datasets/core/shuffle.py). For image
datasets that makes peak memory grow with the number of images until 1 GB. Under
`limit()` it spills beyond `max_bytes` instead, into 100 bucket files rather than TFDS's
1,000 (creating and deleting 1,000 files cost ~0.6 s per split, more than writing the
data; each bucket, 1/100 of the split, is read back alone). The output is the same bytes:
buckets are consecutive ranges of the hashed keys, sorted one at a time.

Builds through `generation` locally write records that arrive already in shard order
(`prepared_records`); they keep at most `DEFAULT_LIMIT` of them in RAM too.
"""

import contextlib

from tensorflow_datasets.core import shuffle

DEFAULT_LIMIT = 16 << 20
BUCKETS = 100


@contextlib.contextmanager
def limit(max_bytes: int | None = None):
  """Within the block, TFDS holds at most `max_bytes` (default DEFAULT_LIMIT) in RAM."""
  previous = shuffle.MAX_MEM_BUFFER_SIZE, shuffle.BUCKETS_NUMBER
  shuffle.MAX_MEM_BUFFER_SIZE = min(previous[0], max_bytes or DEFAULT_LIMIT)
  shuffle.BUCKETS_NUMBER = BUCKETS
  try:
    yield
  finally:
    shuffle.MAX_MEM_BUFFER_SIZE, shuffle.BUCKETS_NUMBER = previous
