"""PASCAL VOC 2012 segmentation pairs: the layout, the split lists and one example per id.

`load_example(image_id, folder)` is a pure function (no builder state); `process` wraps
it for `imagesets.building.generation`, which runs it on local processes or Beam workers with the
same checks and gathers every problem of the build into one report.
"""

import os
import pathlib

import numpy as np
import PIL.Image

from imagesets.building import generation
from imagesets.building import problems as problems_lib
from imagesets.building import segmentation_masks

IN_ARCHIVE = "VOCdevkit/VOC2012"
JPEG_DIR = "JPEGImages"
CLASS_DIR = "SegmentationClass"
OBJECT_DIR = "SegmentationObject"
LISTS_DIR = "ImageSets/Segmentation"
SPLIT_LISTS = {"train": "train.txt", "validation": "val.txt"}

CLASS_NAMES = (
    "background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat",
    "chair", "cow", "diningtable", "dog", "horse", "motorbike", "person", "pottedplant",
    "sheep", "sofa", "train", "tvmonitor",
)
VOID = 255  # object borders and ambiguous regions: ignore in losses and metrics
CLASS_VALUES = np.array([*range(len(CLASS_NAMES)), VOID])

FIX = (f"every id listed in {LISTS_DIR}/*.txt needs {JPEG_DIR}/<id>.jpg and palette-indexed "
       f"{CLASS_DIR}/<id>.png and {OBJECT_DIR}/<id>.png of the same size as the image, with "
       f"class values 0-20 or {VOID}; restore the named files from the original "
       "VOCtrainval_11-May-2012.tar, or remove their ids from the split lists.")


def load_example(image_id: str, folder: os.PathLike) -> tuple[dict | None, list[problems_lib.Problem]]:
  """(example, []) for a good pair, (None, problems) otherwise; checks everything at once."""
  folder = pathlib.Path(folder)
  found = []
  jpeg = folder / JPEG_DIR / f"{image_id}.jpg"
  shape = None
  if not jpeg.is_file():
    found.append(f"{JPEG_DIR}/{image_id}.jpg is missing")
  else:
    try:
      with PIL.Image.open(jpeg) as image:  # reads the header only
        kind, shape = image.format, image.size[::-1]
      if kind != "JPEG":
        found.append(f"{JPEG_DIR}/{image_id}.jpg is a {kind} file, not a JPEG")
    except (OSError, ValueError) as error:
      found.append(f"{JPEG_DIR}/{image_id}.jpg is not a readable image ({error})")
  masks = {}
  for key, sub, allowed in (("class_mask", CLASS_DIR, CLASS_VALUES), ("object_mask", OBJECT_DIR, None)):
    name = f"{sub}/{image_id}.png"
    if not (folder / name).is_file():
      found.append(f"{name} is missing")
      continue
    mask, why = segmentation_masks.read(folder / name)
    if why:
      found.append(f"{name}: {why}")
      continue
    indices = mask.indices
    if shape and indices.shape != shape:
      found.append(f"{name} is {indices.shape[1]}x{indices.shape[0]} (WxH) but the image "
                   f"is {shape[1]}x{shape[0]}")
    if allowed is not None:
      outside = segmentation_masks.unexpected_values(indices, allowed)
      if outside.size:
        found.append(f"{name} has values {outside.tolist()} outside 0-{len(CLASS_NAMES) - 1} "
                     f"and {VOID} (void)")
    masks[key] = mask.png
  if found:
    return None, [problems_lib.Problem(image_id, reason) for reason in found]
  return {
      "image": os.fspath(jpeg),  # stored byte for byte: the original JPEG
      "class_mask": masks["class_mask"],
      "object_mask": masks["object_mask"],
      "image_id": image_id,
      "height": shape[0],
      "width": shape[1],
  }, []


def read_split_lists(folder: os.PathLike) -> tuple[dict[str, list[str]], list[problems_lib.Problem]]:
  """{split: ids} from ImageSets/Segmentation, and problems (missing or empty lists, repeats)."""
  folder = pathlib.Path(folder)
  ids, found, listed_in = {}, [], {}
  for split, file_name in SPLIT_LISTS.items():
    path = folder / LISTS_DIR / file_name
    if not path.is_file():
      found.append(problems_lib.Problem(f"{LISTS_DIR}/{file_name}", "split list is missing"))
      continue
    listed = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    if not listed:
      found.append(problems_lib.Problem(f"{LISTS_DIR}/{file_name}", "split list is empty"))
    ids[split] = []
    for image_id in listed:
      if "/" in image_id or "\\" in image_id or image_id.startswith("."):
        # An id names files inside the folder; never let it reach outside.
        found.append(problems_lib.Problem(image_id, f"in {file_name}: not a plain file name"))
        continue
      listed_in.setdefault(image_id, []).append(file_name)
      ids[split].append(image_id)
  for image_id, files in listed_in.items():
    if len(files) > 1:
      found.append(problems_lib.Problem(
          image_id, f"listed {len(files)} times ({', '.join(files)}); list each id once"))
  return ids, found


def work_items(folder: os.PathLike) -> tuple[dict[str, list[tuple[str, tuple[str, str]]]],
                                             list[problems_lib.Problem]]:
  """{split: [(key, item)]} for `generation.Generation` (key = image id), and list problems."""
  ids, found = read_split_lists(folder)
  items = {split: [(image_id, (os.fspath(folder), image_id)) for image_id in split_ids]
           for split, split_ids in ids.items() if split_ids}
  return items, found


def process(item: tuple[str, str]) -> tuple[dict, None]:
  """`load_example` for `generation.Generation`: a pair's problems become one BadItem."""
  folder, image_id = item
  example, found = load_example(image_id, folder)
  if found:
    raise generation.BadItem("; ".join(problem.reason for problem in found))
  return example, None
