"""A team's own class-per-folder photos as a dataset of the team's own name and version.

    imagesets build /data/pets --name pets --version 1.0.0
    tfds.load("pets:1.0.0", data_dir="~/tensorflow_datasets")   # no imagesets needed

The build is the class-folder builder every folder build uses (validation, bad-file
report, hashed splits, reproducible bytes, progress bars, Beam), as a builder class made
for NAME and VERSION and never registered. TFDS reads prepared datasets without their
code, so any process loads `NAME:VERSION` from the data dir.

What the dataset says about itself comes from the options or from `imagesets.toml` in
the folder (description, citation, homepage); its metadata records the source folder,
class names, examples per class, skipped, converted and ignored files, and the content
fingerprint (`fingerprints.content`). A version is never rebuilt from other content:
the same content is a no-op, different content is refused (bump the version).
"""

import dataclasses
import json
import os
import pathlib
import re
import tomllib
from typing import Callable

from absl import logging
import tensorflow_datasets as tfds

from imagesets.building import class_folders_builder
from imagesets.building import class_folders_tree
from imagesets.building import fingerprints

ABOUT_FILE = "imagesets.toml"
DEFAULT_DATA_DIR = os.path.join("~", "tensorflow_datasets")
_NAME = re.compile(r"[a-z][a-z0-9_]*")


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


def check_name(name: str) -> None:
  if not _NAME.fullmatch(name):
    raise ValueError(f"dataset name {name!r}: use lower case letters, digits and _, "
                     "starting with a letter (e.g. 'pets' or 'factory_parts')")
  if name in tfds.list_builders(with_community_datasets=False):
    raise ValueError(f"dataset name {name!r} is taken by a registered TFDS builder "
                     "(tfds.load would use that builder): choose another name")


def _description(about: About, root: str, class_names: list[str]) -> str:
  if about.description:
    return about.description
  shown = ", ".join(class_names[:20]) + (", ..." if len(class_names) > 20 else "")
  return (f"Images in {len(class_names)} class folders ({shown}) of {root}, "
          "built with imagesets.")


def builder_class(name: str, version: str, options: class_folders_builder.ClassFoldersConfig,
                  about: About, fingerprint: str) -> type[class_folders_builder.ClassFoldersBuilder]:
  """A builder for NAME:VERSION of `options.root`; not registered with TFDS."""

  class NamedFolderBuilder(class_folders_builder.ClassFoldersBuilder, skip_registration=True):
    VERSION = tfds.core.Version(version)
    RELEASE_NOTES = {version: f"Built from {options.root}."}
    OPTIONS = options

    def _dataset_info(self, **fields):
      return tfds.core.DatasetInfo(
          builder=self, homepage=about.homepage or None, citation=about.citation,
          description=_description(about, options.root, fields["features"]["label"].names),
          **fields)

    def _finish_generation(self, report):
      super()._finish_generation(report)
      self.info.metadata["content_fingerprint"] = fingerprint

  NamedFolderBuilder.name = name
  return NamedFolderBuilder


def fingerprint_options(options: class_folders_builder.ClassFoldersConfig, file_format: str) -> dict:
  """The options that change the stored bytes: every field ClassFoldersConfig adds to TFDS's
  BuilderConfig but the folder's location, and the file format."""
  inherited = {field.name for field in dataclasses.fields(tfds.core.BuilderConfig)}
  # Fields added later count only when set, so builds made before keep their fingerprints.
  unset_later = {name for name in _ADDED_LATER if not getattr(options, name)}
  return {**{field.name: getattr(options, field.name)
             for field in dataclasses.fields(class_folders_builder.ClassFoldersConfig)
             if field.name not in inherited | {"root"} | unset_later},
          "file_format": file_format}


_ADDED_LATER = ("image_size",)  # issue 22


def stored_fingerprint(version_dir: pathlib.Path) -> str | None:
  try:
    return json.loads((version_dir / "metadata.json").read_text()).get("content_fingerprint")
  except FileNotFoundError:
    return None


def build(root: str, name: str, *, version: str = "1.0.0", data_dir: str | None = None,
          options: class_folders_builder.ClassFoldersConfig | None = None, about: About | None = None,
          file_format: str = "tfrecord", beam_options=None,
          log: Callable[[str], None] = logging.info) -> tfds.core.DatasetBuilder:
  """Builds `root` as NAME:VERSION into `data_dir`; returns the prepared builder.

  Raises VersionExistsError when NAME:VERSION there was built from other content.
  """
  check_name(name)
  tfds.core.Version(version)  # raises on a malformed version
  root = str(root).rstrip("/") if class_folders_tree.is_remote(root) else str(pathlib.Path(root).resolve())
  options = dataclasses.replace(options or class_folders_builder.ClassFoldersConfig(name=name),
                                name=name, root=root)
  data_dir = os.path.expanduser(data_dir or DEFAULT_DATA_DIR)
  tree = class_folders_tree.scan(root, follow_links=options.follow_links)
  fingerprint = fingerprints.content(root, tree.images, fingerprint_options(options, file_format))
  version_dir = pathlib.Path(data_dir) / name / version
  if (version_dir / "dataset_info.json").exists():
    stored = stored_fingerprint(version_dir)
    if stored != fingerprint:
      raise VersionExistsError(
          f"{name}:{version} in {data_dir} was built from other content or options "
          f"(fingerprint {str(stored)[:12]}, now {fingerprint[:12]}): build a new version "
          f"(--version with a higher number), or delete {version_dir} first.")
    log(f"{name}:{version} is already built from this content in {data_dir}: nothing to do.")
    return tfds.builder_from_directory(version_dir)
  cls = builder_class(name, version, options, about or read_about(root), fingerprint)
  builder = cls(data_dir=data_dir, file_format=file_format)
  builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
      beam_options=beam_options))
  return builder
