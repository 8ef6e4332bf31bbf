"""listing: `imagesets list BUCKET` shows what a bucket holds, its names and manifests read
as untrusted: shown escaped, and a damaged manifest is its version's row and one line
below the table, the other versions still listed."""

import json
import shutil

import cli_runs
from publish_helpers import small_version
from imagesets.publishing import listing
from imagesets.publishing import publish
from imagesets.storage import versions


def test_a_buckets_names_are_shown_escaped_and_a_damaged_manifest_is_one_row(tmp_path):
  url, folder = str(tmp_path / "bucket"), tmp_path / "bucket/ds/cfg"
  for spec in ("ds/cfg:1.0.0", "ds/cfg:1.0.1"):
    small_version(tmp_path / "data", spec)
    publish.publish(spec, tmp_path / "data", url, progress=False)
  manifest = json.loads((folder / "1.0.0" / versions.MANIFEST).read_bytes())
  manifest.update(published_at="\x1b]0;title\x07\x1b[2J", splits={"train\x1b[8m": 2})
  (folder / "1.0.0" / versions.MANIFEST).write_text(json.dumps(manifest))
  (folder / "1.0.1" / versions.MANIFEST).write_text(json.dumps({**manifest,
                                                                "published_at": 12345}))
  shutil.copytree(folder / "1.0.0", tmp_path / "bucket/ev\x1b[41mil/cfg/1.0.0")
  assert [item.damage != "" for item in listing.list_published(url)[0]] == [
      False, True, False]
  listed = cli_runs.in_process("list", url)
  assert listed.returncode == 0, listed.stderr
  assert "\x1b" not in listed.stdout + listed.stderr and "\x07" not in listed.stdout
  _, escaped, damaged, evil, why = listed.stdout.strip().splitlines()
  assert "train\\x1b[8m=2" in escaped and escaped.endswith("\\x1b]0;title\\x07\\x1b[2J")
  assert damaged.split()[:3] == ["ds", "cfg", "1.0.1"]
  assert damaged.split()[3:] == ["-", "-", "damaged", "(see", "below)"]
  assert evil.startswith("ev\\x1b[41mil ")
  assert why == (f"(damaged, not usable: ds/cfg:1.0.1: {url}/ds/cfg/1.0.1: the manifest has "
                 "no valid published_at: refused; it is damaged or forged, tell the "
                 "publisher; to repair it, delete its folder and publish it again)")
