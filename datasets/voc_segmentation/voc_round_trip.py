"""voc_segmentation's round trip (`imagesets verify`): the image is the source JPEG byte for
byte, both masks decode to the source PNGs' palette indices exactly, and every id of the
split lists is stored in its split."""

import pathlib

import numpy as np
import tensorflow_datasets as tfds

from imagesets.building import problems as problems_lib
from imagesets.building import round_trips
from imagesets.building import segmentation_masks
from imagesets.voc_segmentation import voc_pairs
from imagesets.voc_segmentation import voc_source


def check(version, folder: pathlib.Path, source: str, annotations=None) -> round_trips.Report:
  """A `round_trips` check (`annotations` unused) of a version against VOC2012 in `folder`."""
  folder = _voc_folder(folder)
  report = round_trips.Report("voc_segmentation", source)
  listed, _ = voc_pairs.read_split_lists(folder)
  skip = tfds.decode.SkipDecoding()
  stored = round_trips.stored_examples(version, {"image": skip, "class_mask": skip,
                                                 "object_mask": skip, "image_id": None})
  for split, examples in stored.items():
    ids = set()
    for example in examples:
      image_id = example["image_id"].decode()
      ids.add(image_id)
      report.checked += 1
      if _pair_matches(report, folder, image_id, example):
        report.identical += 1
    for image_id in sorted(set(listed.get(split, [])) - ids):
      report.mismatches.append(problems_lib.Problem(
          image_id, f"listed for {split} in the source but not stored in {split}"))
  return report


def _voc_folder(folder: pathlib.Path) -> pathlib.Path:
  found = voc_source.find_voc2012(folder)
  if found is not None:
    return found
  raise ValueError(f"no {voc_pairs.IN_ARCHIVE}/{voc_pairs.LISTS_DIR} in {folder}")


def _pair_matches(report, folder, image_id, example) -> bool:
  found = []
  jpeg = folder / voc_pairs.JPEG_DIR / f"{image_id}.jpg"
  if not jpeg.is_file() or jpeg.read_bytes() != example["image"]:
    found.append(f"image differs from {voc_pairs.JPEG_DIR}/{image_id}.jpg")
  for key, sub in (("class_mask", voc_pairs.CLASS_DIR), ("object_mask", voc_pairs.OBJECT_DIR)):
    path = folder / sub / f"{image_id}.png"
    if not path.is_file():
      found.append(f"{sub}/{image_id}.png is missing from the source")
      continue
    mask, why = segmentation_masks.read(path)
    stored = np.squeeze(round_trips.pixels(example[key]))
    if why or mask.indices.shape != stored.shape or not np.array_equal(mask.indices, stored):
      found.append(f"{key} differs from the palette indices of {sub}/{image_id}.png")
  report.mismatches += [problems_lib.Problem(image_id, reason) for reason in found]
  return not found
