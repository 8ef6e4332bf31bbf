"""What every build of a dataset of the user's own name shares (`imagesets build`: class
folders, annotations): the name and card checks, the builder class made for NAME:VERSION,
and the rule that a version is never rebuilt from other content (`already_built`, saying
what changed).
"""

import dataclasses
import hashlib
import importlib.metadata
import json
import pathlib
import re
import tomllib
from typing import Callable

from absl import logging
import tensorflow_datasets as tfds

import imagesets.tfds_internals as tfds_internals
from imagesets.building import incremental
from imagesets.constants import DATASET_NAME_PATTERN
from imagesets.registry import BY_NAME
from imagesets.storage import atomic_files

ABOUT_FILE = "imagesets.toml"
_NAME = re.compile(DATASET_NAME_PATTERN)


class VersionExistsError(ValueError):
  """NAME:VERSION is already built from other content."""


@dataclasses.dataclass(frozen=True)
class About:
  """What the dataset card says; every field may be empty."""

  description: str = ""
  citation: str = ""
  homepage: str = ""


def read_about(root: str, **given: str | None) -> About:
  """The card's fields: given ones win over `imagesets.toml` in `root`."""
  path = f"{str(root).rstrip('/')}/{ABOUT_FILE}"
  from_file = {}
  if tfds.core.Path(path).exists():
    try:
      from_file = tomllib.loads(tfds.core.Path(path).read_text())
    except tomllib.TOMLDecodeError as error:
      raise ValueError(f"{path}: not valid TOML ({error})") from None
    unknown = set(from_file) - {field.name for field in dataclasses.fields(About)}
    if unknown:
      raise ValueError(f"{path}: unknown key(s) {sorted(unknown)}; "
                       "allowed: description, citation, homepage")
  return About(**{key: str(value) for key, value in {**from_file, **{
      k: v for k, v in given.items() if v is not None}}.items()})


# Beside a name's versions: the TFDS install (`_installed`) that found the name free.
NAME_CHECKED = ".name_checked.json"
_MAX_RECORD = 4096


@dataclasses.dataclass(frozen=True)
class NameChecked:
  """What `check_name` found; `save` records it beside the name's versions, once a build of
  the name has succeeded (a failed first build leaves no folder)."""
  record: pathlib.Path | None = None  # None: nothing to record (or recorded already)
  content: bytes = b""

  def save(self) -> None:
    if self.record is None:
      return
    try:
      atomic_files.write(self.record, self.content)
    except OSError as why:  # (a record that saves a lookup: the build goes on without it)
      logging.warning("%s: could not record the name's check (%s)", self.record, why)


def check_name(name: str, *, registered: bool = True, data_dir=None) -> NameChecked:
  """Refuses a malformed name and, with `registered`, a registered TFDS builder's name.

  Looking that up imports TFDS's own builders (0.1-0.2 s). With the local `data_dir` whose
  folder of the name records that the TFDS installed now, file for file (`_installed`),
  found the name free (`NAME_CHECKED`, written by `NameChecked.save` after a build), they
  are not imported again: every other builder provider and the builders imported into
  this process are still asked, and imagesets' own names refused."""
  if not _NAME.fullmatch(name):
    raise ValueError(f"dataset name {name!r}: use lower case letters, digits and _, "
                     "starting with a letter (e.g. 'pets' or 'factory_parts')")
  if not registered:
    return NameChecked()
  installed = _installed()
  content = json.dumps({"name": name, "tfds": installed}).encode()
  record = (None if data_dir is None or "://" in str(data_dir) or installed is None
            else pathlib.Path(data_dir) / name / NAME_CHECKED)
  if record is not None and _recorded(record) == content:
    taken = name in BY_NAME or tfds_internals.known_without_importing(name)
    record = None
  else:
    try:  # one lookup (about half the cost of listing every builder at start-up)
      tfds.builder_cls(name)
      taken = True
    except tfds.core.DatasetNotFoundError:
      taken = False
  if taken:
    raise ValueError(f"dataset name {name!r} is taken by a registered TFDS builder "
                     "(tfds.load would use that builder): choose another name")
  return NameChecked(record, content)


def _installed() -> str | None:
  """The installed TFDS, file for file: its version, where it is, and the SHA-256 of its
  RECORD (every file pip installed, with each file's hash); None for a TFDS that pip did
  not install file by file (an editable install, a copy), whose builders are always
  looked up."""
  try:
    found = importlib.metadata.distribution("tensorflow-datasets")
    listed = found.read_text("RECORD")
    editable = json.loads(found.read_text("direct_url.json") or "{}").get(
        "dir_info", {}).get("editable", False)
  except (importlib.metadata.PackageNotFoundError, OSError, ValueError, AttributeError):
    return None
  if not listed or editable:
    return None
  digest = hashlib.sha256(listed.encode("utf-8", "surrogateescape")).hexdigest()
  return f"{found.version} {found.locate_file('')} {digest}"


def _recorded(record: pathlib.Path) -> bytes | None:
  """The bytes of a name's record, read as untrusted input; None when there is none."""
  try:
    return atomic_files.read_back(record, _MAX_RECORD)
  except (OSError, atomic_files.NotAFileOfOurs):  # (none, a link, a FIFO, too large)
    return None



def named_builder(base: type, name: str, version: str, *, source: str, about: About,
                  default_description: Callable[[tfds.features.FeaturesDict], str],
                  metadata: dict, **attributes) -> type:
  """A subclass of `base` for NAME:VERSION, not registered: its card from `about` (else
  `default_description(features)`), `metadata` added to what the build records, and the
  class `attributes` the build reads (its options, the source it listed)."""

  class NamedBuilder(base, skip_registration=True):
    VERSION = tfds.core.Version(version)
    RELEASE_NOTES = {version: f"Built from {source}."}

    def _dataset_info(self, **fields):
      return tfds.core.DatasetInfo(
          builder=self, homepage=about.homepage or None, citation=about.citation,
          description=about.description or default_description(fields["features"]),
          **fields)

    def _log_download_bytes(self):
      pass  # build() said what it builds: images, classes, target folder

    def _log_download_done(self):
      pass  # the caller sums the build up (counts, skipped files, how to read it)

    def _finish_generation(self, report):
      super()._finish_generation(report)
      # (how its records were made: a version built on this one keeps them only if alike)
      self.info.metadata.update({incremental.RECORDS_KEY: incremental.RECORDS, **metadata})

    def _check_prepared(self):
      # Another build of NAME:VERSION finished first (they take turns on its lock): this one
      # is done only when that version is built from this content.
      super()._check_prepared()
      if metadata.get("content_fingerprint") is not None:
        refuse_other_content(pathlib.Path(self.data_path), metadata["content_fingerprint"],
                             metadata.get("content_files"), metadata.get("content_options"))

  for key, value in attributes.items():
    setattr(NamedBuilder, key, value)
  NamedBuilder.name = name
  return NamedBuilder



def stored_metadata(version_dir: pathlib.Path) -> dict:
  """A prepared version's metadata.json; {} when it has none."""
  try:
    stored = json.loads((version_dir / "metadata.json").read_text())
  except FileNotFoundError:
    return {}
  return stored if isinstance(stored, dict) else {}


def stored_fingerprint(version_dir: pathlib.Path) -> str | None:
  return stored_metadata(version_dir).get("content_fingerprint")


# Files are compared by a 64-bit prefix of their sha256: plenty to see a change, and a
# metadata.json of ~50 bytes per file.
_FILE_HASH_CHARS = 16


def short_hashes(hashes: dict[str, str]) -> dict[str, str]:
  """{file: the prefix of its sha256 a version records} (`what_changed` compares them)."""
  return {path: digest[:_FILE_HASH_CHARS] for path, digest in hashes.items()}


def first_ten(items: list[str]) -> str:
  """'a, b, c' or the first ten and how many more."""
  shown = ", ".join(items[:10])
  return shown + (f" and {len(items) - 10} more" if len(items) > 10 else "")


def what_changed(stored: dict, files: dict[str, str], options: dict) -> str:
  """'2 file(s) added: ...; options changed: seed 0 -> 1' against a stored build's metadata."""
  old_files, old_options = stored.get("content_files"), stored.get("content_options")
  if old_files is None or old_options is None:  # built before these were recorded
    return (f"fingerprint {str(stored.get('content_fingerprint'))[:12]}; "
            "this build did not record its file list")
  parts = []
  added = sorted(files.keys() - old_files.keys())
  removed = sorted(old_files.keys() - files.keys())
  changed = sorted(p for p in files.keys() & old_files.keys() if files[p] != old_files[p])
  for label, paths in (("added", added), ("removed", removed), ("changed", changed)):
    if paths:
      parts.append(f"{len(paths)} file(s) {label}: {first_ten(paths)}")
  options = json.loads(json.dumps(options))  # as stored (tuples become lists)
  differ = [f"{key} {old_options.get(key)!r} -> {options.get(key)!r}"
            for key in sorted(options.keys() | old_options.keys())
            if options.get(key) != old_options.get(key)]
  if differ:
    parts.append(f"options changed: {', '.join(differ)}")
  return "; ".join(parts) or "same files and options, other fingerprint"


def skipped_lines(skipped: dict[str, str]) -> list[str]:
  """The build summary's lines naming skipped files: all, or the first ten and a count."""
  paths = sorted(skipped)
  lines = [f"  skipped {path}: {skipped[path]}" for path in paths[:10]]
  if len(paths) > 10:
    lines.append(f"  ... and {len(paths) - 10} more (all in metadata.json: skipped_files)")
  return lines



def already_built(version_dir: pathlib.Path, fingerprint: str, content_files: dict,
                  content_options: dict, log: Callable[[str], None]
                  ) -> tfds.core.DatasetBuilder | None:
  """The prepared version in `version_dir` when it was built from this content; None when
  there is none; VersionExistsError, saying what changed, when it was built from other."""
  if not (version_dir / "dataset_info.json").exists():
    return None
  refuse_other_content(version_dir, fingerprint, content_files, content_options)
  log(f"{version_dir.parent.name}:{version_dir.name} is already built from this content in "
      f"{version_dir.parent.parent}: nothing to do.")
  return tfds.builder_from_directory(version_dir)


def refuse_other_content(version_dir: pathlib.Path, fingerprint: str, content_files: dict,
                         content_options: dict) -> None:
  """VersionExistsError, saying what changed, when the version in `version_dir` was built
  from content of another fingerprint."""
  stored = stored_metadata(version_dir)
  if stored.get("content_fingerprint") != fingerprint:
    latest = incremental.versions_in(version_dir.parent)[-1]
    major, minor, _ = (int(part) for part in latest.split("."))
    raise VersionExistsError(
        f"{version_dir.parent.name}:{version_dir.name} in {version_dir.parent.parent} was "
        "built from other content or options "
        f"({what_changed(stored, content_files, content_options)}): build a new version "
        f"(the latest there is {latest}: --version {major}.{minor + 1}.0), or delete "
        f"{version_dir} first.")
