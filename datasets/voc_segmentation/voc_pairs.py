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


def check_jpeg(path: pathlib.Path, name: str) -> tuple[tuple[int, int] | None, list[str]]:
  """((height, width), []) for a JPEG, else (None or its shape, why); reads the header only."""
  if not path.is_file():
    return None, [f"{name} is missing"]
  try:
    with PIL.Image.open(path) as image:  # reads the header only
      kind, shape = image.format, image.size[::-1]
  except (OSError, ValueError) as error:
    return None, [f"{name} is not a readable image ({error})"]
  return shape, ([] if kind == "JPEG" else [f"{name} is a {kind} file, not a JPEG"])


def check_mask(indices: np.ndarray, shape: tuple[int, int] | None, name: str,
               allowed: np.ndarray | None) -> list[str]:
  """Why a mask of class or instance indices does not fit its image (size, values)."""
  found = []
  if shape and indices.shape != shape:
    found.append(f"{name} is {indices.shape[1]}x{indices.shape[0]} (WxH) but the image "
                 f"is {shape[1]}x{shape[0]}")
  if allowed is not None:
    outside = segmentation_masks.unexpected_values(indices, allowed)
    if outside.size:
      found.append(f"{name} has values {outside.tolist()} outside 0-{len(CLASS_NAMES) - 1} "
                   f"and {VOID} (void)")
  return found


def example(jpeg: pathlib.Path, class_png: bytes, object_png: bytes, image_id: str,
            shape: tuple[int, int]) -> dict:
  """The stored features of one pair (every source of pairs gives this shape)."""
  return {
      "image": os.fspath(jpeg),  # stored byte for byte: the original JPEG
      "class_mask": class_png,
      "object_mask": object_png,
      "image_id": image_id,
      "height": shape[0],
      "width": shape[1],
  }


def load_example(image_id: str, folder: os.PathLike) -> tuple[dict | None, list[problems_lib.Problem]]:
  """(example, []) for a good pair, (None, problems) otherwise; checks everything at once."""
  folder = pathlib.Path(folder)
  jpeg = folder / JPEG_DIR / f"{image_id}.jpg"
  shape, found = check_jpeg(jpeg, f"{JPEG_DIR}/{image_id}.jpg")
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
    found += check_mask(mask.indices, shape, name, allowed)
    masks[key] = mask.png
  if found:
    return None, [problems_lib.Problem(image_id, reason) for reason in found]
  return example(jpeg, masks["class_mask"], masks["object_mask"], image_id, shape), []


def read_split_lists(folder: os.PathLike, lists_dir: str = LISTS_DIR
                     ) -> tuple[dict[str, list[str]], list[problems_lib.Problem]]:
  """{split: ids} from `lists_dir` (ImageSets/Segmentation; the detection config's:
  ImageSets/Main), and problems (missing or empty lists, repeats)."""
  folder = pathlib.Path(folder)
  ids, found, listed_in = {}, [], {}
  for split, file_name in SPLIT_LISTS.items():
    path = folder / lists_dir / file_name
    if not path.is_file():
      found.append(problems_lib.Problem(f"{lists_dir}/{file_name}", "split list is missing"))
      continue
    listed = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    if not listed:
      found.append(problems_lib.Problem(f"{lists_dir}/{file_name}", "split list is empty"))
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
