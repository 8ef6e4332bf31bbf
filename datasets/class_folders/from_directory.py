"""`image_dataset_from_directory`: keras' call, read from a cached build of the folder.

    import imagesets
    train, val = imagesets.image_dataset_from_directory(
        "photos/", validation_split=0.2, subset="both", seed=1337,
        image_size=(224, 224), batch_size=64)

Same signature, outputs (float32 images 0-255 of `image_size`; int32 / one-hot float32 /
float32 [1] labels), `class_names` attribute and split sizes as
`keras.utils.image_dataset_from_directory`, for `format="tf"` (tf.data) and `format="grain"`
(a grain.IterDataset of keras backend tensors), so switching is an import swap. Underneath:

* The first call builds the folder into a TFDS dataset in the cache (progress bars, every
  file decoded: a file TensorFlow cannot decode is an error naming it, not a crash
  mid-epoch). Its name is keyed by the folder, the options that change the stored bytes
  and the tree's listing (relative paths, sizes, mtimes: rsync's quick check, no file is
  read), so later calls and epochs read the build, and an added, removed, renamed or
  edited file gets a new build. A file replaced by one of the same size with its mtime
  kept is seen only with `content_check=True` (every file hashed, compared with the
  build's content fingerprint). Each call removes the builds of the folder's older trees
  and keeps MAX_CACHED_BUILDS, the least recently used going first, but never removes a
  build a process still reads or builds (`cache_use`); a second process on a cold folder
  waits for the first's build and reuses it.
* Stored as keras returns it (`keras_pixels`): each image is decoded and resized once, at
  build time, with keras' own TensorFlow ops (`image_size`, `interpolation`,
  `crop_to_aspect_ratio`, `pad_to_aspect_ratio`, `color_mode`), and stored as raw uint8
  pixels (TFRecord for tf.data, ArrayRecord for Grain's random access: one build per
  format). A later epoch reads and casts; it neither decodes nor resizes. Another `image_size`, interpolation,
  fit or colour mode is another build.
* Files, order and subsets as keras' index_directory: classes in `class_names` order
  (a subset of the folders reads only those), each walked as keras walks it; with
  `shuffle` the list is shuffled by np.random.RandomState(seed); the last
  int(validation_split * n) files are the validation subset. Each split is stored in that
  order and read back sequentially, so `file_paths` is keras' `file_paths` and, with
  shuffle=False, the output order; with shuffle, a buffer of 8 x batch_size shuffles it
  anew each epoch, as keras. The order (class_names, shuffle, seed, split) is part of
  the cache key.

Differences (documented, tested): pixels are keras' float32 values rounded to integers
(at most 0.5 apart; more only where bicubic/lanczos ringing leaves 0-255, which uint8
clips); format="grain" gives the same pixels as format="tf" (keras' grain route decodes
with PIL and resizes with keras.ops: JPEGs a few levels apart, grey PNGs up to ~28, padding
one row apart; see docs/class_folders.md); the shuffle order
differs (keras' buffer is fed by its decoding pipeline); bad files stop
the first call unless `skip_bad_files=True`; the tf.data datasets (and the build's
decoding) run with tf.data's autotuning off (`keras_pixels.without_autotune`: its thread
made the end of every epoch wait, up to the epoch's own time), which holds for what is
chained after them unless the caller turns it back on with `ds.with_options(...)`.
Unsupported arguments raise ValueError saying what to do.
"""

import dataclasses
import os
import pathlib
import posixpath
import re

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from imagesets import constants
from imagesets.building import build_lock
from imagesets.building import class_folders_builder
from imagesets.building import class_folders_tree
from imagesets.building import fingerprints
from imagesets.building import keras_pixels
from imagesets.class_folders import cache_use
from imagesets.class_folders import named_build

MAX_CACHED_BUILDS = 4  # builds kept in the cache; the least recently used go first
VERSION = "1.0.0"
# The cache's file format per keras format: Grain reads by index (ArrayRecord); tf.data
# reads TFRecords, which TFDS writes uncompressed (its ArrayRecord writer compresses: raw
# pixels shrink by 8 % for 1 ms more CPU an image to write and 0.2 ms to read, measured).
FILE_FORMATS = {"tf": "tfrecord", "grain": "array_record"}
_SUBSETS = {"training": "train", "validation": "validation"}
_INTERPOLATIONS = ("bilinear", "nearest", "bicubic", "area", "lanczos3", "lanczos5",
                   "gaussian", "mitchellcubic")
_REMOVED = object()  # the default of arguments that no longer do anything


def default_cache_dir() -> pathlib.Path:
  return constants.cache_root() / "from_directory"


def _check_arguments(labels, label_mode, class_names, color_mode, image_size, interpolation,
                     validation_split, subset, shuffle, seed, crop, pad, data_format, fmt,
                     store_resized):
  if store_resized is not _REMOVED:
    raise ValueError("store_resized was removed: every build now stores images exactly as "
                     "keras returns them; leave the argument out")
  if isinstance(labels, (list, tuple)):
    raise ValueError("labels as a list is not supported: put each class's files in a folder "
                     "of its own and use labels='inferred' (or keras.utils for label lists)")
  if labels not in ("inferred", None):
    raise ValueError(f"labels must be 'inferred' or None, not {labels!r}")
  if class_names and labels != "inferred":
    raise ValueError("class_names can only be given with labels='inferred'")
  if class_names and label_mode is None:  # keras: label_mode=None means labels=None
    raise ValueError("When `labels=None` (no labels), argument `class_names` cannot be "
                     "specified.")
  if label_mode not in ("int", "categorical", "binary", None):
    raise ValueError(f"label_mode must be 'int', 'categorical', 'binary' or None, "
                     f"not {label_mode!r}")
  if color_mode not in keras_pixels.CHANNELS:
    raise ValueError(f"color_mode must be one of {tuple(keras_pixels.CHANNELS)}, "
                     f"not {color_mode!r}")
  if len(image_size) != 2:
    raise ValueError(f"image_size must be (height, width), not {image_size!r}")
  if interpolation not in _INTERPOLATIONS:
    raise ValueError(f"interpolation must be one of {_INTERPOLATIONS}, not {interpolation!r}")
  if validation_split and not 0 < validation_split < 1:
    raise ValueError(f"validation_split must be between 0 and 1, not {validation_split}")
  if bool(validation_split) != bool(subset):
    raise ValueError("If subset is set, validation_split must be set, and inversely.")
  if subset not in ("training", "validation", "both", None):
    raise ValueError(f"subset must be 'training', 'validation' or 'both', not {subset!r}")
  if validation_split and shuffle and seed is None:
    raise ValueError("with validation_split and shuffle, give a seed, so that the training "
                     "and validation subsets do not overlap across calls")
  if crop and pad:
    raise ValueError("only one of crop_to_aspect_ratio and pad_to_aspect_ratio can be True")
  if data_format not in (None, "channels_last", "channels_first"):
    raise ValueError(f"data_format must be 'channels_last' or 'channels_first', "
                     f"not {data_format!r}")
  if fmt not in ("tf", "grain"):
    raise ValueError(f"format must be 'tf' (tf.data) or 'grain' (grain.IterDataset), "
                     f"not {fmt!r}")


def _cache_name(directory: str, options_key: str, listing: str) -> str:
  """`folder_<folder name>_<folder and options>_<tree>`: builds of one folder with the same
  options share the middle part, so a build of an older tree is found and removed."""
  base = re.sub(r"[^a-z0-9]+", "_", pathlib.Path(directory).name.lower()).strip("_")
  return f"folder_{base[:40]}_{options_key[:8]}_{listing[:16]}".replace("__", "_")


def _slot(name: str) -> str:
  """The cache name without its tree part: the same folder and options."""
  return name.rsplit("_", 1)[0]


def _mtime(entry: pathlib.Path) -> int:
  try:
    return entry.stat().st_mtime_ns
  except FileNotFoundError:  # removed by another process since the listing
    return -1


def _evict(cache_dir: pathlib.Path, keep: str) -> None:
  """Removes builds of older trees of `keep`'s folder and options, then the least recently
  used builds beyond MAX_CACHED_BUILDS; a build in use or being built anywhere is skipped
  (`cache_use`), so the cache may hold more for a while."""
  entries = [entry for entry in cache_dir.glob("folder_*") if entry.name != keep]
  old_trees = [entry for entry in entries if _slot(entry.name) == _slot(keep)]
  others = sorted((entry for entry in entries if entry not in old_trees), key=_mtime,
                  reverse=True)
  for entry in old_trees + others[MAX_CACHED_BUILDS - 1:]:
    cache_use.remove_unless_used(entry)


def _class_order(folders, class_names):
  """Label of each stored class (`folders`: sorted, as the build stores them) in the user's
  `class_names` order (keras 3.15: a subset of the folders, only those read)."""
  if not class_names:
    return list(folders), None
  if not set(class_names) <= set(folders):
    raise ValueError("The `class_names` passed did not match the names of the subdirectories "
                     f"of the target directory. Expected: {list(folders)} (or a subset of "
                     f"it), but received: class_names={list(class_names)}")
  names = list(class_names)
  return names, [names.index(name) if name in names else 0 for name in folders]


def keras_listing(tree, class_names, shuffle, seed, validation_split, by_class=True):
  """The files of keras' index_directory in its order, split as keras splits them: as keras
  walks (folders sorted by path, then file names), each class folder in turn in
  `class_names` order (`by_class`), or the root at once (labels=None: "a-b/" before "a/x/");
  shuffled by np.random.RandomState(seed) when `shuffle`; the last int(split * n) are the
  validation files. Each split is stored, and read back, in this order."""
  names = list(class_names or tree.class_names)
  rank = {name: i for i, name in enumerate(names)}
  paths = sorted((path for path in tree.images if class_folders_tree.label_of(path) in rank),
                 key=lambda path: (posixpath.dirname(path), posixpath.basename(path)))
  if by_class:  # stable: each class keeps its walk order
    paths.sort(key=lambda path: rank[class_folders_tree.label_of(path)])
  if shuffle:
    np.random.RandomState(seed).shuffle(paths)
  tree = dataclasses.replace(tree, images=sorted(paths))
  if not validation_split:
    return class_folders_builder.Listing(tree, {"train": paths})
  train = len(paths) - int(validation_split * len(paths))
  return class_folders_builder.Listing(tree, {"train": paths[:train],
                                              "validation": paths[train:]})


def _check_binary(label_mode, names):
  if label_mode == "binary" and len(names) != 2:
    raise ValueError(f'When passing label_mode="binary", there must be exactly 2 '
                     f"class_names. Received: class_names={names}")


def _built(directory, options, file_format, cache_dir, verbose, content_check, order,
           label_mode):
  """(listing, prepared builder) of `directory` with `options`: one walk of the tree, one
  split as keras (`order`: class_names, shuffle, validation_split, and "walk": "root"
  without labels); built once per tree, options and order. `label_mode` is checked
  against the classes before anything is built, as keras checks it."""
  tree = class_folders_tree.keras_scan(directory, follow_links=options.follow_links)
  names, _ = _class_order(tree.class_names, order["class_names"])
  _check_binary(label_mode, names)
  listing = keras_listing(tree, order["class_names"], order["shuffle"], options.seed,
                          order["validation_split"], by_class="walk" not in order)
  key_options = named_build.fingerprint_options(options, file_format)
  name = _cache_name(directory, fingerprints.options_digest(
      {**key_options, "root": directory, "keras_order": {**order, "class_names": names}}),
                     fingerprints.listing(directory, listing.tree.images, key_options))
  version_dir = cache_dir / name / VERSION
  cache_use.hold(cache_dir / name)  # before anything is read: no other call removes it now
  while True:
    if (version_dir / "dataset_info.json").exists():
      if not content_check or named_build.stored_fingerprint(version_dir) == (
          fingerprints.content(directory, listing.tree.images, key_options)):
        os.utime(cache_dir / name)  # recently used: evicted last
        _evict(cache_dir, name)  # also what earlier calls left because it was in use
        return listing, tfds.builder_from_directory(version_dir)
      _remove_stale(cache_dir / name, directory, verbose)
    if verbose:
      print(f"Building {len(listing.tree.images)} files of {directory} into the cache "
            f"({cache_dir}); later calls read the build.")
    try:
      builder = named_build.build(directory, name, version=VERSION, data_dir=str(cache_dir),
                                  options=options, listing=listing, file_format=file_format,
                                  check_registered=False,  # read by path, never by name
                                  keep_order=True,  # keras' order: read back sequentially
                                  progress=f"caching {directory}" if verbose else None,
                                  about=named_build.About(
                                      description=f"Cache of {directory} for "
                                      "image_dataset_from_directory."))
    except build_lock.BuildInProgressError as error:  # another process builds it: reuse
      if verbose:
        print(f"Waiting for {error.owner}'s build of {version_dir}.")
      build_lock.wait(version_dir)
      continue
    _evict(cache_dir, name)
    return listing, builder


def _remove_stale(build: pathlib.Path, directory: str, verbose: bool) -> None:
  """A build whose files' bytes changed (content_check): removed, unless another process
  reads it, which is an error (the old build stays theirs)."""
  cache_use.release(build)
  if not cache_use.remove_unless_used(build):
    raise RuntimeError(f"{directory}: a file changed with its size and modification time "
                       f"kept, and its cache build {build} is in use by another process: "
                       "run this call again once it ends, or give another cache_dir.")
  if verbose:
    print(f"{directory}: a file changed with its size and modification time kept; "
          "rebuilding its cache.")
  cache_use.hold(build)


def _tf_labels_op(label_mode, num_classes, order):
  """keras' labels of a batch (or one element) of stored labels, in TensorFlow."""
  remap = None if order is None else tf.constant(order, tf.int32)

  def op(label):
    label = tf.cast(label, tf.int32)
    if remap is not None:
      label = tf.gather(remap, label)
    if label_mode == "categorical":
      return tf.one_hot(label, num_classes)
    if label_mode == "binary":
      return tf.expand_dims(tf.cast(label, tf.float32), -1)
    return label
  return op


_READ_BUFFER = 256 << 10  # tf.data.TFRecordDataset's default read buffer


def _records(files) -> tf.data.Dataset:
  """The serialized records of the TFRecord `files`, file after file, read by one reader op
  (TensorFlow's, which takes a list). `tf.data.TFRecordDataset` of a list makes a dataset
  of the names and a reader per name in a `flat_map`, whose function is traced at each
  call and instantiated at each epoch's start: 0.03-0.05 s of CPU a call (issue 53)."""
  names = [os.fspath(path) for path in files]
  return tf.data.experimental.from_variant(
      tf.raw_ops.TFRecordDataset(filenames=names, compression_type="",
                                 buffer_size=_READ_BUFFER),
      tf.TensorSpec([], tf.string))


def _batches_of_records(builder, split, *, shuffle, seed, batch_size):
  """The split's serialized examples in batches, in stored order (keras' `file_paths`
  order: already shuffled by the seed when `shuffle`), then as keras through a buffer of
  `8 x batch_size` (1024 without batches), anew each epoch."""
  files = sorted(builder.info.splits[split].filepaths, key=str)  # -00000-of-... in order
  ds = _records(files)
  if shuffle:
    ds = ds.shuffle(8 * batch_size if batch_size else 1024, seed=seed,
                    reshuffle_each_iteration=True)
  return ds.batch(batch_size or _READ_BATCH)


_READ_BATCH = 64  # records fetched and parsed at a time when keras' batch_size is None


def _tf_dataset(builder, split, *, label_mode, num_classes, order, channels_first, dtype,
                shuffle, seed, batch_size):
  """keras' tf.data output. A batch is parsed, and its raw pixels cast, in one op each:
  the per-image work is a copy (~0.2 ms CPU an epoch; TFDS's per-example parser over
  ArrayRecord took 0.4-0.5 ms, measured)."""
  shape = builder.info.features["image"].shape
  spec = {"image": tf.io.FixedLenFeature([], tf.string)}
  if label_mode:
    spec["label"] = tf.io.FixedLenFeature([], tf.int64)
  labels_op = _tf_labels_op(label_mode, num_classes, order)

  @tf.autograph.experimental.do_not_convert  # plain TF ops: converting took 0.75 s a call
  def to_keras(records):
    data = tf.io.parse_example(records, spec)
    image = tf.cast(tf.reshape(tf.io.decode_raw(data["image"], tf.uint8), (-1, *shape)), dtype)
    if channels_first:
      image = tf.transpose(image, (0, 3, 1, 2))
    return (image, labels_op(data["label"])) if label_mode else image

  ds = _batches_of_records(builder, split, shuffle=shuffle, seed=seed, batch_size=batch_size)
  ds = ds.map(to_keras, num_parallel_calls=tf.data.AUTOTUNE)
  if batch_size is None:
    ds = ds.unbatch()
  return ds.prefetch(tf.data.AUTOTUNE).with_options(keras_pixels.without_autotune())


def _grain_dataset(builder, split, *, label_mode, num_classes, order, channels_first, dtype,
                   shuffle, seed, batch_size):
  """keras' format="grain" output: a grain.IterDataset of keras backend tensors (batched
  with keras' own batch function), over the build's ArrayRecord split, shuffled by `seed`."""
  try:
    import grain  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise ValueError("format='grain' needs Grain: pip install grain (or "
                     "'tfds-imagesets[grain]')") from None
  from keras import ops  # pylint: disable=import-outside-toplevel
  from keras.src import backend  # pylint: disable=import-outside-toplevel
  from keras.src.utils.grain_utils import make_batch  # pylint: disable=import-outside-toplevel

  source = builder.as_data_source(split)
  remap = None if order is None else np.asarray(order, np.int32)

  def to_keras(example):
    with backend.device_scope("cpu"):  # as keras' _load_image_grain
      image = ops.convert_to_tensor(example["image"].astype(dtype))
      if channels_first:
        image = ops.transpose(image, (2, 0, 1))
      if not label_mode:
        return image
      label = int(example["label"]) if remap is None else int(remap[example["label"]])
      if label_mode == "binary":
        label = ops.expand_dims(ops.convert_to_tensor(label, dtype="float32"), axis=-1)
      elif label_mode == "categorical":
        label = ops.one_hot(ops.convert_to_tensor(label, dtype="int32"), num_classes)
      else:
        label = ops.convert_to_tensor(label, dtype="int32")
      return image, label

  ds = grain.MapDataset.source(source)
  if shuffle:
    ds = ds.shuffle(seed=seed)
  ds = ds.map(to_keras).to_iter_dataset()
  return ds if batch_size is None else ds.batch(batch_size, batch_fn=make_batch)


def image_dataset_from_directory(
    directory, labels="inferred", label_mode="int", class_names=None, color_mode="rgb",
    batch_size=32, image_size=(256, 256), shuffle=True, seed=None, validation_split=None,
    subset=None, interpolation="bilinear", follow_links=False, crop_to_aspect_ratio=False,
    pad_to_aspect_ratio=False, data_format=None, format="tf", verbose=True, *,
    cache_dir=None, skip_bad_files=False, content_check=False,
    store_resized=_REMOVED):  # pylint: disable=redefined-builtin
  """keras.utils.image_dataset_from_directory, reading a cached, validated build.

  Extra keyword-only arguments: `cache_dir` (default $IMAGESETS_CACHE or
  ~/.cache/imagesets/from_directory), `skip_bad_files` (default: the first call stops
  with one error listing every unreadable file) and `content_check` (default: a cached
  build is reused when every file's path, size and modification time are unchanged;
  True: also when every file's bytes hash the same, which reads every file).
  """
  image_size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
  interpolation = interpolation.lower()
  if data_format is not None:  # keras takes it in any case
    data_format = str(data_format).lower()
  _check_arguments(labels, label_mode, class_names, color_mode, image_size, interpolation,
                   validation_split, subset, shuffle, seed, crop_to_aspect_ratio,
                   pad_to_aspect_ratio, data_format, format, store_resized)
  if labels is None or label_mode is None:  # keras: either means no labels
    labels = label_mode = None
  if data_format is None:  # keras: its configured image_data_format
    import keras  # pylint: disable=import-outside-toplevel
    data_format = keras.config.image_data_format()
  given = os.path.expanduser(os.fspath(directory))  # keras' file_paths are under it
  directory = str(pathlib.Path(given).resolve())
  split_seed = 0 if seed is None else int(seed)  # a build's splits must not change per call
  proportions = ({"train": 1 - validation_split, "validation": validation_split}
                 if validation_split else {"train": 1.0})
  stored = keras_pixels.KerasImage(
      int(image_size[0]), int(image_size[1]), interpolation,
      "crop" if crop_to_aspect_ratio else "pad" if pad_to_aspect_ratio else "stretch",
      color_mode)
  options = class_folders_builder.ClassFoldersConfig(
      name="cache", split_proportions=proportions, seed=split_seed, exact_split_sizes=True,
      skip_bad_files=skip_bad_files, keras_image=stored.as_option(), follow_links=follow_links,
      # A cache of keras' output: keras finds no duplicates, and fingerprinting every image
      # would cost the first call several times its build (`imagesets build` does it).
      leakage="off")
  order = {"class_names": list(class_names) if class_names else None, "shuffle": bool(shuffle),
           "validation_split": validation_split or None}
  if labels is None:  # keras walks the root, not each class folder in turn: its own order
    order["walk"] = "root"
  listing, builder = _built(directory, options, FILE_FORMATS[format],
                            pathlib.Path(cache_dir or default_cache_dir()), verbose, content_check,
                            order, label_mode)
  # The build's own classes: a build of a class_names subset is reused after a folder is
  # added beside it (its files are unchanged), and its stored labels index its classes.
  names, order = _class_order(builder.info.features["label"].names, class_names)
  if verbose:
    total = sum(split.num_examples for split in builder.info.splits.values())
    print(f"Found {total} files belonging to {len(names)} classes." if labels
          else f"Found {total} files.")
  read_seed = int(seed) if seed is not None else int(np.random.randint(1e6))
  subsets = ["training", "validation"] if subset == "both" else [subset or "training"]
  skipped = builder.info.metadata.get("skipped_files", {})
  kept = {split: [path for path in paths if path not in skipped]
          for split, paths in listing.by_split.items()}
  make = _grain_dataset if format == "grain" else _tf_dataset
  datasets = []
  for name in subsets:
    split = _SUBSETS[name]
    if verbose and validation_split:
      print(f"Using {builder.info.splits[split].num_examples} files for {name}.")
    ds = make(builder, split, label_mode=label_mode, num_classes=len(names), order=order,
              channels_first=data_format == "channels_first",
              # keras' grain route resizes float32 with keras.ops, "nearest" included
              dtype="float32" if format == "grain" else keras_pixels.output_dtype(stored),
              shuffle=shuffle and (name == "training" or subset != "both"), seed=read_seed,
              batch_size=batch_size)
    ds.class_names = names if label_mode else None  # as keras
    ds.file_paths = [os.path.join(given, path) for path in kept[split]]
    datasets.append(ds)
  return datasets if subset == "both" else datasets[0]
