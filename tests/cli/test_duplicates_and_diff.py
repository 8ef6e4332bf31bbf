"""`imagesets duplicates SPEC` and `imagesets diff OLD NEW` on local and published versions."""

import hashlib
import json
import os
import signal
import sys

import pytest

from imagesets.building import class_folders_builder
from imagesets.building import splits as split_rules
from imagesets.class_folders import named_build
from imagesets.cli import main as cli
from imagesets.publishing import publish
from imagesets.reports import report_page
from imagesets_testing import photo_crops
from imagesets_testing import planted_copies
from imagesets_testing import sample_images
from imagesets_testing.trees import write_tree


def _files():
  photos = {f"{label}/{i}.jpg": sample_images.photo(80 + 3 * i, 100, seed=90 + i)
            for i, label in enumerate(["cat", "dog"] * 5)}
  files = {name: planted_copies.original(pixels) for name, pixels in photos.items()}
  files["dog/copy.png"] = planted_copies.png(photos["cat/0.jpg"])  # label conflict
  return files


def _renamed(name: str) -> str:
  """Another name for `name` that the seeded split hash keeps in its split."""
  stem = name.removesuffix(".jpg")
  return next(f"{stem}_renamed_{n}.jpg" for n in range(100)
              if split_rules.split_of(f"{stem}_renamed_{n}.jpg", split_rules.DEFAULT_PROPORTIONS)
              == split_rules.split_of(name, split_rules.DEFAULT_PROPORTIONS))


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
  """pets 1.0.0 and 1.1.0 (cat/2.jpg removed, dog/3.jpg edited, cat/4.jpg relabelled as
  dog/4b.jpg, cat/6.jpg renamed in its split, cat/new.jpg added); duplicates.json removed
  from 1.1.0 (an older build)."""
  base = tmp_path_factory.mktemp("kyd")
  data_dir = base / "tfds"
  files = _files()
  options = class_folders_builder.ClassFoldersConfig(name="pets")
  named_build.build(write_tree(base / "v1", files), "pets", version="1.0.0",
                    data_dir=str(data_dir), options=options)
  files.pop("cat/2.jpg")
  files["dog/3.jpg"] = sample_images.jpeg(89, 100, seed=500)
  files["dog/4b.jpg"] = files.pop("cat/4.jpg")
  files["cat/new.jpg"] = sample_images.jpeg(70, 100, seed=501)
  files[_renamed("cat/6.jpg")] = files.pop("cat/6.jpg")
  named_build.build(write_tree(base / "v2", files), "pets", version="1.1.0",
                    data_dir=str(data_dir), options=options)
  (data_dir / "pets" / "1.1.0" / "duplicates.json").unlink()
  return data_dir


def test_duplicates_reads_the_stored_report_or_computes_it(versions, capsys):
  assert cli.main(["duplicates", "pets:1.0.0", "--data-dir", str(versions), "--json"]) == 0
  stored = json.loads(capsys.readouterr().out)
  assert [[(m["file_name"], m["label"]) for m in g["members"]] for g in stored["groups"]] == [
      [("cat/0.jpg", "cat"), ("dog/copy.png", "dog")]]
  assert stored["groups"][0]["kind"] == "exact" and stored["groups"][0]["label_conflict"]
  assert cli.main(["duplicates", "pets:1.0.0", "--data-dir", str(versions), "--json",
                   "--recompute"]) == 0
  assert json.loads(capsys.readouterr().out)["groups"] == stored["groups"]
  assert cli.main(["duplicates", "pets:1.1.0", "--data-dir", str(versions)]) == 0  # computed
  out = capsys.readouterr().out.splitlines()
  assert out[0] == "pets/1.1.0: duplicates: 1 group(s) (1 exact, 0 near) among 11 images; " \
                   "1 cross splits (leakage): train/cat/0.jpg = validation/dog/copy.png; " \
                   "1 label conflict(s)"
  assert out[1] == "exact (LEAK, LABEL CONFLICT):"
  spec = ["duplicates", "pets:1.0.0", "--data-dir", str(versions), "--fail-on"]
  assert cli.main([*spec, "leakage"]) == int(stored["groups"][0]["cross_split"])  # for CI
  assert cli.main([*spec, "conflict"]) == 1 and cli.main([*spec, "any"]) == 1
  assert cli.main(["duplicates", "pets:1.1.0", "--data-dir", str(versions), "--json",
                   "--fail-on", "leakage"]) == 1


def test_diff_exit_status_summary_and_json(versions, capsys, monkeypatch):
  args = ["--data-dir", str(versions)]
  assert cli.main(["diff", "pets:1.0.0", "pets:1.0.0", *args]) == 0
  assert "same examples; 11 unchanged" in capsys.readouterr().out
  assert cli.main(["diff", "pets:1.0.0", "pets:1.1.0", *args, "--show", "2"]) == 1
  out = capsys.readouterr().out
  assert out.startswith("pets/1.0.0 -> pets/1.1.0: 1 added, 1 removed, 1 changed, ")
  assert ", 1 renamed, " in out.splitlines()[0]
  assert f"    renamed: {_renamed('cat/6.jpg')} [cat] (was cat/6.jpg)" in out
  assert cli.main(["diff", "pets:1.0.0", "pets:1.1.0", *args, "--json"]) == 1
  splits = json.loads(capsys.readouterr().out)["splits"]
  kinds = {kind: [item["file_name"] for split in splits.values() for item in split[kind]]
           for kind in ("added", "removed", "changed", "relabelled", "renamed", "moved_in")}
  assert kinds["added"] == ["cat/new.jpg"] and kinds["removed"] == ["cat/2.jpg"]
  assert kinds["changed"] == ["dog/3.jpg"]
  assert kinds["relabelled"] == ["dog/4b.jpg"]  # (and moved_in too if its new path hashes elsewhere)
  assert kinds["moved_in"] in ([], ["dog/4b.jpg"])
  assert kinds["renamed"] == [_renamed("cat/6.jpg")]
  assert [item["old_file_name"] for split in splits.values() for item in split["renamed"]] == [
      "cat/6.jpg"]
  assert sum(split["unchanged"] for split in splits.values()) == 7
  assert cli.main(["diff", f"{versions}/pets:1.0.0", "pets:1.0.0", *args]) == 0  # a full path
  monkeypatch.chdir(versions.parent)  # a relative DATA_DIR/NAME:VERSION
  assert cli.main(["diff", f"{versions.name}/pets:1.0.0", "pets:1.0.0", *args]) == 0
  capsys.readouterr()
  assert cli.main(["diff", "pets:1.0.0", "pets:9.0.0", *args]) == 3  # (not there)
  assert "9.0.0" in capsys.readouterr().err


def test_output_to_a_reader_that_left_stops_quietly(versions, capsys, monkeypatch):
  # `imagesets diff OLD NEW | head`: the pipe closes while we print.
  read_end, write_end = os.pipe()
  os.close(read_end)
  monkeypatch.setattr(sys, "stdout", os.fdopen(write_end, "w"))
  status = cli.main(["diff", "pets:1.0.0", "pets:1.1.0", "--data-dir", str(versions)])
  assert status == 128 + signal.SIGPIPE
  err = capsys.readouterr().err  # (the progress lines only)
  assert "error" not in err.lower() and "Traceback" not in err


def test_diff_and_duplicates_of_a_published_version(versions, tmp_path, capsys, monkeypatch):
  monkeypatch.setenv("IMAGESETS_CACHE", str(tmp_path / "cache"))
  team = tmp_path / "team"
  publish.publish("pets:1.0.0", versions, str(team), progress=False)
  url = f"file://{team}"
  assert cli.main(["diff", f"{url}/pets:1.0.0", "pets:1.0.0", "--data-dir", str(versions)]) == 0
  assert "same examples; 11 unchanged" in capsys.readouterr().out
  assert cli.main(["duplicates", "pets:1.0.0", "--data-dir", url, "--json"]) == 0
  assert len(json.loads(capsys.readouterr().out)["groups"]) == 1


def test_diff_says_a_photo_replaced_under_its_name_changed_when_it_moved_split(tmp_path,
                                                                               capsys):
  """Under content split keys new bytes pick the split anew: the replaced photo is still
  said to have changed (and moved), not removed from one split and added to another."""
  crops = [data for _, data in photo_crops.jpegs(40, seed=3)]
  proportions = split_rules.DEFAULT_PROPORTIONS

  def split(data: bytes) -> str:
    return split_rules.split_of(split_rules.content_key(hashlib.sha256(data).hexdigest()),
                                proportions)
  files = {f"{['cat', 'dog'][i % 2]}/{i}.jpg": data for i, data in enumerate(crops[:10])}
  old = files["cat/0.jpg"]
  new = next(data for data in crops[10:] if split(data) != split(old))
  options = class_folders_builder.ClassFoldersConfig(name="pets", split_key="content")
  data_dir = tmp_path / "tfds"
  named_build.build(write_tree(tmp_path / "v1", files), "pets", version="1.0.0",
                    data_dir=str(data_dir), options=options)
  named_build.build(write_tree(tmp_path / "v2", {**files, "cat/0.jpg": new}), "pets",
                    version="1.1.0", data_dir=str(data_dir), options=options)
  args = ["pets:1.0.0", "pets:1.1.0", "--data-dir", str(data_dir)]
  assert cli.main(["diff", *args]) == 1
  assert capsys.readouterr().out.startswith(
      "pets/1.0.0 -> pets/1.1.0: 0 added, 0 removed, 1 changed (1 of them also moved), "
      "0 relabelled, 0 renamed, 1 moved between splits; 9 unchanged")
  assert cli.main(["diff", *args, "--json"]) == 1
  splits = json.loads(capsys.readouterr().out)["splits"]
  assert splits[split(new)]["changed"] == [
      {"file_name": "cat/0.jpg", "label": "cat", "from": split(old)}]
  assert splits[split(old)]["moved_out"] == [
      {"file_name": "cat/0.jpg", "label": "cat", "to": split(new), "changed": True}]
  # The page pictures both sides: the old one from the split it left.
  page = tmp_path / "page.html"
  assert cli.main(["report", "pets:1.1.0", "--against", "pets:1.0.0", "--data-dir",
                   str(data_dir), "--out", str(page)]) == 0
  html = page.read_text()
  changed = html[html.index("changed: 1"):]
  changed = changed[:changed.index("<h3", 1)] if "<h3" in changed[1:] else changed
  assert report_page.thumbnail(old) in changed and report_page.thumbnail(new) in changed
