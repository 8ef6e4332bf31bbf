"""Oxford-17 (Nilsback & Zisserman's 17 Category Flower Dataset): where it comes from, its
labels and its official splits.

`17flowers.tgz` holds `jpg/image_0001.jpg` ... `jpg/image_1360.jpg`: 17 classes of 80
images, in blocks of 80 by index (images 1-80 are class 0, ...), in the order of the
dataset page. `datasplits.mat` holds the paper's three splits, each a training, a
validation and a test list of 1-based image indices (`trn1`, `val1`, `tst1`, ...); they
become the named splits `train1`, `validation1`, `test1`, ... The archive is checked by
its published sha256 (checksums/oxford17.txt), datasplits.mat by its published md5 (no
sha256 is published for it).
"""

import hashlib
import os
import pathlib

import numpy as np
import scipy.io

from imagesets.building import archives
from imagesets.building import class_folders_examples
from imagesets.building import downloads
from imagesets.building import problems as problems_lib

HOMEPAGE = "https://www.robots.ox.ac.uk/~vgg/data/flowers/17/"
ARCHIVE = "17flowers.tgz"
URL = HOMEPAGE + ARCHIVE
SPLITS_FILE = "datasplits.mat"
SPLITS_URL = HOMEPAGE + SPLITS_FILE
SPLITS_MD5 = "4828cddfd0d803c5abbdebcb1e148a1e"  # the dataset page's
IMAGE_DIR = "jpg"
PER_CLASS = 80
# The dataset page's names, in label order (images 1-80: daffodil, 81-160: snowdrop, ...).
CLASS_NAMES = [
    "daffodil", "snowdrop", "lily_valley", "bluebell", "crocus", "iris", "tigerlily",
    "tulip", "fritillary", "sunflower", "daisy", "colts_foot", "dandelion", "cowslip",
    "buttercup", "windflower", "pansy",
]
NUM_IMAGES = PER_CLASS * len(CLASS_NAMES)  # 1,360
SPLIT_NAMES = {f"{key}{n}": f"{name}{n}" for n in (1, 2, 3)
               for key, name in (("trn", "train"), ("val", "validation"), ("tst", "test"))}

INSTRUCTIONS = (
    f"Offline: put {ARCHIVE} (from {URL}) or the {IMAGE_DIR}/ folder extracted from it, and "
    f"{SPLITS_FILE} (from {SPLITS_URL}), in a folder and pass it with --manual_dir DIR. "
    "Online builds download both themselves.")


def relative_path(index: int) -> str:
  """The archive path of the image of 1-based `index`."""
  return f"{IMAGE_DIR}/image_{index:04d}.jpg"


def label_of(index: int) -> str:
  return CLASS_NAMES[(index - 1) // PER_CLASS]


def check_splits_file(path: os.PathLike) -> None:
  """Raises ArchiveMismatchError unless `path` has datasplits.mat's published md5."""
  found = hashlib.md5(pathlib.Path(path).read_bytes()).hexdigest()
  if found != SPLITS_MD5:
    raise problems_lib.one_line_if_uncaught(archives.ArchiveMismatchError(
        f"{path} is not the published {SPLITS_FILE}: expected md5 {SPLITS_MD5}, found md5 "
        f"{found}. Download it again from {SPLITS_URL}."))


def read_splits(path: os.PathLike) -> tuple[dict[str, list[int]], list[problems_lib.Problem]]:
  """{split name: sorted 1-based image indices} from datasplits.mat, and its problems
  (a missing list, an index outside 1-1,360 or not whole, an index listed twice)."""
  contents = scipy.io.loadmat(os.fspath(path))
  splits, found = {}, []
  for key, name in SPLIT_NAMES.items():
    if key not in contents:
      found.append(problems_lib.Problem(f"{SPLITS_FILE}:{key}", "list is missing"))
      continue
    values = np.asarray(contents[key], np.float64).ravel()
    bad = sorted({v for v in values.tolist() if v != int(v) or not 1 <= v <= NUM_IMAGES})
    if bad:
      found.append(problems_lib.Problem(
          f"{SPLITS_FILE}:{key}", f"indices {bad[:5]} are not image numbers 1-{NUM_IMAGES}"))
      continue
    indices = values.astype(int).tolist()
    repeated = sorted({i for i in indices if indices.count(i) > 1})
    if repeated:
      found.append(problems_lib.Problem(f"{SPLITS_FILE}:{key}", f"lists {repeated[:5]} twice"))
    splits[name] = sorted(set(indices))
  return splits, found


def source(dl_manager, registered: dict) -> tuple[str, pathlib.Path]:
  """(the folder holding jpg/, the checked datasplits.mat): from --manual_dir, else
  downloaded. `registered`: the builder's registered files."""
  manual = downloads.manual_dir(dl_manager)
  if manual is None:
    archive = downloads.download_first(dl_manager, [URL], what=ARCHIVE,
                                       instructions=INSTRUCTIONS, registered=registered)
    splits = downloads.download_first(dl_manager, [SPLITS_URL], what=SPLITS_FILE,
                                      instructions=INSTRUCTIONS, registered=registered,
                                      check=check_splits_file)
    root = archives.safe_extract_under(archive, archives.extract_root(dl_manager))
    return str(root), splits
  splits = manual / SPLITS_FILE
  if not splits.is_file():
    raise downloads.SourceNotFoundError(f"{manual} has no {SPLITS_FILE}. {INSTRUCTIONS}")
  check_splits_file(splits)
  if (manual / IMAGE_DIR).is_dir():
    return str(manual), splits
  if (manual / ARCHIVE).is_file():
    return str(archives.safe_extract_under(manual / ARCHIVE, archives.extract_root(dl_manager),
                                           registered)), splits
  raise downloads.SourceNotFoundError(
      f"{manual} has neither {IMAGE_DIR}/ nor {ARCHIVE}. {INSTRUCTIONS}")


def work_items(root: str, splits: dict[str, list[int]], shorter_side: int = 0) -> dict:
  """{split: [(key, item)]} for `generation.Generation` (key = the image's archive path)."""
  return {name: [(relative_path(i), class_folders_examples.work_item(
      root, relative_path(i), shorter_side)) for i in indices]
          for name, indices in splits.items()}


def process(item: tuple[str, str, int, int]) -> tuple[dict, str | None]:
  """The class-folder example of one image, labelled by its index (not by its folder)."""
  example, note = class_folders_examples.process_file(item)
  index = int(pathlib.PurePosixPath(item[1]).stem.split("_")[-1])
  return {**example, "label": label_of(index)}, note
