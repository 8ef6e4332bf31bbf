"""versions: a bucket's .config/metadata.json is untrusted: what is no JSON object names no
default config, and one larger than any is refused unread."""

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
