"""versions: a bucket's .config/metadata.json is untrusted: what is no JSON object names no
default config, and one larger than any is refused unread."""

import shutil

import pytest

from publish_helpers import small_version
from imagesets.publishing import publish
from imagesets.storage import bucket as bucket_lib
from imagesets.storage import fetch
from imagesets.storage import versions


@pytest.mark.parametrize("metadata, config", [
    (None, None), (b'{"default_config_name": "cfg"}', "cfg"), (b"{}", None),
    (b"[1]", None), (b'"cfg"', None), (b"7", None), (b"not JSON", None),
    pytest.param(b"[" * 200_000 + b"]" * 200_000, None, id="nested-too-deep")])
def test_only_a_json_object_names_a_default_config(metadata, config):
  assert versions.default_config(metadata) == config


def test_a_forged_metadata_is_one_line_for_a_spec_without_a_config(tmp_path):
  small_version(tmp_path / "data")
  url = str(tmp_path / "bucket")
  publish.publish("ds/cfg:1.0.0", tmp_path / "data", url, progress=False)
  metadata = tmp_path / "bucket/ds" / versions.CONFIG_METADATA
  metadata.parent.mkdir()
  metadata.write_text("[1]")
  with pytest.raises(versions.DatasetNotPreparedError, match="^no published version of ds "):
    fetch.fetch(url, "ds", cache_dir=tmp_path / "cache", progress=False)
  metadata.write_text(" " * (versions.MAX_METADATA_BYTES + 1))
  with pytest.raises(bucket_lib.NotAnObjectError, match=f"^{url}/ds/{versions.CONFIG_METADATA} "
                     "holds more than"):
    fetch.fetch(url, "ds", cache_dir=tmp_path / "cache", progress=False)


def test_a_config_named_like_a_version_is_refused_and_never_replaces_that_version(tmp_path):
  """NAME/X.Y.Z is the folder of version X.Y.Z of NAME without a config: a config of that
  name (NAME/X.Y.Z:A.B.C) would share it, and fetching the version would delete the
  config's cached versions. Refused as a spec, as a bucket's default config, and left out
  of listings; the version itself is fetched and listed as ever."""
  import json
  small_version(tmp_path / "data", "ds/1.0.0:2.0.0")  # (made by hand: TFDS has no such check)
  plain = tmp_path / "data2/ds/1.0.0"
  plain.mkdir(parents=True)
  (plain / "dataset_info.json").write_text(json.dumps({
      "name": "ds", "fileFormat": "tfrecord", "splits": [{"name": "train", "shardLengths": ["2"]}]}))
  (plain / "features.json").write_text("{}")
  (plain / "ds-train.tfrecord-00000-of-00001").write_bytes(b"shard bytes" * 5)
  url, cache = str(tmp_path / "bucket"), tmp_path / "cache"
  with pytest.raises(versions.SpecError, match="named like a version .* did you mean ds:1.0.0"):
    publish.publish("ds/1.0.0:2.0.0", tmp_path / "data", url, progress=False)
  assert not (tmp_path / "bucket").exists()
  # a bucket that holds one anyway (written by another tool): not listed, not fetched
  publish.publish("ds/cfg:2.0.0", _renamed(tmp_path / "data", "1.0.0", "cfg"), url,
                  progress=False)
  (tmp_path / "bucket/ds/cfg").rename(tmp_path / "bucket/ds/1.0.0")
  publish.publish("ds:1.0.0", tmp_path / "data2", url, progress=False)
  assert versions.published_refs(bucket_lib.Bucket(url)) == [versions.Ref("ds", None, "1.0.0")]
  with pytest.raises(versions.SpecError, match="named like a version"):
    fetch.fetch(url, "ds/1.0.0:2.0.0", cache_dir=cache, progress=False)
  metadata = tmp_path / "bucket/ds" / versions.CONFIG_METADATA
  metadata.parent.mkdir()
  metadata.write_text('{"default_config_name": "1.0.0"}')
  with pytest.raises(versions.PublishError, match="the config '1.0.0' is named like a version"):
    fetch.fetch(url, "ds:2.0.0", cache_dir=cache, progress=False)
  metadata.unlink()
  fetched = fetch.fetch(url, "ds:1.0.0", cache_dir=cache, progress=False)
  assert versions.local_refs(fetched) == [versions.Ref("ds", None, "1.0.0")]
  local = tmp_path / "data2/ds/1.0.0/2.0.0"  # (a data dir holding both: the plain one listed)
  shutil.copytree(tmp_path / "data/ds/cfg/2.0.0", local)
  assert versions.local_refs(tmp_path / "data2") == [versions.Ref("ds", None, "1.0.0")]


def _renamed(data_dir, config, new_config):
  """`data_dir` with its config folder `config` of ds renamed `new_config`."""
  (data_dir / "ds" / config).rename(data_dir / "ds" / new_config)
  return data_dir


def test_an_empty_shard_template_is_tfds_default():
  """TFDS reads an empty filepathTemplate as its default: so do publish's and fetch's
  shard lists (an empty one named the shard "": published, then refused by fetch)."""
  info = {"name": "ds", "splits": [{"name": "train", "shardLengths": ["1", "2"],
                                    "filepathTemplate": ""}]}
  assert versions.split_files(info) == {"train": ["ds-train.tfrecord-00000-of-00002",
                                                  "ds-train.tfrecord-00001-of-00002"]}
