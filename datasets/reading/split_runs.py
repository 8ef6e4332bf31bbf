"""The read run of a split: its shard slices, checked against its readers, and the
`order.Run` that reads them in windows sized for the shard cache. Pure Python and numpy:
the tf.data reader (`streaming`), Grain's sources and the mixes all start from it, and a
Grain worker process that unpickles a source never imports TensorFlow."""

import os

from imagesets.reading import order as order_lib

DEFAULT_WINDOW_SHARDS = 4   # shards read together


def split_shards(builder, split: str) -> list[order_lib.ShardSlice]:
  """The shard slices of `split` (TFDS's file instructions: train[:10%] reads part of some)."""
  return [order_lib.ShardSlice(os.path.basename(i.filename), i.skip, i.take)
          for i in builder.info.splits[split].file_instructions if i.take]


def check_readers(builder, split: str, shards, readers: int, what: str) -> None:
  if len(shards) < readers:
    # (a slice, train[90%:], holds a part of the split's shards: more of them need not
    # give it more, a wider slice does)
    fix = ("read a wider slice of the split" if "[" in split else
           f"rebuild with --num_shards {readers} or more")
    raise ValueError(
        f"{builder.info.full_name} split {split!r} has {len(shards)} shard file(s), fewer "
        f"than the {readers} {what} reading it (each reads whole shards): {fix}, or read "
        "it with fewer")


def run_for(source, split: str, *, shuffle: bool, seed: int | None, readers: int = 1,
            mix: str = "shuffle", window_shards: int = DEFAULT_WINDOW_SHARDS,
            held: int = 1, num_epochs: int | None = 1, start=None, shards=None,
            what: str = "input pipelines") -> order_lib.Run:
  """The `order.Run` of `readers` readers of `split`, windows sized for the cache limit
  (each reader holding `held` windows and downloading the next), from `start` (a
  `Position` or its JSON; None: the first epoch)."""
  shards = split_shards(source.builder, split) if shards is None else shards
  check_readers(source.builder, split, shards, readers, what)
  order = order_lib.Order(shards, seed or 0, shuffle, mix)
  if isinstance(start, dict):
    start = order_lib.Position.from_json(start)
  # (a position replays its own windows; the rest is read in windows sized for this job)
  window = window_shards
  if source.cache is not None:   # windows sized, and the limit checked, for the readers
    window = source.cache.window_size_for(window_shards, source.largest_shard, held, readers)
    source.cache.check_fits(source.largest_shard, source.builder.info.full_name, held,
                            readers)
  return order_lib.Run(order, readers, window, after=start, num_epochs=num_epochs)
