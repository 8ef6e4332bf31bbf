"""A version's page as a person sees it: rendered by headless Chromium (Debian's `chromium`,
installed by .ci/run; skipped with the reason where absent), every group and finding on it,
the changes against an older version with the pictures of both sides, bounded sizes, names
from the user's folder escaped, bad stored reports refused."""

import json
import pathlib
import re
import shutil
import subprocess

import numpy as np
import PIL.Image
import pytest

import cli_runs
from imagesets.building import class_folders_builder
from imagesets.class_folders import named_build
from imagesets.analysis import duplicates
from imagesets.analysis import image_quality
from imagesets.reports import report_page
from imagesets.reports import version_examples
from imagesets.reports import version_report
from imagesets_testing import photo_crops
from imagesets_testing import planted_copies
from imagesets_testing import quality_cases
from imagesets_testing import sample_images
from imagesets_testing.trees import write_tree

CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser")
                 if shutil.which(name)), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium package is not installed (.ci/run installs it "
    "with apt-get when it may)")
ODD_NAME = "cats/<img src=x onerror=alert(1)> & co.jpg"  # a name HTML would run


def _jpeg(pixels) -> bytes:
  return sample_images.encode(pixels, "JPEG", quality=90)


def _files(count: int = 60) -> dict[str, bytes]:
  """Crops of real scenes in three classes, each quality case planted once, an exact copy,
  a re-encoded copy under another label, and a file whose name is HTML."""
  crops = [p.pixels for p in photo_crops.pictures(count + 1, scenes=15, size=(240, 180),
                                                  share_in_bursts=0)]
  files = {f"{('boats', 'cats', 'rockets')[i % 3]}/img_{i:03d}.jpg": _jpeg(pixels)
           for i, pixels in enumerate(crops[:count])}
  photos = quality_cases.colour_photos()
  for (kind, make), name in zip(quality_cases.MAKERS.items(), photos):
    files[f"boats/{name}_{kind}.jpg"] = _jpeg(make(photos[name]))
  files["cats/copy_of_img_001.jpg"] = planted_copies.exact(crops[1])        # cats/img_001
  files["rockets/relabelled_img_000.jpg"] = planted_copies.jpeg_q60(crops[0])  # a boat
  files[ODD_NAME] = _jpeg(crops[count])
  return files


def _build(root, data_dir, version="1.0.0"):
  options = class_folders_builder.ClassFoldersConfig(name="pets")
  return named_build.build(root, "pets", version=version, data_dir=str(data_dir),
                           options=options)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("page")
  root = write_tree(tmp / "tree", _files())
  _build(root, tmp / "d")
  return tmp, pathlib.Path(root), tmp / "d" / "pets" / "1.0.0"


def _dom(path: pathlib.Path) -> str:
  result = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           "--dump-dom", path.as_uri()], capture_output=True, text=True,
                          timeout=120)
  assert result.returncode == 0, result.stderr[-2000:]
  return result.stdout


def _screenshot(path: pathlib.Path, out: pathlib.Path) -> np.ndarray:
  result = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           "--hide-scrollbars", "--window-size=1200,3000",
                           f"--screenshot={out}", path.as_uri()],
                          capture_output=True, text=True, timeout=120)
  assert result.returncode == 0 and out.exists(), result.stderr[-2000:]
  return np.asarray(PIL.Image.open(out).convert("RGB"))


def _text(dom: str) -> str:
  """The page's text as a browser shows it (tags dropped, entities decoded)."""
  import html  # pylint: disable=import-outside-toplevel
  return html.unescape(re.sub(r"<[^>]+>", " ", dom))


@needs_chromium
def test_the_page_built_with_the_version_shows_every_group_and_finding(built):
  tmp, _, version = built
  page = version / report_page.PAGE_FILE
  assert page.is_file()
  dom = _dom(page)
  text = _text(dom)
  report = json.loads((version / duplicates.REPORT_FILE).read_text())
  quality = json.loads((version / image_quality.QUALITY_FILE).read_text())
  assert len(report["groups"]) >= 2 and quality["findings"]
  for group in report["groups"]:
    for member in group["members"]:
      assert member["file_name"] in text, member
  found = {(f["kind"], f["file_name"]) for f in quality["findings"]}
  for kind in quality_cases.MAKERS:
    name = next(n for n in version_examples_names(version) if n.endswith(f"_{kind}.jpg"))
    assert (kind, name) in found
  for finding in quality["findings"]:
    assert finding["file_name"] in text
  assert "leak" in text or "conflict" in text
  # every picture is inlined: the page names nothing outside itself
  assert not re.search(r"""(src|href)=["']?(https?:|//|file:)""", dom)
  shot = _screenshot(page, tmp / "page.png")
  grey = shot.mean(axis=2)
  assert (grey < 200).mean() > 0.05 and grey.std() > 30  # not a blank page
  assert (shot.std(axis=2) > 20).mean() > 0.01  # colour: the thumbnails were drawn


def version_examples_names(version: pathlib.Path) -> list[str]:
  source = version_examples.Folder.at(version)
  return [name for name, _ in version_examples.numbered(source, "listing")]


def test_names_from_the_folder_are_escaped(built):
  _, _, version = built
  page = (version / report_page.PAGE_FILE).read_text()
  assert "<img src=x onerror" not in page
  assert "&lt;img src=x onerror=alert(1)&gt; &amp; co.jpg" in page


@needs_chromium
def test_report_against_an_older_version_shows_the_changes_with_both_sides(built, tmp_path):
  _, root, _ = built
  tree = tmp_path / "tree"
  shutil.copytree(root, tree)
  (tree / "boats" / "img_003.jpg").unlink()                                   # removed
  (tree / "cats" / "img_004.jpg").rename(tree / "rockets" / "img_004.jpg")    # relabelled
  (tree / "boats" / "img_006.jpg").write_bytes(_jpeg(np.flipud(np.asarray(    # changed
      PIL.Image.open(tree / "boats" / "img_006.jpg")))))
  (tree / "cats" / "new.jpg").write_bytes(_jpeg(quality_cases.colour_photos()["chelsea"]))
  data_dir = tmp_path / "d"
  shutil.copytree(built[2].parent, data_dir / "pets")  # 1.0.0 as built
  _build(str(tree), data_dir, version="1.1.0")
  out = tmp_path / "page.html"
  result = cli_runs.in_process("report", "pets:1.1.0", "--against", "pets:1.0.0",
                               "--data-dir", data_dir, "--out", out)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.startswith(f"{out}: ") and "MiB, made in" in result.stdout
  dom = _dom(out)
  text = _text(dom)
  for line in ("added: 1", "removed: 1", "changed: 1", "relabelled: 1"):
    assert line in text, line
  for name in ("boats/img_003.jpg", "rockets/img_004.jpg", "boats/img_006.jpg", "cats/new.jpg"):
    assert name in text
  # the removed example's picture is the older version's; a change shows both sides: each
  # the thumbnail of that side's stored bytes (class folders store the files as they are)
  def sources_of(kind: str) -> list[str]:
    section = dom[dom.index(f"{kind}: 1"):]
    section = section[:section.index('<div class="group">')] if '<div class="group">' in \
        section else section
    return re.findall(r'<img alt="[^"]*" src="([^"]+)"', section)

  assert sources_of("removed") == [report_page.thumbnail(
      (root / "boats" / "img_003.jpg").read_bytes())]
  assert sources_of("changed") == [
      report_page.thumbnail((root / "boats" / "img_006.jpg").read_bytes()),
      report_page.thumbnail((tree / "boats" / "img_006.jpg").read_bytes())]
  assert sources_of("added") == [report_page.thumbnail((tree / "cats" / "new.jpg").read_bytes())]


def test_sizes_stay_bounded_and_every_group_is_listed(tmp_path):
  """130 pictures each with an exact copy: every group named, pictures for the first
  GROUPS_PICTURED only, PER_GROUP each at most."""
  pictures = [p.pixels for p in photo_crops.pictures(130, seed=3, size=(96, 72),
                                                     share_in_bursts=0)]
  files = {}
  for i, pixels in enumerate(pictures):
    files[f"a/{i:03d}.jpg"] = planted_copies.original(pixels)
    files[f"b/{i:03d}_copy.jpg"] = planted_copies.exact(pixels)
  root = write_tree(tmp_path / "tree", files)
  options = class_folders_builder.ClassFoldersConfig(name="many")
  named_build.build(root, "many", data_dir=str(tmp_path / "d"), options=options)
  version = tmp_path / "d" / "many" / "1.0.0"
  page = (version / report_page.PAGE_FILE).read_text()
  report = json.loads((version / duplicates.REPORT_FILE).read_text())
  groups = page.split('<h2 id="duplicates">')[1].split('<h2 id="quality">')[0]
  assert groups.count('<div class="group">') == len(report["groups"]) > report_page.GROUPS_PICTURED
  assert groups.count("<img") <= report_page.GROUPS_PICTURED * report_page.PER_GROUP
  for group in report["groups"]:
    for member in group["members"]:
      assert member["file_name"] in page
  grid = page.split('<h2 id="examples">')[1].split('<h2 id="duplicates">')[0]
  assert grid.count("<img") <= 2 * report_page.GRID_PER_CLASS
  assert page.count("<img") <= (2 * report_page.GRID_PER_CLASS + report_page.GROUPS_PICTURED
                                * report_page.PER_GROUP
                                + len(image_quality.KINDS) * report_page.PER_KIND)


def test_a_tampered_stored_report_is_refused_naming_it(built, tmp_path):
  _, _, version = built
  copy = tmp_path / "pets" / "1.0.0"
  shutil.copytree(version, copy)
  (copy / image_quality.QUALITY_FILE).write_text(json.dumps({"findings": [{"kind": "evil"}]}))
  with pytest.raises(image_quality.BadQualityReport, match=rf"^{copy}/quality.json: not a "
                     "quality report"):
    version_report.content(version_examples.Folder.at(copy))
  # --recompute reads the images instead
  page = version_report.content(version_examples.Folder.at(copy), recompute=True)
  assert page.findings and "computed from the records" in page.facts[0]


def test_a_keras_pixel_cache_has_no_page_and_says_why(tmp_path):
  pytest.importorskip("keras")
  from imagesets.class_folders import from_directory  # pylint: disable=import-outside-toplevel
  root = write_tree(tmp_path / "tree", {f"{c}/{i}.jpg": _jpeg(p.pixels) for i, (c, p) in
                                        enumerate(zip("abab", photo_crops.pictures(4)))})
  from_directory.image_dataset_from_directory(root, image_size=(32, 32), batch_size=2,
                                              cache_dir=str(tmp_path / "cache"), verbose=False)
  versions = list((tmp_path / "cache").rglob("dataset_info.json"))
  assert versions and not list((tmp_path / "cache").rglob(report_page.PAGE_FILE))
  with pytest.raises(ValueError, match="raw pixels of keras. one call"):
    version_report.content(version_examples.Folder.at(versions[0].parent))


def test_a_stored_quality_report_that_does_not_fit_the_version_is_refused(built, tmp_path):
  _, _, version = built
  copy = tmp_path / "pets" / "1.0.0"
  shutil.copytree(version, copy)
  stored = json.loads((copy / image_quality.QUALITY_FILE).read_text())
  finding = {"kind": "dark", "split": "nowhere", "file_name": "x.jpg", "label": None,
             "score": 0.1}
  (copy / image_quality.QUALITY_FILE).write_text(json.dumps(
      stored | {"findings": stored["findings"] + [finding]}))
  with pytest.raises(image_quality.BadQualityReport, match="split 'nowhere' is not one of"):
    version_report.content(version_examples.Folder.at(copy))
  many = [finding | {"split": "train", "file_name": f"{i}.jpg"} for i in range(100_000)]
  (copy / image_quality.QUALITY_FILE).write_text(json.dumps(stored | {"findings": many}))
  with pytest.raises(image_quality.BadQualityReport, match="100000 findings for"):
    version_report.content(version_examples.Folder.at(copy))


def test_a_stored_report_naming_examples_the_version_does_not_hold_is_refused(built, tmp_path):
  # The page pictured the example under the report's label (a picture of a cat captioned
  # "dog"), and a member that is not in the version as "not shown".
  _, _, version = built
  copy = tmp_path / "pets" / "1.0.0"
  shutil.copytree(version, copy)
  stored = json.loads((copy / duplicates.REPORT_FILE).read_text())
  member = stored["groups"][0]["members"][0]
  other = "dogs"  # (no class of the version)
  for edited, what in ((member | {"label": other}, f"is labelled '{member['label']}' there, "
                        f"not '{other}'"),
                       (member | {"file_name": "cat/none.jpg"}, "is not in the version")):
    groups = [{**stored["groups"][0], "members": [edited, *stored["groups"][0]["members"][1:]]},
              *stored["groups"][1:]]
    (copy / duplicates.REPORT_FILE).write_text(json.dumps(stored | {"groups": groups}))
    with pytest.raises(duplicates.BadReport, match=re.escape(
        f"{copy}/duplicates.json: not a report of this version ({member['split']}/"
        f"{edited['file_name']} {what}); run imagesets report SPEC --recompute")):
      version_report.content(version_examples.Folder.at(copy))
  (copy / duplicates.REPORT_FILE).write_text(json.dumps(stored))
  quality = json.loads((copy / image_quality.QUALITY_FILE).read_text())
  finding = quality["findings"][0]
  (copy / image_quality.QUALITY_FILE).write_text(json.dumps(
      quality | {"findings": [finding | {"label": "nothing"}, *quality["findings"][1:]]}))
  with pytest.raises(image_quality.BadQualityReport, match=re.escape(
      f"{copy}/quality.json: not a report of this version ({finding['split']}/"
      f"{finding['file_name']} is labelled '{finding['label']}' there, not 'nothing')")):
    version_report.content(version_examples.Folder.at(copy))
  (copy / image_quality.QUALITY_FILE).write_text(json.dumps(quality))
  assert version_report.content(version_examples.Folder.at(copy)).groups  # (as stored: read)


def test_the_grid_shows_the_first_classes_by_name_and_holds_no_others(tmp_path):
  classes = report_page.GRID_CLASSES + 5
  pixels = [p.pixels for p in photo_crops.pictures(classes, seed=4, size=(64, 48),
                                                   share_in_bursts=0)]
  root = write_tree(tmp_path / "tree", {f"c{c:03d}/{i}.jpg": _jpeg(np.roll(pixels[c], i, 1))
                                        for c in range(classes) for i in range(2)})
  options = class_folders_builder.ClassFoldersConfig(name="wide", split_proportions={
      "train": 1.0})
  named_build.build(root, "wide", data_dir=str(tmp_path / "d"), options=options)
  page = version_report.content(version_examples.Folder.at(tmp_path / "d" / "wide" / "1.0.0"))
  assert list(page.grid) == [f"c{c:03d}" for c in range(report_page.GRID_CLASSES)]
  html = report_page.render(page)
  assert f"the first {report_page.GRID_CLASSES} classes by name" in html
  assert len(page.counts["train"]) == classes and "c064" in html  # (in the chart's table)


def test_a_rebuild_writes_the_same_page_byte_for_byte(built, tmp_path):
  """The page is part of the version: publishing compares every file, so a rebuild of the
  same tree must give the same bytes (no time or path on the page)."""
  _, root, version = built
  _build(str(root), tmp_path / "again")
  again = tmp_path / "again" / "pets" / "1.0.0"
  for name in (report_page.PAGE_FILE, image_quality.QUALITY_FILE, "README.md"):
    assert (again / name).read_bytes() == (version / name).read_bytes(), name


def test_a_page_that_cannot_be_written_leaves_no_version(tmp_path, monkeypatch):
  """The page is written before the rename that commits the version: no committed version
  is ever without its page."""
  root = write_tree(tmp_path / "tree", {f"{c}/{i}.jpg": _jpeg(p.pixels) for i, (c, p) in
                                        enumerate(zip("ab" * 20, photo_crops.pictures(40)))})

  def broken(page, path):
    raise OSError(f"{path}: disk full")

  monkeypatch.setattr(version_report, "write", broken)
  with pytest.raises(OSError, match="disk full"):
    _build(root, tmp_path / "d")
  assert not list((tmp_path / "d").rglob("dataset_info.json"))
  monkeypatch.undo()
  _build(root, tmp_path / "d")  # (the next build is not refused: nothing was left)
  assert (tmp_path / "d" / "pets" / "1.0.0" / report_page.PAGE_FILE).is_file()


def test_from_a_bucket_the_page_is_drawn_here_and_streaming_skips_the_stored_one(
    built, tmp_path):
  from imagesets.publishing import publish  # pylint: disable=import-outside-toplevel
  from imagesets.reading import sources  # pylint: disable=import-outside-toplevel
  _, _, version = built
  bucket = (tmp_path / "bucket").as_uri()
  publish.publish("pets:1.0.0", version.parent.parent, bucket, progress=False)
  source = sources.open_version("pets:1.0.0", bucket)
  assert not (source.folder / report_page.PAGE_FILE).exists()  # (nothing reads it to train)
  assert (source.folder / image_quality.QUALITY_FILE).is_file()
  out = tmp_path / "page.html"
  result = cli_runs.in_process("report", f"{bucket}/pets:1.0.0", "--out", out)
  assert result.returncode == 0, result.stderr[-3000:]
  assert out.read_bytes() == (version / report_page.PAGE_FILE).read_bytes()


def test_names_that_are_not_utf8_are_shown_not_fatal():
  page = report_page.Content(
      title="t", facts=[], counts={"train": {"c": 1}}, grid={},
      groups=[report_page.Listed("g", [report_page.Picture("train", "\udce9vil.jpg", "c")],
                                 ["train/\udce9vil.jpg"])],
      groups_summary="", findings=[], findings_summary="")
  html = report_page.render(page)
  html.encode("utf-8")  # (a surrogate left in would fail here)
  assert "\\udce9vil.jpg" in html


def test_a_build_without_a_record_index_reads_only_the_records_its_page_pictures(
    tmp_path, monkeypatch):
  """A class-folder build registered by config (no record index kept) draws its page from
  the records it listed as it wrote them (the pictured ones are read, no other) and from its
  reports as it holds them (not read back); the page is the one drawn from reading the whole
  version and its stored reports back."""
  from imagesets.building import record_index
  from imagesets.class_folders import class_folders_dataset_builder as class_folders
  files = _files(90)
  root = write_tree(tmp_path / "tree", files)
  reads, whole = [], []
  monkeypatch.setattr(record_index, "_tfrecord_at", lambda *a, _at=record_index._tfrecord_at:
                      reads.append(a) or _at(*a))
  monkeypatch.setattr(version_examples, "_rows", lambda *a, _rows=version_examples._rows, **k:
                      whole.append(a) or _rows(*a, **k))
  builder = class_folders.Builder(config=class_folders.ClassFoldersConfig(
      name="plain", root=str(root)), data_dir=str(tmp_path / "d"))
  read_reports = []
  monkeypatch.setattr(duplicates, "read_stored", lambda *a, _read=duplicates.read_stored, **k:
                      read_reports.append(a) or _read(*a, **k))
  taken, waited = [], []  # (pictures handed to the threads; how many when one was waited on)
  monkeypatch.setattr(version_report._Pass, "_take", lambda self, pending, pictured, *a,
                      _take=version_report._Pass._take, **k: taken.extend(pictured) or
                      _take(self, pending, pictured, *a, **k))
  monkeypatch.setattr(version_report._Pass, "_picture", lambda self, *a,
                      _picture=version_report._Pass._picture: waited.append(len(taken)) or
                      _picture(self, *a))
  made, offered = [], []  # (the `Located`s made; the grid's candidates)
  monkeypatch.setattr(version_examples, "Located", lambda *a, _made=version_examples.Located:
                      made.append(a[:2]) or _made(*a))
  monkeypatch.setattr(version_report._Pass, "_offer", lambda self, label, key, *a,
                      _offer=version_report._Pass._offer: offered.append(key) or
                      _offer(self, label, key, *a))
  builder.download_and_prepare()
  assert not builder.RECORD_INDEX and not whole and not read_reports
  assert 0 < len(reads) == len(set(reads)) < len(files)  # (each pictured record read once)
  # (a `Located` is made once for each example pictured or offered to the grid, no other)
  assert sorted(made) == sorted(set(taken + offered)) and len(made) < len(files)
  # (a catalog's examples read their bytes on the threads: the catalog is read through
  # while they are pictured, none waited on before)
  assert len(taken) > version_report._IN_FLIGHT and set(waited) == {len(taken)}
  folder = pathlib.Path(builder.data_dir)
  read_back = version_report.content(version_examples.Folder.at(folder))
  assert (folder / report_page.PAGE_FILE).read_text() == report_page.render(read_back)


def test_a_build_in_a_format_whose_records_are_not_read_here_draws_its_page_from_the_version(
    tmp_path):
  """Parquet shards: the page reads the version through TFDS (the records' places in a shard
  are known for TFRecord and ArrayRecord only), and the build completes."""
  from imagesets.class_folders import class_folders_dataset_builder as class_folders
  root = write_tree(tmp_path / "tree", {f"{c}/{i}.jpg": _jpeg(p.pixels) for i, (c, p) in
                                        enumerate(zip("ab" * 30, photo_crops.pictures(60)))})
  builder = class_folders.Builder(config=class_folders.ClassFoldersConfig(
      name="parquet", root=str(root)), data_dir=str(tmp_path / "d"), file_format="parquet")
  builder.download_and_prepare()
  folder = pathlib.Path(builder.data_dir)
  assert list(folder.glob("*.parquet-*")) and (folder / report_page.PAGE_FILE).is_file()
  assert builder._page_catalog(folder) is None  # pylint: disable=protected-access


def test_a_class_folders_builder_that_makes_its_own_splits_says_how_its_keys_name_examples():
  """A subclass with its own _split_generators (oxford17: labels from image numbers) does
  not inherit KEYS_NAME_EXAMPLES: its page reads the version unless it says otherwise."""
  from imagesets.building import class_folders_builder as cfb
  from imagesets.oxford17 import oxford17_dataset_builder as oxford17

  class OwnSplits(cfb.ClassFoldersBuilder, skip_registration=True):
    def _split_generators(self, dl_manager):
      raise NotImplementedError

  class SaysSo(OwnSplits, skip_registration=True):
    KEYS_NAME_EXAMPLES = True

  assert cfb.ClassFoldersBuilder.KEYS_NAME_EXAMPLES and not OwnSplits.KEYS_NAME_EXAMPLES
  assert SaysSo.KEYS_NAME_EXAMPLES and not oxford17.Builder.KEYS_NAME_EXAMPLES


def test_page_pictures_made_on_threads_are_those_made_one_at_a_time(built, monkeypatch):
  """Thumbnails are made on threads, a few examples held at a time: the page is the one
  made on one thread, and no example is made into a picture twice."""
  _, _, version = built
  made = []
  monkeypatch.setattr(version_report, "_thumbnail", lambda example, _make=version_report._thumbnail:
                      made.append((example.split, example.file_name)) or _make(example))
  monkeypatch.setattr(version_report, "_IN_FLIGHT", 2)
  threaded = report_page.render(version_report.content(version_examples.Folder.at(version)))
  assert made and len(made) == len(set(made))
  monkeypatch.setattr(version_report, "_MAKERS", 1)
  monkeypatch.setattr(version_report, "_IN_FLIGHT", 0)
  assert report_page.render(version_report.content(version_examples.Folder.at(version))) == (
      threaded)


def test_a_catalog_example_of_several_classes_is_read_and_pictured_once():
  """A build's catalog (`version_examples.Catalog`): an example offered to the grid under
  each class it shows, and pictured in a group, is located, read and pictured once."""
  import collections
  import concurrent.futures
  reads, located, pictured = collections.Counter(), collections.Counter(), []
  names = [f"img{i}.jpg" for i in range(5)]
  data = {name: _jpeg(p.pixels) for name, p in zip(names, photo_crops.pictures(5))}

  def locate(position):
    name = names[position]
    located[name] += 1
    return version_examples.Located(
        "train", name, None, lambda: reads.update([name]) or data[name], None, ("cat", "dog"))

  catalog = version_examples.Catalog(names, [None] * 5, [("cat", "dog")] * 5, locate)
  read = version_report._Pass({("train", names[0])},
                              picture=lambda example: pictured.append(example.file_name)
                              or version_report._thumbnail(example))

  class Bar:
    def update(self, _):
      pass

  with concurrent.futures.ThreadPoolExecutor(2) as makers:
    read._read_catalog({"train": catalog}, True, makers, Bar())
  grid = read.grid_pictures()
  assert {label: len(pictures) for label, pictures in grid.items()} == {"cat": 5, "dog": 5}
  assert located == reads == collections.Counter(names) and sorted(pictured) == names
