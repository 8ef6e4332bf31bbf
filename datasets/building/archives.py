"""Safe extraction of the tar archives our sources ship as (.tar, .tgz, .tar.gz).

Every member is checked before anything is written: absolute paths, `..`, and links
or hard links pointing outside the target are refused, all of them named in one error.
Extraction goes to a temporary sibling folder that is renamed into place at the end,
so an interrupted extraction is never mistaken for a complete one.
"""

import os
import pathlib
import shutil
import tarfile

from imagesets.building import problems as problems_lib


class UnsafeArchiveError(problems_lib.InvalidSourceError):
  """The archive has members that would land outside the extraction folder."""


def unsafe_members(archive: tarfile.TarFile, target: os.PathLike) -> list[problems_lib.Problem]:
  """Absolute members, and those Python's `data` extraction filter refuses."""
  found = []
  for member in archive.getmembers():
    if member.name.startswith(("/", "\\")) or os.path.isabs(member.name):
      # The data filter would quietly strip the leading "/"; we refuse instead.
      found.append(problems_lib.Problem(member.name, "absolute path"))
      continue
    try:
      tarfile.data_filter(member, os.fspath(target))
    except tarfile.FilterError as error:
      found.append(problems_lib.Problem(member.name, str(error)))
  return found


def safe_extract(archive_path: os.PathLike, target: os.PathLike) -> pathlib.Path:
  """Extracts `archive_path` into `target` (reused if it already exists)."""
  target = pathlib.Path(target)
  if target.is_dir():
    return target
  partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
  shutil.rmtree(partial, ignore_errors=True)
  partial.mkdir(parents=True)
  try:
    with tarfile.open(archive_path) as archive:
      found = unsafe_members(archive, partial)
      if found:
        raise UnsafeArchiveError(
            found, source=os.fspath(archive_path),
            fix="nothing was extracted; get a clean copy of the archive from the "
                "dataset's original source.")
      archive.extractall(partial, filter="data")
    partial.rename(target)
  except BaseException:
    shutil.rmtree(partial, ignore_errors=True)
    raise
  return target


def extract_root(dl_manager) -> pathlib.Path:
  """Where a build extracts archives: TFDS's `<download_dir>/extracted`, by public API."""
  return pathlib.Path(dl_manager.download_dir) / "extracted"


def safe_extract_under(archive_path: os.PathLike, root: os.PathLike) -> pathlib.Path:
  """`safe_extract` into `root/<archive name>.safe`: the one naming every builder uses."""
  return safe_extract(archive_path, pathlib.Path(root) / f"{pathlib.Path(archive_path).name}.safe")
