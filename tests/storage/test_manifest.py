"""manifest: a manifest read from a bucket is untrusted: the type of every field, and each
file's name, size and SHA-256, are checked, and its size is capped, before any is used;
anything else is one line naming it."""

import json

import pytest

from publish_helpers import small_version
from imagesets.publishing import publish
from imagesets.storage import bucket as bucket_lib
from imagesets.storage import fetch
from imagesets.storage import manifest as manifest_lib
from imagesets.storage import versions

SPEC, FOLDER = "ds/cfg:1.0.0", "ds/cfg/1.0.0"


def published(tmp_path):
  """(url, manifest path, manifest as parsed) of SPEC published to a folder bucket."""
  small_version(tmp_path / "data")
  url = str(tmp_path / "bucket")
  publish.publish(SPEC, tmp_path / "data", url, progress=False)
  path = tmp_path / "bucket" / FOLDER / versions.MANIFEST
  return url, path, json.loads(path.read_bytes())


def _sized(manifest, size):
  return {**manifest, "files": {name: {**entry, "size": size}
                                for name, entry in manifest["files"].items()}}


FORGED = {
    "files as pairs": lambda m: {**m, "files": [list(item) for item in m["files"].items()]},
    "a size that is true": lambda m: _sized(m, True),
    "splits as a list": lambda m: {**m, "splits": list(m["splits"])},
    "a count as text": lambda m: {**m, "splits": {"train": "2"}},
    "published_at as a number": lambda m: {**m, "published_at": 12345},
    "dataset as a list": lambda m: {**m, "dataset": ["ds"]},
    "an array": lambda m: [m],
}


@pytest.mark.parametrize("forge", FORGED.values(), ids=FORGED)
def test_a_field_of_the_wrong_type_is_one_line(forge, tmp_path):
  _, _, manifest = published(tmp_path)
  with pytest.raises(versions.PublishError, match="^where: the manifest .*tell the publisher"):
    manifest_lib.Manifest.from_bytes(json.dumps(forge(manifest)).encode(), "where")


def test_json_nested_deeper_than_the_parser_goes_is_one_line():
  with pytest.raises(versions.PublishError, match="^where: the manifest is unreadable "
                     r"\(RecursionError"):
    manifest_lib.Manifest.from_bytes(b"[" * 200_000 + b"]" * 200_000, "where")


def test_a_forged_manifest_fails_its_own_fetch_in_one_line_and_no_other_version(tmp_path):
  """Files as a list of pairs (once kept as they were, for an AttributeError later): fetch
  says so in one line, and the next version publishes, uploading what it cannot copy."""
  url, path, manifest = published(tmp_path)
  path.write_text(json.dumps(FORGED["files as pairs"](manifest)))
  with pytest.raises(versions.PublishError, match=f"^{url}/{FOLDER}: the manifest has no "
                     "valid files: refused"):
    fetch.fetch(url, SPEC, cache_dir=tmp_path / "cache", progress=False)
  small_version(tmp_path / "data", "ds/cfg:1.0.1")
  said = []
  result = publish.publish("ds/cfg:1.0.1", tmp_path / "data", url, progress=False,
                           log=said.append)
  assert result.status == "published" and result.copied == 0
  assert any(line.startswith("not copying from ds/cfg:1.0.0: ") for line in said), said


def test_a_manifest_larger_than_any_is_refused_unread(tmp_path, monkeypatch):
  url, path, manifest = published(tmp_path)
  path.write_bytes(json.dumps(manifest).encode() + b" " * (1 << 20))  # (valid JSON)
  monkeypatch.setattr(manifest_lib, "MAX_BYTES", 64 << 10)
  read, chunks = [], bucket_lib._chunks

  def counted(source, limit):
    for chunk in chunks(source, limit):
      read.append(len(chunk))
      yield chunk
  monkeypatch.setattr(bucket_lib, "_chunks", counted)
  with pytest.raises(bucket_lib.NotAnObjectError, match=f"^{url}/{FOLDER}/{versions.MANIFEST} "
                     "holds more than 65536 bytes"):
    fetch.fetch(url, SPEC, cache_dir=tmp_path / "cache", progress=False)
  assert sum(read) == (64 << 10) + 1


def test_a_name_that_is_a_file_and_a_folder_of_others_is_one_line(tmp_path):
  """Files "a" and "a/b" cannot both be in a folder: fetched, the second made a raw
  FileExistsError (or NotADirectoryError) mid-download; refused as it is read."""
  url, path, manifest = published(tmp_path)
  entry = next(iter(manifest["files"].values()))
  forged = {**manifest, "files": {**manifest["files"], "extra": entry, "extra/x/y": entry}}
  path.write_text(json.dumps(forged))
  with pytest.raises(versions.PublishError, match=f"^{url}/{FOLDER}: the manifest names "
                     "'extra' as a file and as a folder of others: refused"):
    fetch.fetch(url, SPEC, cache_dir=tmp_path / "cache", progress=False)
  assert manifest_lib.Manifest.from_bytes(json.dumps({**manifest, "files": {
      **manifest["files"], "extra": entry, "extras/y": entry}}).encode(), "w").files["extra"]


@pytest.mark.parametrize("names, said", [
    (("extra.json", "Extra.JSON"), "'Extra.JSON' and 'extra.json', one file"),
    (("extra", "EXTRA/y"), "'extra' and 'EXTRA'/..., a file and a folder")])
def test_names_one_file_where_case_is_not_told_apart_are_one_line(tmp_path, names, said):
  """On macOS and Windows (case-insensitive by default) a fetch would write both names to
  one file, and the copy would never check: refused where the manifest is read, and by
  publish where a (case-sensitive) version folder holds them."""
  url, path, manifest = published(tmp_path)
  entry = next(iter(manifest["files"].values()))
  path.write_text(json.dumps({**manifest, "files": {**manifest["files"],
                                                    **{name: entry for name in names}}}))
  with pytest.raises(versions.PublishError, match=f"^{url}/{FOLDER}: the manifest names "
                     f"{said} where case is not told apart: refused"):
    fetch.fetch(url, SPEC, cache_dir=tmp_path / "cache", progress=False)
  version = tmp_path / "data" / FOLDER
  for name in names:
    (version / name).parent.mkdir(parents=True, exist_ok=True)
    (version / name).write_text("x")
  with pytest.raises(versions.PublishError, match=f"holds {said} where case is not told "
                     r"apart \(macOS, Windows\): a copy fetched there would never be whole"):
    publish.publish(SPEC, tmp_path / "data", str(tmp_path / "other"), progress=False)


def test_names_are_folded_as_macos_and_windows_fold_them():
  clash = manifest_lib.case_clash
  assert clash(["straße.json", "strasse.json"]) is None   # (neither folds ß to ss)
  assert clash(["\u00e9.json", "e\u0301.json"])            # (macOS: one name, NFC or NFD)
  assert clash(["a/b", "a/c", "A/d"]) is None              # (one folder: no file twice)
  assert clash(["a/b/c", "A/B"]) == ("'A/B' and 'a/b'/..., a file and a folder where case "
                                     "is not told apart")
