"""Round trip: every stored example against its source file, every source file accounted for.

The seed articles' last step ("verify that what you read back equals the source") as a
check of a prepared dataset version against the folder or archive it was built from:

* class-per-folder builds (flowers, class_folders, `imagesets build`): an image stored
  as it came must be the source file byte for byte; a converted one (listed in the
  metadata's `converted_files`) must be what the recorded conversion (`image_checks.prepare`
  with the build's `shorter_side` / `image_size`) makes of the source: the same bytes, or else the same
  shape and decoded pixels. The label must be the file's class folder. Every image file of
  the source is stored once, listed as skipped, or listed as dropped by the build
  (leakage="drop": the `dropped` of the version's duplicate report); other files are
  counted as ignored.
* builds from annotations (`annotated`, `imagesets build --annotations`): each image as
  above, and its annotations as the annotation file (re-read, with the build's format and
  bad-box policy) gives them: labels and flags exactly, boxes to 1e-6 of their normalised
  value, masks (class_mask, object_mask) pixel for pixel as `annotated_examples.mask_arrays`
  makes them from the annotations. Every annotated image is stored once or listed as
  skipped.

An archive source (`.tgz`, `.tar`) is extracted safely into a temporary folder first.

Each builder declares its check (`ROUND_TRIP`): `class_folders` and `annotated` here, a
builder's own beside it (voc_segmentation's `voc_round_trip`). A check is
`check(version, folder, source, annotations) -> Report`, `version` a prepared version as
the read path opens it (`.builder`, `.stored_examples(split, decoders)`);
`imagesets.verifying.round_trip.verify` opens the version and runs its builder's.
"""

import collections
import dataclasses
import io
import os
import pathlib
import tempfile
from typing import Iterator

import numpy as np
import PIL.Image
import tensorflow_datasets as tfds

from imagesets.annotations import formats
from imagesets.annotations import schema
from imagesets.annotations import masks as masks_lib
from imagesets.analysis import duplicates
from imagesets.building import annotated_examples
from imagesets.building import archives
from imagesets.building import class_folders_tree
from imagesets.building import image_checks
from imagesets.building import problems as problems_lib
from imagesets.constants import ORIGINAL_SIZE


@dataclasses.dataclass
class Report:
  kind: str
  source: str
  checked: int = 0
  identical: int = 0                  # stored byte for byte
  reconverted: int = 0                # converted, and the recorded conversion agrees
  skipped: dict = dataclasses.field(default_factory=dict)   # source file -> reason
  dropped: frozenset = frozenset()    # source files the build dropped as leaked copies
  ignored: int = 0                    # source files that are not images by name
  mismatches: list = dataclasses.field(default_factory=list)  # problems_lib.Problem

  @property
  def ok(self) -> bool:
    return not self.mismatches

  def lines(self) -> list[str]:
    out = [f"{self.kind} round trip against {self.source}: {self.checked} stored example(s) "
           f"checked, {self.identical} byte-identical, {self.reconverted} re-converted and "
           f"equal, {len(self.skipped)} skipped at build time"
           + (f", {len(self.dropped)} dropped as copies of another split's (leakage=drop)"
              if self.dropped else "") + f", {self.ignored} non-image "
           f"file(s) ignored, {len(self.mismatches)} mismatch(es)"]
    out += [f"  {p.where}: {p.reason}" for p in sorted(self.mismatches)]
    return out


class source_folder:  # pylint: disable=invalid-name  (a context manager, used like one)
  """The source as a folder; an archive is safely extracted into a temporary one."""

  def __init__(self, source):
    self.source = pathlib.Path(source)
    self.temporary = None

  def __enter__(self) -> pathlib.Path:
    if self.source.is_dir():
      return self.source
    if not self.source.is_file():
      raise FileNotFoundError(f"source {self.source} does not exist")
    self.temporary = tempfile.TemporaryDirectory(prefix="imagesets-verify-")
    return archives.safe_extract(self.source, pathlib.Path(self.temporary.name) / "x")

  def __exit__(self, *exc):
    if self.temporary is not None:
      self.temporary.cleanup()


def stored_examples(version, keys: dict) -> dict[str, Iterator[dict]]:
  """{split: its examples, read when iterated} with `keys` (name -> decoder or None) as
  numpy, every split, in stored order: the records are read without TensorFlow."""
  decoders = {key: decoder for key, decoder in keys.items() if decoder is not None}

  def split_examples(split):
    for example in version.stored_examples(split, decoders):
      yield {key: example[key] for key in keys}
  return {split: split_examples(split) for split in version.builder.info.splits}


def _class_root(folder: pathlib.Path, class_names: list[str]) -> pathlib.Path:
  """The folder holding the class folders: `folder` itself, or one level down (archives)."""
  for candidate in [folder, *sorted(p for p in folder.iterdir() if p.is_dir())]:
    if set(class_names) <= {p.name for p in candidate.iterdir() if p.is_dir()}:
      return candidate
  raise ValueError(f"no folder with the class folders {class_names} in {folder}")


def class_folders(version, folder: pathlib.Path, source: str, annotations=None) -> Report:
  """Class-per-folder builds (flowers, class_folders, `imagesets build`); `annotations`
  unused (one signature for every check)."""
  names = version.builder.info.features["label"].names
  root = _class_root(folder, names)
  metadata = version.builder.info.metadata or {}
  converted = metadata.get("converted_files", {})
  resize = _resize_options(metadata)
  report = Report("class folders", source, skipped=dict(metadata.get("skipped_files", {})))
  report.dropped = _dropped(version, report)
  tree = class_folders_tree.scan(str(root))
  report.ignored = len(tree.ignored)
  seen = collections.Counter()
  stored = stored_examples(version, {"image": tfds.decode.SkipDecoding(), "label": None,
                               "file_name": None})
  for examples in stored.values():
    for example in examples:
      path = example["file_name"].decode()
      seen[path] += 1
      report.checked += 1
      _check_class_example(report, root, path, example, names, path in converted, resize)
  stored_once(report, seen, tree.images, "in the source")
  return report


def _dropped(version, report: Report) -> frozenset:
  """The source files a leakage="drop" build left out, as the version's duplicate report
  lists them (checked against the version's splits); one that cannot be read is a
  mismatch, and none are taken as dropped."""
  counts = {name: split.num_examples for name, split in version.builder.info.splits.items()}
  path = pathlib.Path(version.folder) / duplicates.REPORT_FILE
  try:
    stored = duplicates.read_stored(path, counts)
  except duplicates.BadReport as why:
    report.mismatches.append(problems_lib.Problem(
        duplicates.REPORT_FILE, f"unreadable, so what the build dropped is unknown ({why})"))
    return frozenset()
  return frozenset() if stored is None else frozenset(m.file_name for m in stored[1])


def stored_once(report: Report, seen: collections.Counter, expected, what: str) -> None:
  """Each of `expected` stored once (`seen`: times stored), or listed as skipped or
  dropped; one listed as dropped is not stored."""
  for name, count in seen.items():
    if count > 1:
      report.mismatches.append(problems_lib.Problem(name, f"stored {count} times"))
    if name in report.dropped:
      report.mismatches.append(problems_lib.Problem(
          name, f"stored, but {duplicates.REPORT_FILE} lists it as dropped by the build"))
  for name in expected:
    if name not in seen and name not in report.skipped and name not in report.dropped:
      report.mismatches.append(problems_lib.Problem(
          name, f"{what} but neither stored nor listed as skipped"))


def _check_class_example(report, root, path, example, names, was_converted, resize):
  def mismatch(reason):
    report.mismatches.append(problems_lib.Problem(path, reason))

  if names[example["label"]] != class_folders_tree.label_of(path):
    mismatch(f"label {names[example['label']]!r}, but the file is in "
             f"{class_folders_tree.label_of(path)!r}")
  _check_image(report, root, path, example["image"], was_converted, resize)


def _check_image(report, root, path, image: bytes, was_converted, resize):
  """The stored `image` is the source file, or what its recorded conversion makes of it."""
  def mismatch(reason):
    report.mismatches.append(problems_lib.Problem(path, reason))

  try:
    data = class_folders_tree.read(str(root), path)
  except FileNotFoundError:
    return mismatch("stored, but not in the source")
  if not was_converted:
    if image == data:
      report.identical += 1
    else:
      mismatch("stored bytes differ from the source file (and no conversion is recorded)")
    return
  expected, facts = image_checks.prepare(data, **resize)
  if expected == image or _same_pixels(expected, image):
    report.reconverted += 1
  else:
    mismatch(f"differs from the recorded conversion of the source ({facts.conversion})")


def _resize_options(metadata) -> dict:
  return {"shorter_side": metadata.get("shorter_side") or ORIGINAL_SIZE,
          "image_size": metadata.get("image_size") or ORIGINAL_SIZE}


def annotated(version, folder: pathlib.Path, source: str, annotations=None) -> Report:
  """Builds from annotations, against `annotations` (default: the file the build recorded)."""
  metadata = version.builder.info.metadata or {}
  path = os.fspath(annotations or metadata["annotations"])
  images, ignored = class_folders_tree.image_files(str(folder))
  read = formats.read(path, images, format=metadata["annotation_format"],
                      on_bad_box=metadata.get("on_bad_box", "error"), images_root=str(folder))
  report = Report(f"{read.format} annotations", f"{source} with {path}",
                  skipped=dict(metadata.get("skipped_files", {})), ignored=len(ignored))
  report.mismatches += [problems_lib.Problem(p.where, p.reason) for p in read.problems]
  features = version.builder.info.features
  report.mismatches += _class_differences(features, read, path)
  keys = {"image": tfds.decode.SkipDecoding(), "file_name": None}
  keys.update({key: None for key in ("label", "labels", "objects") if key in features})
  mask_keys = [key for key in ("class_mask", "object_mask") if key in features]
  keys.update({key: tfds.decode.SkipDecoding() for key in mask_keys})
  keys.update({key: None for key in ("height", "width") if mask_keys})
  if read.masks is not None and not mask_keys:
    report.mismatches.append(problems_lib.Problem(
        path, "the annotations give masks (segmentation), the build stores none"))
  converted = metadata.get("converted_files", {})
  seen = collections.Counter()
  for examples in stored_examples(version, keys).values():
    for example in examples:
      name = example["file_name"].decode()
      seen[name] += 1
      report.checked += 1
      entry = read.entries.get(name)
      if entry is None:
        report.mismatches.append(problems_lib.Problem(name, "stored, but not in the annotations"))
        continue
      _check_image(report, folder, name, example["image"], name in converted,
                   _resize_options(metadata))
      expected = annotated_examples.label_features(read.task, entry, tuple(read.flag_names))
      for why in _annotation_differences(expected, example):
        report.mismatches.append(problems_lib.Problem(name, why))
      for why in _mask_differences(read.masks, entry, example, mask_keys):
        report.mismatches.append(problems_lib.Problem(name, why))
  stored_once(report, seen, read.entries, "annotated")
  return report


def _class_differences(features, read, path: str) -> list[problems_lib.Problem]:
  """The stored class names (and class-valued flags) against the annotations': an id
  means the class at its place in these lists, so any difference relabels examples."""
  held = schema.of(features)
  found = []
  if held.class_names is not None and tuple(held.class_names) != tuple(read.class_names):
    found.append(problems_lib.Problem(path, f"class names {list(held.class_names)} stored, "
                                      f"the annotations give {list(read.class_names)}"))
  for flag, names in read.flag_classes.items():
    stored = getattr(features["objects"].feature[flag], "names", None) if (
        "objects" in features and flag in features["objects"].feature) else None
    if stored is not None and tuple(stored) != tuple(names):
      found.append(problems_lib.Problem(path, f"{flag} classes {list(stored)} stored, the "
                                        f"annotations give {list(names)}"))
  return found


BOX_TOLERANCE = 1e-6  # boxes are stored as float32: within this of the normalised value


def _annotation_differences(expected: dict, stored: dict) -> list[str]:
  """What differs between the annotation features an entry gives and those stored."""
  differences = []
  for key, want in expected.items():
    if key != "objects":
      if not np.array_equal(np.asarray(want), np.asarray(stored[key])):
        differences.append(f"{key} {np.asarray(stored[key]).tolist()}, the annotations "
                           f"give {np.asarray(want).tolist()}")
      continue
    got = stored["objects"]
    for column, values in want.items():
      values, kept = np.asarray(values), np.asarray(got[column])
      if len(values) != len(kept):
        differences.append(f"{len(kept)} object(s) stored, the annotations give {len(values)}")
        break
      if kept.size == values.size:  # (no objects: an empty column of either shape)
        kept = kept.reshape(values.shape)
      same = (np.allclose(values, kept, rtol=0, atol=BOX_TOLERANCE) if column == "bbox"
              else np.array_equal(values, kept))
      if not same:
        differences.append(f"objects' {column} {kept.tolist()}, the annotations give "
                           f"{values.tolist()}")
  return differences


def _mask_differences(source, entry, stored: dict, keys: list[str]) -> list[str]:
  """What differs between the stored masks (PNG bytes under `keys`) and those the
  annotations give, made by the build's own function at the stored image's size."""
  if not keys:
    return []
  if source is None:
    return [f"{', '.join(keys)} stored, the annotations give no masks"]
  try:
    expected = annotated_examples.mask_arrays(source, entry,
                                              (int(stored["height"]), int(stored["width"])))
  except masks_lib.MaskError as error:
    return [str(error)]
  differences = []
  for key in keys:
    got, want = pixels(stored[key]), expected.get(key)
    got = got.reshape(got.shape[:2])
    if want is None or got.shape != want.shape:
      differences.append(f"{key} is {got.shape[1]}x{got.shape[0]}, the annotations give "
                         f"{'none' if want is None else f'{want.shape[1]}x{want.shape[0]}'}")
      continue
    wrong = np.argwhere(got != want)
    if len(wrong):
      y, x = wrong[0]
      differences.append(f"{key}: {len(wrong)} pixel(s) differ from the annotations' (first "
                         f"at x {x}, y {y}: stored {got[y, x]}, the annotations give "
                         f"{want[y, x]})")
  return differences


def pixels(encoded: bytes) -> np.ndarray:
  with PIL.Image.open(io.BytesIO(encoded)) as image:
    return np.asarray(image)


def _same_pixels(a: bytes, b: bytes) -> bool:
  left, right = pixels(a), pixels(b)
  return left.shape == right.shape and np.array_equal(left, right)
