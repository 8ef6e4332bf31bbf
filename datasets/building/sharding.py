"""Shard-count policy: enough shards for multi-worker input sharding.

TFDS picks one shard for anything under 64 MiB, and a 1-shard split cannot be split
between workers with `ReadConfig(input_context=...)` (every worker but one gets
nothing). We keep TFDS's size-based count but never go below `MIN_SHARDS` (or the
number of examples, when smaller). An explicit `--num_shards` still wins.

A build that asks for more shards (`min_shards` above MIN_SHARDS: versions built on
versions, where a relabelled or removed photo rewrites the shard that held it) gets them,
but none under MIN_SHARD_BYTES: a small split keeps a few shards, not one file per photo.
"""

import dataclasses

import tensorflow_datasets as tfds

import imagesets.tfds_internals as tfds_internals

MIN_SHARDS = 4
MIN_SHARD_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class MinShardsConfig(tfds_internals.ShardConfig):
  """TFDS's ShardConfig, with a floor on the automatic shard count."""

  min_num_shards: int = MIN_SHARDS

  def get_number_shards(self, total_size, num_examples, uses_precise_sharding=True):
    if self.num_shards:
      return self.num_shards
    automatic = super().get_number_shards(total_size, num_examples, uses_precise_sharding)
    return max(automatic, floor(self.min_num_shards, total_size, num_examples))


def floor(min_shards: int, total_size: int, num_examples: int) -> int:
  """The fewest shards a split of `num_examples` records of `total_size` bytes gets."""
  if min_shards > MIN_SHARDS:
    min_shards = max(MIN_SHARDS, min(min_shards, total_size // MIN_SHARD_BYTES))
  return min(min_shards, num_examples)


@dataclasses.dataclass(eq=False)
class MinShardsDownloadConfig(tfds.download.DownloadConfig):
  """DownloadConfig whose shard config applies the MIN_SHARDS floor."""

  min_num_shards: int = MIN_SHARDS

  def get_shard_config(self) -> tfds_internals.ShardConfig:
    return MinShardsConfig(
        num_shards=self.num_shards,
        min_shard_size=self.min_shard_size,
        max_shard_size=self.max_shard_size,
        min_num_shards=self.min_num_shards,
    )


def with_min_shards(config: tfds.download.DownloadConfig,
                    min_shards: int = MIN_SHARDS) -> MinShardsDownloadConfig:
  """Returns a copy of `config` that keeps every field and adds the shard floor."""
  if isinstance(config, MinShardsDownloadConfig) and config.min_num_shards == min_shards:
    return config
  fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
            if f.init and f.name != "min_num_shards"}
  return MinShardsDownloadConfig(**fields, min_num_shards=min_shards)
