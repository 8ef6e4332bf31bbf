"""A plain (non-editable) wheel carries the code and every metadata file TFDS reads."""

import re
import sys
import zipfile

from conftest import REPO, run


def test_wheel_contains_builders_metadata_and_checksums(tmp_path):
  run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
       "--wheel-dir", str(tmp_path), str(REPO)], cwd=tmp_path)
  (wheel,) = tmp_path.glob("tfds_imagesets-*.whl")
  names = set(zipfile.ZipFile(wheel).namelist())
  expected = {
      "imagesets/__init__.py",
      "imagesets/synthetic_images/synthetic_images_dataset_builder.py",
      "imagesets/synthetic_images/README.md",
      "imagesets/synthetic_images/CITATIONS.bib",
      "imagesets/synthetic_images/TAGS.txt",
      "imagesets/building/segmentation_masks.py",
      "imagesets/voc_segmentation/voc_segmentation_dataset_builder.py",
      "imagesets/voc_segmentation/README.md",
      "imagesets/voc_segmentation/CITATIONS.bib",
      "imagesets/voc_segmentation/TAGS.txt",
      "imagesets/checksums/__init__.py",
      "imagesets/checksums/flowers.txt",
      "imagesets/checksums/voc_segmentation.txt",
      "imagesets/building/builder_base.py",
      "imagesets/building/build_lock.py",
      "imagesets/reading/input_pipeline.py",
      "imagesets/storage/bucket.py",
      "imagesets/publishing/publish.py",
      "imagesets/cli/main.py",
      "imagesets/cli/demo.py",
      "imagesets/startup.py",
      "imagesets/registry.py",
      "imagesets/tfds_internals.py",
      "imagesets/oxford17/oxford17_dataset_builder.py",
      "imagesets/oxford17/oxford17_source.py",
      "imagesets/oxford17/README.md",
      "imagesets/oxford17/CITATIONS.bib",
      "imagesets/oxford17/TAGS.txt",
      "imagesets/checksums/oxford17.txt",
      "imagesets/class_folders/class_folders_dataset_builder.py",
      "imagesets/class_folders/README.md",
      "imagesets/class_folders/dummy_data/pets/cat/0000.jpg",
      "imagesets/annotated/annotated_dataset_builder.py",
      "imagesets/annotated/annotated_build.py",
      "imagesets/annotated/README.md",
      "imagesets/annotated/dummy_data/coco/instances.json",
      "imagesets/annotated/dummy_data/images/street/img_002.jpg",
      "imagesets/annotated/dummy_data/yolo/data.yaml",
      "imagesets/annotations/coco.py",
      "imagesets/building/annotated_builder.py",
      "imagesets/reading/box_ops.py",
      "imagesets/building/class_folders_builder.py",
      "imagesets/class_folders/named_build.py",
      "imagesets/class_folders/from_directory.py",
      "imagesets/verifying/round_trip.py",
      "imagesets/reading/grain_pipeline.py",
      "imagesets/reading/numpy_ops.py",
  }
  assert expected <= names, sorted(expected - names)
  (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
  scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
  assert "imagesets = imagesets.cli.main:main" in scripts
  assert not any(name.startswith("datasets/") for name in names)


def test_building_the_wheels_prints_no_warnings_of_ours(tmp_path):
  # What `make venv` (editable) and `pip wheel` run, with this environment's setuptools.
  # Left: setuptools' own "InformationOnly: Editable installation." note, shown for every
  # editable install that needs an import finder (our package lives in datasets/).
  for build in ("build_editable", "build_wheel"):
    out = run([sys.executable, "-W", "default", "-c",
               f"from setuptools import build_meta; build_meta.{build}({str(tmp_path)!r})"])
    warnings = sorted(set(re.findall(r"\w*Warning\b.*", out.stdout + out.stderr)))
    assert warnings == [], (build, warnings)
