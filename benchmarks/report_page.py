"""What a version's page costs and weighs, for versions of N images.

    python benchmarks/report_page.py [--images 3000,100000] [--size 320x240]
                                     [--work /tmp/report_page_bench]

For each N: a tree of N JPEGs (quality 90) of real scenes (imagesets_testing.photo_crops:
crops and burst frames of the 15 real photos, `--size`), in 10 classes, made once and kept
under --work; built with `imagesets build`'s code (named_build, leakage "warn": every image
fingerprinted, report, card and page written), timed; then the page alone, made again from
the built version in this process (`version_report.content` + `write`: one read of the
version, thumbnails), timed, with its size, its pictures and its sections' counts.
"""

import argparse
import pathlib
import re
import shutil
import time

from imagesets.building import class_folders_builder
from imagesets.class_folders import named_build
from imagesets.reports import report_page
from imagesets.reports import version_examples
from imagesets.reports import version_report
from imagesets_testing import photo_crops
from imagesets_testing import sample_images

CLASSES = 10


def _tree(root: pathlib.Path, count: int, size: tuple[int, int]) -> None:
  done = root / ".complete"
  if done.exists():
    return
  shutil.rmtree(root, ignore_errors=True)
  for c in range(CLASSES):
    (root / f"class_{c}").mkdir(parents=True)
  for i, picture in enumerate(photo_crops.pictures(count, scenes=15, size=size)):
    (root / f"class_{i % CLASSES}" / f"{i:06d}.jpg").write_bytes(
        sample_images.encode(picture.pixels, "JPEG", quality=90))
  done.touch()


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--images", default="3000,100000")
  parser.add_argument("--size", default="320x240")
  parser.add_argument("--work", default="/tmp/report_page_bench")
  args = parser.parse_args()
  size = tuple(int(v) for v in args.size.split("x"))
  work = pathlib.Path(args.work)
  print("| images | tree MB | build s (with the page) | page alone s | page MB | pictures "
        "| groups (pictured) | findings |")
  print("|---:|---:|---:|---:|---:|---:|---:|---:|")
  for count in (int(n) for n in args.images.split(",")):
    tree = work / f"tree_{count}"
    _tree(tree, count, size)
    tree_mb = sum(p.stat().st_size for p in tree.rglob("*.jpg")) / 1e6
    data_dir = work / f"data_{count}"
    shutil.rmtree(data_dir, ignore_errors=True)
    options = class_folders_builder.ClassFoldersConfig(name="bench", leakage="warn")
    started = time.perf_counter()
    named_build.build(str(tree), "bench", data_dir=str(data_dir), options=options)
    built = time.perf_counter() - started
    version = data_dir / "bench" / "1.0.0"
    started = time.perf_counter()
    page = version_report.content(version_examples.Folder.at(version))
    written = version_report.write(page, work / f"page_{count}.html")
    alone = time.perf_counter() - started
    html = (work / f"page_{count}.html").read_text()
    groups = html.split('<h2 id="duplicates">')[1].split('<h2 id="quality">')[0]
    pictured = sum(1 for g in page.groups if g.pictures)
    findings = sum(len(kind.names) for kind in page.findings)
    listed = groups.count('<div class="group">')
    print(f"| {count:,} | {tree_mb:.0f} | {built:.1f} | {alone:.1f} | {written / 1e6:.2f} | "
          f"{len(re.findall('<img', html))} | {listed} ({pictured}) | {findings} |", flush=True)
  print(f"(bounds: {report_page.GRID_PER_CLASS} a class, {report_page.PER_GROUP} a group for "
        f"the first {report_page.GROUPS_PICTURED} groups, {report_page.PER_KIND} a kind)")


if __name__ == "__main__":
  main()
