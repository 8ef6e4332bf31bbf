"""A team's own images and labeling-tool annotations as a dataset of the team's own name.

    imagesets build /data/parts/images --name parts --annotations /data/parts/instances.json
    tfds.load("parts:1.0.0", data_dir="~/tensorflow_datasets")   # no imagesets needed

The build is the annotated builder (`building.annotated_builder`) as a class made for NAME
and VERSION and never registered, as `class_folders.named_build` makes class folders. A
version is never rebuilt from other content: its fingerprint covers the annotated images'
bytes, what the annotation file says (`annotation_digest`) and the options; the same content is a
no-op, other content is refused, saying what changed.

A new version is built on the one before (`from_version`, `building.incremental`): an
image's record is kept, not made again, while its bytes, its split and what its entry says
(`entry_digests`, recorded per image: class ids, boxes, flags, mask bytes) are the same,
and the annotations' layout (`layout`: task, flags, masks) is.
"""

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import pathlib
from typing import Callable

from absl import logging
import tensorflow_datasets as tfds

from imagesets import constants
from imagesets.annotations import objects
from imagesets.building import annotated_builder
from imagesets.building import fingerprints
from imagesets.building import incremental
from imagesets.building import parallel_map
from imagesets.building import problems
from imagesets.building import record_index
from imagesets.building import splits
from imagesets.building import stat_cache
from imagesets.building import named_versions

ANNOTATIONS_KEY = "<annotations>"  # the annotation file's entry among a version's content files


def mask_hashes(annotations: objects.Annotations) -> dict[str, str]:
  """{image: sha256 of its mask file} of a mask folder's entries (read whole: a mask's
  pixels are what the build stores of it, not its path). A mask that cannot be read is
  "unreadable: why" here: the build's worker finds it a bad item of its image, named and
  skipped or stopping the build as every bad image is."""
  named = {name: entry.mask for name, entry in annotations.entries.items() if entry.mask}
  with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
    paths = sorted(set(named.values()))
    hashes = dict(zip(paths, pool.map(_file_sha256, paths)))
  return {name: hashes[path] for name, path in named.items()}


def _file_sha256(path: str) -> str:
  try:
    return record_index.sha256_of(path)
  except OSError as error:
    return f"unreadable: {error.strerror or error}"


def said(annotations: objects.Annotations, masks: dict[str, str]) -> dict:
  """What the annotation file says, as plain data (what `annotation_digest` and
  `entry_digests` hash): `annotations` without where it is, each entry's mask file by its
  bytes' hash (`mask_hashes`)."""
  said = _plain(annotations)
  del said["source"]  # (where the file is: not what it says)
  for name, digest in masks.items():
    said["entries"][name]["mask"] = digest
  return said


def _plain(value):
  """`value` as the plain data JSON writes (dataclasses as dicts of their fields): what
  `dataclasses.asdict` gives, without its deep copy of every number (a third of a build's
  serial time on 800 images)."""
  if dataclasses.is_dataclass(value) and not isinstance(value, type):
    return {field.name: _plain(getattr(value, field.name))
            for field in dataclasses.fields(value)}
  if isinstance(value, (list, tuple)):
    return [_plain(item) for item in value]
  if isinstance(value, dict):
    return {key: _plain(item) for key, item in value.items()}
  return value


def annotation_digest(said: dict) -> str:
  """sha256 of what the annotation file says (`said`), as read (`formats.read`): the
  format, task, class and flag names, every entry's boxes, labels, flags and mask file's
  bytes, the fixed boxes and the unlisted images. Exactly what the build stores from the
  file, whichever files gave it (a YOLO names file beside its labels, every XML of a VOC
  folder), and nothing it ignores."""
  return _sha256(said)


def entry_digests(said: dict) -> dict[str, str]:
  """{image: a prefix of the sha256 of what its entry says} (of `said`): a version built
  on this one keeps an image's record only while its entry's is the same."""
  return named_versions.short_hashes(
      {name: _sha256(entry) for name, entry in said["entries"].items()})


def _sha256(said) -> str:
  return hashlib.sha256(json.dumps(said, sort_keys=True).encode()).hexdigest()


def fingerprint_options(options: annotated_builder.AnnotatedConfig, file_format: str) -> dict:
  """The options that change the stored bytes: every field AnnotatedConfig adds to TFDS's
  BuilderConfig but the folders' locations, and the file format."""
  inherited = {field.name for field in dataclasses.fields(tfds.core.BuilderConfig)}
  # (The format given or detected: the digest has the one read.)
  return {**{field.name: getattr(options, field.name)
             for field in dataclasses.fields(annotated_builder.AnnotatedConfig)
             if field.name not in inherited | {"images", "annotations", "format"}},
          "file_format": file_format}


def layout(annotations: objects.Annotations) -> dict:
  """What the records' structure rests on beside the class names (as JSON stores it): the
  task, the objects' flags and the masks' source. A version is built on another of the
  same layout only."""
  masks = dataclasses.asdict(annotations.masks) if annotations.masks is not None else None
  if masks and masks["kind"] == "objects":
    # (the objects' classes, id + 1: records hold the ids, as the objects' labels. A mask
    # folder's class list stays: it decides which pixel values are bad.)
    del masks["class_names"]
  return json.loads(json.dumps({
      "task": annotations.task, "flag_names": list(annotations.flag_names),
      "flag_classes": {name: list(names) for name, names in annotations.flag_classes.items()},
      "masks": masks}))


def rule(base: incremental.Base, annotations: objects.Annotations,
         digests: dict[str, str]) -> incremental.Rule:
  """`incremental.Rule` of a build of `annotations` on `base`: an image's record is kept
  while its entry's digest (`entry_digests`: its boxes, label ids, flags, mask bytes) is
  the one `base` recorded (records hold class ids, not names: a renamed class keeps them,
  a renumbered one changes the digest); NotABase for a base of another layout or without
  digests."""
  stored, stored_layout = (base.metadata.get("annotation_digests"),
                           base.metadata.get("annotation_layout"))
  if stored is None or stored_layout is None:
    raise incremental.NotABase(f"{base.spec} records no per-image annotations (built before "
                               "imagesets recorded them)")
  if not (isinstance(stored, dict) and isinstance(stored_layout, dict)):
    raise incremental.NotABase(f"{base.spec}: its metadata.json's annotation_digests or "
                               "annotation_layout is not as a build writes it")
  differ = [key for key, value in layout(annotations).items() if stored_layout.get(key) != value]
  if differ:
    raise incremental.NotABase(f"{base.spec} has annotations of another layout (its "
                               f"{', '.join(differ)} differ)")
  single = annotations.task == "classification"
  kept = lambda name: stored.get(name) == digests[name]
  return incremental.Rule(
      kept=kept,
      # (the label its record holds: a kept one's is its entry's; another's is not known)
      label_id=lambda name: (annotations.entries[name].labels[0]
                             if single and name in annotations.entries and kept(name)
                             else incremental.UNCHECKED if single else None),
      label=annotated_builder.labeller(annotations))


def _description(annotations: objects.Annotations, images: str) -> str:
  shown = ", ".join(annotations.class_names[:20]) + (
      ", ..." if len(annotations.class_names) > 20 else "")
  return (f"{len(annotations.entries)} images of {images} with {annotations.format} "
          f"annotations ({annotations.task}; {len(annotations.class_names)} classes: "
          f"{shown}), built with imagesets.")


def build(images: str, annotations: str, name: str, *, version: str = "1.0.0",
          data_dir: str | None = None,
          options: annotated_builder.AnnotatedConfig | None = None,
          about: named_versions.About | None = None, file_format: str = "tfrecord",
          beam_options=None, log: Callable[[str], None] = logging.info,
          check_registered: bool = True,
          from_version: str | None = incremental.FULL) -> tfds.core.DatasetBuilder:
  """Builds `images` with `annotations` as NAME:VERSION into `data_dir`; returns the
  prepared builder. Raises `problems.InvalidSourceError` listing every bad annotation
  before any image is read, and VersionExistsError when NAME:VERSION there was built from
  other content. `from_version` (incremental.LATEST or "X.Y.Z" in `data_dir`): the version
  is built on that one, or, when it cannot be, in full, saying why."""
  # (reading allocates an object a number, and so does the build: with the objects that
  # exist now frozen and young collections batched, no full collection walks them, nor
  # what the build keeps; the name's lookup runs batched too)
  with parallel_map.frozen_gc():
    data_dir = constants.data_dir(data_dir)
    name_checked = named_versions.check_name(name, registered=check_registered,
                                             data_dir=data_dir)
    tfds.core.Version(version)  # raises on a malformed version
    options = dataclasses.replace(
        options or annotated_builder.AnnotatedConfig(name=name), name=name,
        images=str(pathlib.Path(images).expanduser().resolve()),
        annotations=str(pathlib.Path(annotations).expanduser().resolve()))
    splits.validate(options.split_proportions)  # before anything is read, printed or written
    source = annotated_builder.read_source(options)
    read = source.annotations
    problems.raise_if_any(annotated_builder.annotation_problems(read), source=read.source,
                          fix=annotated_builder.ANNOTATION_FIX)
    # (only a build on a base trusts the cache: a full build reads every photo)
    hashed = fingerprints.cached_file_hashes(options.images, sorted(read.entries),
                                             stat_cache.beside(data_dir, name),
                                             reread=from_version == incremental.FULL)
    hashes = hashed.hashes
    content_options = fingerprint_options(options, file_format)
    described = said(read, mask_hashes(read))
    digest = annotation_digest(described)
    fingerprint = fingerprints.content(options.images, sorted(read.entries),
                                       {**content_options, ANNOTATIONS_KEY: digest},
                                       hashes=hashes)
    content_files = {**named_versions.short_hashes(hashes),
                     **named_versions.short_hashes({ANNOTATIONS_KEY: digest})}
    version_dir = pathlib.Path(data_dir) / name / version
    built = named_versions.already_built(version_dir, fingerprint, content_files,
                                      content_options, log)
    if built is not None:
      hashed.save()
      name_checked.save()
      return built
    digests = entry_digests(described)
    plan = _plan(data_dir, name, version, from_version, log, read, digests,
                 options, hashes, content_options)
    log(f"building {name}:{version}: {len(read.entries)} images with {read.format} "
        f"annotations ({read.task}, {len(read.class_names)} classes) of {options.images}, "
        f"into {version_dir}" + (f"; {plan.summary()}" if plan else ""))
    cls = named_versions.named_builder(
        annotated_builder.AnnotatedBuilder, name, version, source=options.images,
        about=about or named_versions.read_about(options.images),
        default_description=lambda features: _description(read, options.images),
        metadata={"content_fingerprint": fingerprint, "content_files": content_files,
                  "content_options": content_options, "annotation_digests": digests,
                  "annotation_layout": layout(read)},
        OPTIONS=options, SOURCE=source, HASHES=hashes, PLAN=plan)
    builder = cls(data_dir=data_dir, file_format=file_format)
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
        beam_options=beam_options))
    hashed.save()   # (after the build: a failed first build leaves no folder)
    name_checked.save()
    return builder


def _plan(data_dir, name, version, from_version, log, read, digests, options,
          hashes, content_options) -> incremental.Plan | None:
  """What this version keeps of the one it is built on and what it makes; None: in full."""
  base = incremental.base_for(data_dir, name, version, from_version, "", log)
  if base is None:
    return None
  try:
    return incremental.plan(base, annotated_builder.assign(options, read, hashes), hashes,
                            rule(base, read, digests), content_options,
                            fingerprints_needed=True)
  except incremental.NotABase as why:
    log(f"building {name}:{version} in full, not on {base.spec}: {why}")
    return None
