"""A prepared version's file under another version's name, without a second copy on disk."""

import os
import pathlib
import shutil
import uuid


def link_or_copy(source, target) -> None:
  """`source` (a file of a prepared version) at the new name `target`: a hard link where the
  file system allows (versions are never written after their build), else a copy written
  under a temporary name and renamed. An existing `target` is an error, never written
  through: it may itself be a link to a version's file."""
  target = pathlib.Path(os.fspath(target))
  try:
    os.link(source, target)
    return
  except FileExistsError:
    raise
  except OSError:
    pass  # (no hard links here, another device, a link limit): a copy
  if target.exists() or target.is_symlink():
    raise FileExistsError(f"{target} exists")
  temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
  try:
    shutil.copyfile(source, temporary)
    os.rename(temporary, target)
  finally:
    temporary.unlink(missing_ok=True)
