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

import contextlib
import dataclasses
import pathlib
from typing import Callable

from absl import logging
import tensorflow_datasets as tfds

from imagesets import constants
from imagesets.analysis import image_hashes
from imagesets.building import class_folders_builder
from imagesets.building import named_versions
from imagesets.building import class_folders_tree
from imagesets.building import fingerprints
from imagesets.building import incremental
from imagesets.building import parallel_map
from imagesets.building import sharding
from imagesets.building import splits
from imagesets.building import stat_cache
# The names every named build shares, where callers of this module have always found them.
from imagesets.building.named_versions import (  # noqa: F401
    ABOUT_FILE, About, VersionExistsError, already_built, check_name, first_ten,
    named_builder, read_about, short_hashes, skipped_lines, stored_fingerprint, what_changed)


def _description(root: str, class_names: list[str]) -> str:
  shown = ", ".join(class_names[:20]) + (", ..." if len(class_names) > 20 else "")
  return (f"Images in {len(class_names)} class folders ({shown}) of {root}, "
          "built with imagesets.")


def builder_class(name: str, version: str, options: class_folders_builder.ClassFoldersConfig,
                  about: About, fingerprint: str,
                  listing: class_folders_builder.Listing | None = None,
                  content_files: dict | None = None, content_options: dict | None = None
                  ) -> type[class_folders_builder.ClassFoldersBuilder]:
  """A builder for NAME:VERSION of `options.root`; not registered with TFDS."""
  return named_builder(
      class_folders_builder.ClassFoldersBuilder, name, version, source=options.root,
      about=about, default_description=lambda features: _description(
          options.root, features["label"].names),
      # What a refused rebuild compares against, to say what changed.
      metadata={"content_fingerprint": fingerprint, "content_files": content_files,
                "content_options": content_options},
      OPTIONS=options, LISTING=listing)


def fingerprint_options(options: class_folders_builder.ClassFoldersConfig, file_format: str) -> dict:
  """The options that change the stored bytes: every field ClassFoldersConfig adds to TFDS's
  BuilderConfig but the folder's location, and the file format."""
  inherited = {field.name for field in dataclasses.fields(tfds.core.BuilderConfig)}
  # Fields added later count only when set, so builds made before keep their fingerprints.
  unset_later = {name for name in _ADDED_LATER if not getattr(options, name)}
  if options.leakage != "drop":  # warn, error, off: the same examples are stored
    unset_later.add("leakage")
  if options.split_key == splits.PATH:
    unset_later.add("split_key")
  if options.min_shards == sharding.MIN_SHARDS:
    unset_later.add("min_shards")
  return {**{field.name: getattr(options, field.name)
             for field in dataclasses.fields(class_folders_builder.ClassFoldersConfig)
             if field.name not in inherited | {"root"} | unset_later},
          "file_format": file_format}


# Issues 22, 27 (leakage counts only as "drop"), 29, 40 (split_key counts unless "path",
# min_shards unless sharding.MIN_SHARDS: what versions recording none of them used).
_ADDED_LATER = ("image_size", "leakage", "keras_image", "split_key", "min_shards")


# What `build(..., versioned=True)` (`imagesets build`) gives a dataset's first version, and
# every version built on one that recorded it: splits by content (a renamed or relabelled
# photo never changes split), at least 32 shards per split (a relabel rewrites ~1/32 of it).
LATEST_RECIPE = {"split_key": splits.CONTENT, "min_shards": 32}
LATEST, FULL = incremental.LATEST, incremental.FULL  # `build(from_version=)`


def build(root: str, name: str, *, version: str = "1.0.0", data_dir: str | None = None,
          options: class_folders_builder.ClassFoldersConfig | None = None, about: About | None = None,
          file_format: str = "tfrecord", beam_options=None,
          log: Callable[[str], None] = logging.info,
          listing: class_folders_builder.Listing | None = None,
          check_registered: bool = True, keep_order: bool = False,
          progress: str | None = "", versioned: bool = False,
          from_version: str | None = FULL) -> tfds.core.DatasetBuilder:
  """Builds `root` as NAME:VERSION into `data_dir`; returns the prepared builder.

  `listing`: `class_folders_builder.list_tree(root, options)` when the caller has it (the
  tree is then not walked again). `keep_order`: each split's records in `listing.by_split`
  order, not TFDS's hashed order. `check_registered=False` for builds never loaded by name
  (a cache): the lookup of registered TFDS names took 0.9 s. `progress`: what the build's
  progress bar says ("": "building NAME/VERSION"; None: no bar). Raises VersionExistsError
  when NAME:VERSION there was built from other content.

  `versioned` (`imagesets build`): one of a line of versions. Options that leave the split
  recipe unset (split_key "", min_shards 0) get the recipe the version recorded (a rebuild),
  else the base's, else LATEST_RECIPE; a record index is written; and with `from_version`
  (LATEST or "X.Y.Z" in `data_dir`) the version is built on that one (`incremental`), or,
  when it cannot be, in full, saying why.
  """
  # Hashing and building allocate per file: with the objects that exist now frozen and
  # young collections batched, no full collection walks them, nor what the build keeps
  # (parallel_map.frozen_gc); the name's lookup, which imports TFDS's builders, runs
  # batched too (its objects are not frozen: they are few, and batching keeps full
  # collections away from them).
  with parallel_map.frozen_gc():
    data_dir = constants.data_dir(data_dir)
    name_checked = check_name(name, registered=check_registered, data_dir=data_dir)
    tfds.core.Version(version)  # raises on a malformed version
    root = (str(root).rstrip("/") if class_folders_tree.is_remote(root)
            else str(pathlib.Path(root).resolve()))
    options = dataclasses.replace(options or class_folders_builder.ClassFoldersConfig(name=name),
                                  name=name, root=root)
    splits.validate(options.split_proportions)  # before anything is read, printed or written
    with _workers(options, beam_options) as pool:
      tree = (listing.tree if listing
              else class_folders_tree.scan(root, follow_links=options.follow_links))
      cache = stat_cache.beside(data_dir, name)
      reread = from_version == FULL  # (a full build reads every photo)
      # (the workers stat the photos, and look them up in the cache, while the base is read)
      stats = (stat_cache.stat_on(pool, root, tree.images, cache=None if reread else cache)
               if pool is not None and cache is not None else None)
      base = _base(data_dir, name, version, from_version, options, log) if versioned else None
      hashed = fingerprints.cached_file_hashes(root, tree.images, cache, reread=reread,
                                               stats=stats)
      # (the workers are idle now, done with any stats: they import what fingerprints
      # need, ~0.08 s, while the splits and the plan are made here; not before the stats)
      parallel_map.warm(pool, image_hashes.warm_up)
      hashes = hashed.hashes
      if versioned:
        options = _with_recipe(options, pathlib.Path(data_dir) / name / version, base)
        _say_the_split_key(pathlib.Path(data_dir) / name, version, options, log)
      listing = listing or class_folders_builder.Listing(
          tree, class_folders_builder.assign(root, tree, options, hashes))
      built = _build(root, name, version, data_dir, options, about, file_format,
                     beam_options, log, listing, keep_order, progress, hashes, versioned, base,
                     pool, hashed.encode)
    hashed.save()   # (after the build: a failed first build leaves no folder)
    name_checked.save()
  return built


def _base(data_dir, name, version, from_version, options, log):
  """The version this one is built on (`incremental.Base`), or None (a full build)."""
  why = "leakage 'drop' decides over every photo at once" if options.leakage == "drop" else ""
  return incremental.base_for(data_dir, name, version, from_version, why, log)


def _say_the_split_key(dataset_dir: pathlib.Path, version: str, options, log) -> None:
  """A line when this version splits by path: the earlier versions' key (renames and
  relabels may move photos), or a new draw of the splits."""
  earlier = incremental.latest_before(dataset_dir, version)
  if not earlier or splits.check_split_key(options.split_key) != splits.PATH:
    return
  name = dataset_dir.name
  if splits.check_split_key(named_versions.stored_metadata(dataset_dir / earlier).get("split_key", "")
                            ) == splits.PATH:
    log(f"{name}:{version} splits by path, as {name}:{earlier}: a renamed or relabelled "
        "photo may change split (--full --split-key content: by content from this version "
        "on, a new draw of the splits)")
  else:
    log(f"{name}:{version} splits by path, {name}:{earlier} by content: its splits are "
        "drawn again (a new test set)")


def _with_recipe(options, version_dir: pathlib.Path, base):
  """`options` with each part of the split recipe they leave unset ("" or 0) as recorded
  by the version itself when it is built (a rebuild), else by its base, else by the latest
  version below it in the data dir (built in full, its line keeps its recipe: nothing
  moves), else LATEST_RECIPE (a dataset's first version, or `split_key="content"` asked
  for: the whole recipe of today). Nothing recorded is the recipe of versions before
  recipes were recorded: path, sharding.MIN_SHARDS."""
  if (version_dir / "dataset_info.json").exists():
    recorded = named_versions.stored_metadata(version_dir)
  elif base is not None:
    recorded = base.options
  else:
    earlier = incremental.latest_before(version_dir.parent, version_dir.name)
    recorded = named_versions.stored_metadata(version_dir.parent / earlier) if earlier else LATEST_RECIPE
  if options.split_key == splits.CONTENT and recorded.get("split_key") != splits.CONTENT:
    recorded = LATEST_RECIPE  # (moving a line to the content key: today's recipe whole)
  unset = {key: recorded.get(key, type(value)()) for key, value in LATEST_RECIPE.items()
           if not getattr(options, key)}
  return dataclasses.replace(options, **unset)


def _workers(options: class_folders_builder.ClassFoldersConfig, beam_options):
  """The build's worker processes: they stat the tree while the base is read, then warm up
  (`build`); none for a Beam build or one whose work runs on threads (the builder starts
  its own)."""
  if beam_options is not None or class_folders_builder.works_in_threads(options):
    return contextlib.nullcontext()
  return parallel_map.executor()


def _build(root, name, version, data_dir, options, about, file_format, beam_options, log,
           listing, keep_order, progress, hashes, versioned, base, pool, while_grouping=None):
  tree = listing.tree
  content_options = fingerprint_options(options, file_format)
  fingerprint = fingerprints.content(root, tree.images, content_options, hashes=hashes)
  content_files = short_hashes(hashes)
  version_dir = pathlib.Path(data_dir) / name / version
  built = already_built(version_dir, fingerprint, content_files, content_options, log)
  if built is not None:
    return built
  plan = None
  if base is not None:
    try:
      plan = incremental.plan(base, listing.by_split, hashes,
                              incremental.folder_rule(base, tree.class_names), content_options,
                              fingerprints_needed=(options.leakage or "warn") != "off")
    except incremental.NotABase as why:
      log(f"building {name}:{version} in full, not on {base.spec}: {why}")
  log(f"building {name}:{version}: {len(tree.images)} images in {len(tree.class_names)} class "
      f"folders of {root}, into {version_dir}" + (f"; {plan.summary()}" if plan else ""))
  cls = builder_class(name, version, options, about or read_about(root), fingerprint,
                      listing, content_files, content_options)
  cls.KEEP_ORDER = keep_order
  cls.PROGRESS = progress
  cls.RECORD_INDEX = versioned
  cls.PLAN = plan
  cls.POOL = pool
  cls.WHILE_GROUPING = while_grouping
  builder = cls(data_dir=data_dir, file_format=file_format)
  try:
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
        beam_options=beam_options))
  finally:
    cls.POOL = None  # (the pool ends with this build; a later call on the builder makes its own)
    cls.WHILE_GROUPING = None
  return builder
