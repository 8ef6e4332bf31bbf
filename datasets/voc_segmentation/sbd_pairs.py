"""SBD (Hariharan et al.'s Semantic Boundaries Dataset, `benchmark.tgz`): its layout, its
id lists, and one example per id from its MATLAB annotations.

`benchmark_RELEASE/dataset/` holds img/<id>.jpg, cls/<id>.mat (struct `GTcls`, field
`Segmentation`: class ids 0-20 per pixel), inst/<id>.mat (struct `GTinst`, field
`Segmentation`: 0 background, 1..N objects) and train.txt / val.txt (11,355 ids in all,
every one a VOC2011 image). The masks become single-channel PNGs, as VOC's.
"""

import os
import pathlib

import numpy as np
import scipy.io

from imagesets.building import problems as problems_lib
from imagesets.building import segmentation_masks
from imagesets.voc_segmentation import voc_pairs

ARCHIVE = "benchmark.tgz"
_PATH = "Research/Projects/CS/vision/grouping/semantic_contours/benchmark.tgz"
URLS = (f"https://www2.eecs.berkeley.edu/{_PATH}", f"http://www.eecs.berkeley.edu/{_PATH}")
IN_ARCHIVE = "benchmark_RELEASE/dataset"
IMAGE_DIR, CLASS_DIR, OBJECT_DIR = "img", "cls", "inst"
ID_LISTS = ("train.txt", "val.txt")


def find_sbd(folder: pathlib.Path) -> pathlib.Path | None:
  """SBD's dataset folder in `folder` (`benchmark_RELEASE/dataset/`, `dataset/` or itself)."""
  for candidate in (folder / IN_ARCHIVE, folder / "dataset", folder):
    if (candidate / CLASS_DIR).is_dir() and (candidate / ID_LISTS[0]).is_file():
      return candidate
  return None


def read_ids(folder: os.PathLike) -> tuple[list[str], list[problems_lib.Problem]]:
  """Every id of SBD's train.txt and val.txt, and problems (a missing list, a path)."""
  folder = pathlib.Path(folder)
  ids, found = [], []
  for name in ID_LISTS:
    if not (folder / name).is_file():
      found.append(problems_lib.Problem(f"SBD {name}", "id list is missing"))
      continue
    for image_id in (folder / name).read_text().split():
      if "/" in image_id or "\\" in image_id or image_id.startswith("."):
        found.append(problems_lib.Problem(image_id, f"in SBD {name}: not a plain file name"))
      else:
        ids.append(image_id)
  return ids, found


def read_mat_mask(path: pathlib.Path, struct: str) -> tuple[np.ndarray | None, str | None]:
  """(H x W uint8 indices of `struct`.Segmentation, None), or (None, why not)."""
  try:
    contents = scipy.io.loadmat(os.fspath(path), squeeze_me=True, struct_as_record=False)
    indices = np.asarray(contents[struct].Segmentation)
  except Exception as error:  # pylint: disable=broad-except  (scipy's errors for bad files vary)
    return None, f"unreadable {struct} annotation ({type(error).__name__}: {error})"
  if (indices.ndim != 2 or not np.issubdtype(indices.dtype, np.integer)
      or indices.min(initial=0) < 0 or indices.max(initial=0) > 255):
    return None, f"{struct}.Segmentation is not an H x W array of indices 0-255"
  return indices.astype(np.uint8), None


def load_example(image_id: str, folder: os.PathLike) -> tuple[dict | None, list[problems_lib.Problem]]:
  """(example, []) for a good SBD pair, (None, problems) otherwise; checks everything."""
  folder = pathlib.Path(folder)
  jpeg = folder / IMAGE_DIR / f"{image_id}.jpg"
  shape, found = voc_pairs.check_jpeg(jpeg, f"SBD {IMAGE_DIR}/{image_id}.jpg")
  masks = {}
  for key, sub, struct, allowed in (("class_mask", CLASS_DIR, "GTcls", voc_pairs.CLASS_VALUES),
                                    ("object_mask", OBJECT_DIR, "GTinst", None)):
    name = f"SBD {sub}/{image_id}.mat"
    if not (folder / sub / f"{image_id}.mat").is_file():
      found.append(f"{name} is missing")
      continue
    indices, why = read_mat_mask(folder / sub / f"{image_id}.mat", struct)
    if why:
      found.append(f"{name}: {why}")
      continue
    found += voc_pairs.check_mask(indices, shape, name, allowed)
    masks[key] = segmentation_masks.encode(indices)
  if found:
    return None, [problems_lib.Problem(image_id, reason) for reason in found]
  return voc_pairs.example(jpeg, masks["class_mask"], masks["object_mask"], image_id, shape), []
