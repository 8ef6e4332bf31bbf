import tensorflow_datasets as tfds

from imagesets.building import sharding


def test_small_splits_get_the_floor_of_shards():
  config = sharding.MinShardsConfig()
  # 10 MiB would be one shard in stock TFDS.
  assert tfds.core.utils.shard_utils.ShardConfig().get_number_shards(10 << 20, 100) == 1
  assert config.get_number_shards(10 << 20, 100) == sharding.MIN_SHARDS


def test_never_more_shards_than_examples():
  assert sharding.MinShardsConfig().get_number_shards(1000, 3) == 3


def test_large_splits_keep_the_size_based_count():
  stock = tfds.core.utils.shard_utils.ShardConfig().get_number_shards(8 << 30, 100_000)
  assert stock > sharding.MIN_SHARDS
  assert sharding.MinShardsConfig().get_number_shards(8 << 30, 100_000) == stock


def test_explicit_num_shards_wins():
  assert sharding.MinShardsConfig(num_shards=1).get_number_shards(10 << 20, 100) == 1


def test_with_min_shards_keeps_every_user_setting():
  user = tfds.download.DownloadConfig(num_shards=7, max_examples_per_split=5,
                                      download_mode=tfds.download.GenerateMode.FORCE_REDOWNLOAD)
  converted = sharding.with_min_shards(user)
  assert converted.num_shards == 7 and converted.max_examples_per_split == 5
  assert converted.download_mode == tfds.download.GenerateMode.FORCE_REDOWNLOAD
  assert converted.get_shard_config().get_number_shards(10 << 20, 100) == 7
