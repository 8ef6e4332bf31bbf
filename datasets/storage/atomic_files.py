"""A file appears whole under its name or not at all.

Every file is first written (or linked) under a temporary name beside its target, then
given the target's name, by one of two rules:
* replace (`exclusive=False`): renamed over whatever is there (`os.replace`);
* exclusive (`exclusive=True`): hard-linked to the name, which never replaces an existing
  file (of two writers at once, exactly one creates it).

Temporaries are `.<name>.tmp-<pid>-<hex>` in the target's folder: hidden, so neither TFDS
nor a version's listing counts one and no publish removes one as stale (another writer
may be writing it); the pid says whether a leftover's writer is still alive
(`writer_pid`). A file system without hard links (vfat, many SMB and FUSE mounts) gets a
copy instead of a link; an exclusive write there creates the name with O_EXCL and writes
it in place (still exclusive; a crash mid-write can leave it partial).

Files are made with the permissions a plain copy gives (0o666 & ~umask), so teammates on
a shared file system can read them (tempfile.mkstemp would make them owner-only).
"""

import contextlib
import glob
import os
import pathlib
import stat
import uuid
from typing import Callable, Iterable

CHUNK = 8 << 20
_TMP = ".tmp-"
_NAME_KEPT = 100   # characters of a target's name its temporaries keep (+ 48: pid, hex)
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_BINARY", 0)


def name_kept(name: str) -> str:
  """What a name made beside a file keeps of the file's `name`: cut short, so that it stays
  within NAME_MAX however long `name` is."""
  return name.lstrip(".")[:_NAME_KEPT]


def _prefix(target: pathlib.Path) -> str:
  return f".{name_kept(target.name)}{_TMP}"


def temporary_beside(target) -> pathlib.Path:
  """A new unique hidden name beside `target` (its folder made if missing)."""
  target = pathlib.Path(target)
  target.parent.mkdir(parents=True, exist_ok=True)
  return target.with_name(f"{_prefix(target)}{os.getpid()}-{uuid.uuid4().hex}")


class NotAFileOfOurs(ValueError):
  """What stands where a file of ours should is not one: not a regular file, or larger
  than any we write (`size`: its size, or None when it grew while read)."""

  def __init__(self, path, size: int | None):
    super().__init__(f"{path}: not a regular file of ours ({size} bytes)")
    self.size = size


def open_regular(path):
  """The regular file at `path`, opened for reading as untrusted input: no symlink followed
  (OSError, ELOOP), no FIFO waited on; NotAFileOfOurs for anything but a regular file
  (OSError where it cannot be opened)."""
  try:
    opened = open(path, "rb", opener=_untrusted)
  except IsADirectoryError:
    raise NotAFileOfOurs(path, os.lstat(path).st_size) from None
  status = os.fstat(opened.fileno())
  if not stat.S_ISREG(status.st_mode):
    opened.close()
    raise NotAFileOfOurs(path, status.st_size)
  return opened


def _untrusted(path, flags: int) -> int:
  # (through `open`, so that what audits opens for reading sees this one as such)
  return os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))


def read_back(path, max_bytes: int) -> bytes:
  """The bytes of a file of ours at `path`, read as untrusted input (`open_regular`), no
  more than `max_bytes` read; NotAFileOfOurs for anything but a regular file of at most
  `max_bytes` (OSError where it cannot be opened)."""
  with open_regular(path) as opened:
    size = os.fstat(opened.fileno()).st_size
    if size > max_bytes:
      raise NotAFileOfOurs(path, size)
    data = opened.read(max_bytes + 1)
  if len(data) > max_bytes:
    raise NotAFileOfOurs(path, None)
  return data


def leftovers(target) -> list[tuple[pathlib.Path, int | None]]:
  """The temporaries beside `target` with the pid of the process that made each (None: a
  name this module did not make)."""
  target = pathlib.Path(target)
  prefix = _prefix(target)
  found = []
  for path in target.parent.glob(f"{glob.escape(prefix)}*"):
    pid = path.name[len(prefix):].partition("-")[0]
    ours = pid.isascii() and pid.isdigit() and len(pid) <= 10
    found.append((path, int(pid) if ours else None))
  return found


def write(target, data: bytes | Iterable[bytes], *, exclusive: bool = False,
          sync: bool = False) -> bool:
  """Writes `data` (bytes, or chunks of them) at `target`, whole or not at all; True when
  this call gave `target` its content (always, unless `exclusive` found the name taken).
  `sync`: on disk before the name is given."""
  target = pathlib.Path(target)
  chunks = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
  tmp = temporary_beside(target)
  try:
    _write_new(tmp, chunks, sync)
    return _give_name(tmp, target, exclusive)
  finally:
    with contextlib.suppress(FileNotFoundError):
      os.unlink(tmp)


def copy(source, target, *, exclusive: bool = False,
         progress: Callable[[int], None] | None = None, opened=None) -> bool:
  """The local file `source`, copied to `target` whole or not at all (see `write`);
  `progress(n)` after each chunk of n bytes. `opened`: `source` opened already (binary,
  at its start; e.g. by `open_regular`): read, not opened again by name."""
  def chunks():
    with contextlib.nullcontext(opened) if opened is not None else open(source, "rb") as src:
      while chunk := src.read(CHUNK):
        yield chunk
        if progress is not None:
          progress(len(chunk))
  if exclusive:  # (a name taken is refused before anything is copied)
    _refuse_taken(target)
  return write(target, chunks(), exclusive=exclusive)


def link(source, target, *, exclusive: bool = False, opened=None) -> None:
  """The file `source` under the name `target` too, without a second copy on disk where
  the file system allows (a hard link; the two names then share their bytes: for files
  that are replaced, never written in place), else a copy. `exclusive`: an existing
  `target` is FileExistsError, never written through (it may itself be a link to another
  version's file). FileNotFoundError if `source` is gone. `opened`: as `copy`'s; the
  link is kept only if it is that very file (a name swapped after it was opened is not
  linked: `opened` is copied)."""
  target = pathlib.Path(target)
  if exclusive:
    try:
      os.link(source, target)
      if _is_opened(target, opened):
        return
      os.unlink(target)  # (another file took `source`'s name meanwhile: copy `opened`)
    except OSError as error:
      if not _no_hard_link(error):
        raise
    if not copy(source, target, exclusive=True, opened=opened):
      raise FileExistsError(f"{target} exists")
    return
  tmp = temporary_beside(target)
  try:
    try:
      os.link(source, tmp)
      linked = _is_opened(tmp, opened)
    except OSError as error:
      if not _no_hard_link(error):
        raise
      linked = False
    if linked:
      os.replace(tmp, target)
    else:
      copy(source, target, opened=opened)
  finally:
    with contextlib.suppress(FileNotFoundError):
      os.unlink(tmp)


def _is_opened(path: pathlib.Path, opened) -> bool:
  """Whether `path` is the file `opened` (None: any file is)."""
  if opened is None:
    return True
  linked, held = os.lstat(path), os.fstat(opened.fileno())
  return (linked.st_dev, linked.st_ino) == (held.st_dev, held.st_ino)


def _no_hard_link(error: OSError) -> bool:
  """A link refused for any reason but a taken name or a missing source: none at all
  (vfat, many SMB and FUSE mounts), another device, the file's link limit, Linux's
  protected_hardlinks refusing a teammate's file, a mount's own refusal (EACCES)."""
  return not isinstance(error, (FileExistsError, FileNotFoundError))


def _refuse_taken(target) -> None:
  if os.path.lexists(target):
    raise FileExistsError(f"{target} exists")


def _write_new(path: pathlib.Path, chunks: Iterable[bytes], sync: bool) -> None:
  fd = os.open(path, _FLAGS, 0o666)
  with os.fdopen(fd, "wb") as out:
    for chunk in chunks:
      out.write(chunk)
    if sync:
      out.flush()
      os.fsync(out.fileno())


def _give_name(tmp: pathlib.Path, target: pathlib.Path, exclusive: bool) -> bool:
  if not exclusive:
    os.replace(tmp, target)
    return True
  try:
    os.link(tmp, target)
    return True
  except FileExistsError:
    return False
  except OSError as error:
    if not _no_hard_link(error):
      raise
  try:  # no hard links here: the name created exclusively, then written in place
    with open(tmp, "rb") as written:
      _write_new(target, iter(lambda: written.read(CHUNK), b""), sync=True)
  except FileExistsError:
    return False
  return True
