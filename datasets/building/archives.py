"""Safe extraction of the tar archives our sources ship as (.tar, .tgz, .tar.gz).

An archive given by hand (`--manual_dir`) must be the registered file: its size and
sha256 are checked against `checksums/<name>.txt` before anything is extracted (TFDS
checks the ones it downloads itself). A registered size of 0 means "not yet known": the
sha256 alone decides then (`downloads` explains why). Every member is checked before
anything is written: absolute paths, `..`, and links or hard links pointing outside the target are
refused, all of them named in one error.
Extraction goes to a temporary sibling folder that is renamed into place at the end,
so an interrupted extraction is never mistaken for a complete one.
"""

import hashlib
import os
import pathlib
import shutil
import tarfile

import tqdm

from imagesets.building import problems as problems_lib


class UnsafeArchiveError(problems_lib.InvalidSourceError):
  """The archive has members that would land outside the extraction folder."""


class ArchiveMismatchError(ValueError):
  """A manual archive is not the registered file (other size or sha256)."""


def _sha256(path: pathlib.Path) -> str:
  hasher = hashlib.sha256()
  with open(path, "rb") as f, tqdm.tqdm(total=path.stat().st_size, unit="B", unit_scale=True,
                                        desc=f"checking {path.name}", leave=False) as bar:
    for block in iter(lambda: f.read(1 << 22), b""):
      hasher.update(block)
      bar.update(len(block))
  return hasher.hexdigest()


def check_file(path: os.PathLike, info, fix: str = "") -> None:
  """Raises ArchiveMismatchError unless `path` is the file `info` (a UrlInfo) registers:
  its size, when known, and its sha256. Size 0 means not yet known: the sha256 alone
  decides (a file is never accepted on its size alone)."""
  path = pathlib.Path(path)
  size, known_size = path.stat().st_size, int(info.size)
  if known_size:
    expected = f"{known_size:,} bytes, sha256 {info.checksum}"
  else:
    expected = f"sha256 {info.checksum} (size not yet registered)"
  if known_size and size != known_size:
    found = f"{size:,} bytes"
  else:
    sha256 = _sha256(path)
    if sha256 == info.checksum:
      return
    found = f"{size:,} bytes, sha256 {sha256}"
  name = info.filename or path.name
  raise problems_lib.one_line_if_uncaught(ArchiveMismatchError(
      f"{path} is not the registered {name}: expected {expected}; found {found}. "
      f"Nothing was extracted.{' ' + fix if fix else ''}"))


def check_registered(path: os.PathLike, url_infos: dict) -> None:
  """Raises ArchiveMismatchError unless `path` is the file of its name in `url_infos`
  (a builder's registered files: url -> UrlInfo), by `check_file`."""
  path = pathlib.Path(path)
  registered = {url: info for url, info in url_infos.items() if info.filename == path.name}
  if not registered:
    raise ArchiveMismatchError(f"{path.name} has no registered checksum: not a file this "
                               "dataset is built from")
  url, info = next(iter(registered.items()))
  check_file(path, info, fix=f"Download it again from {url} (or remove it from the manual "
                             "dir and build online).")


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


def safe_extract_under(archive_path: os.PathLike, root: os.PathLike,
                       registered: dict | None = None) -> pathlib.Path:
  """`safe_extract` into `root/<archive name>.safe`: the one naming every builder uses.

  `registered` (a builder's `url_infos`) for archives given by hand: checked first, unless
  already extracted (the check costs a read of the whole archive).
  """
  target = pathlib.Path(root) / f"{pathlib.Path(archive_path).name}.safe"
  if registered is not None and not target.is_dir():
    check_registered(archive_path, registered)
  return safe_extract(archive_path, target)
