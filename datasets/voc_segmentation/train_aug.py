"""The `train_aug` splits: VOC2012 train plus SBD, minus every VOC2012 val image.

train = (VOC2012 train.txt ∪ SBD train.txt ∪ SBD val.txt) − VOC2012 val.txt: 10,582 pairs
with the real archives. Where VOC2012 has the pair (its train ids), VOC's own JPEG and
PNGs are stored; the other ids get SBD's image and its .mat annotations. validation =
VOC2012 val.txt (1,449 pairs), from VOC, as in the `default` config.
"""

import os

from imagesets.building import generation
from imagesets.building import problems as problems_lib
from imagesets.voc_segmentation import sbd_pairs
from imagesets.voc_segmentation import voc_pairs

FIX = (voc_pairs.FIX + f" An id of SBD's lists that is not in VOC's train list needs SBD's "
       f"{sbd_pairs.IMAGE_DIR}/<id>.jpg, {sbd_pairs.CLASS_DIR}/<id>.mat (GTcls) and "
       f"{sbd_pairs.OBJECT_DIR}/<id>.mat (GTinst) of the image's size; restore them from the "
       f"original {sbd_pairs.ARCHIVE}.")
_LOADERS = {"voc": voc_pairs.load_example, "sbd": sbd_pairs.load_example}


def work_items(voc_folder: os.PathLike, sbd_folder: os.PathLike
               ) -> tuple[dict[str, list], list[problems_lib.Problem]]:
  """{split: [(image id, (source, folder, image id))]} and the lists' problems."""
  voc_ids, found = voc_pairs.read_split_lists(voc_folder)
  sbd_ids, sbd_found = sbd_pairs.read_ids(sbd_folder)
  voc_train, voc_val = set(voc_ids.get("train", [])), set(voc_ids.get("validation", []))
  train = sorted((voc_train | set(sbd_ids)) - voc_val)
  voc, sbd = ("voc", os.fspath(voc_folder)), ("sbd", os.fspath(sbd_folder))
  items = {
      "train": [(i, (*(voc if i in voc_train else sbd), i)) for i in train],
      "validation": [(i, (*voc, i)) for i in voc_ids.get("validation", [])],
  }
  return {split: listed for split, listed in items.items() if listed}, found + sbd_found


def process(item: tuple[str, str, str]) -> tuple[dict, None]:
  """One pair from VOC or SBD for `generation.Generation`; problems become one BadItem."""
  source, folder, image_id = item
  example, found = _LOADERS[source](image_id, folder)
  if found:
    raise generation.BadItem("; ".join(problem.reason for problem in found))
  return example, None
