"""Several datasets or versions read as one, by weight, resumable exactly.

    from imagesets.reading import input_pipeline, mixing
    mix = mixing.mix([
        mixing.Part("flowers", data_dir="~/tensorflow_datasets", weight=1),
        mixing.Part("team_photos:2.0.0", data_dir="s3://team-bucket/tfds", weight=3),
    ], seed=0, labels="union", cache_limit="20GB")
    train = input_pipeline.classification_train(mix, batch_size=64)   # tf.data
    loader = grain_pipeline.classification_train(mix, batch_size=64)  # Grain
    for batch in train:   # {"image", "label" (mix.classes), "source" (index into mix.parts)}
      ...
    pipeline = input_pipeline.classification_train(mix, batch_size=64, with_position=True)
    for batch in pipeline.dataset.take(10): ...
    start = pipeline.position([10 * 64])   # JSON: start=start resumes there

A `Part` is a split of a prepared version (local or in a bucket, TFRecord or ArrayRecord)
with its share of a mixed epoch: per epoch `repeat` times its records or `choose` records
(MosaicML's `repeat`/`choose`; the default is `repeat=1`: each part's records once an
epoch), or a `weight` on every part (an epoch of `examples_per_epoch` records, default the
parts' records together, apportioned by weight). A mixed epoch reads exactly that many
records of each part, on any number of readers and across resumes (`mix_order`): the
next ones of the part's own read order (`order`, `streaming`: each reader its own shards,
in windows, records shuffled within a window, a new seeded order each of the part's
epochs; a part smaller than its share repeats, a larger one is read on in the next
epoch). So what comes at a position is a function of the parts, the shares, the seed and
the position alone, and a job's state is its position (`MixedPosition`): with the same
readers it resumes record for record; on another number of readers each part resumes
from its own position (`order`: every record of a part's unfinished epoch read exactly
once) and the unfinished mixed epochs keep their counts.

Labels: parts whose class names are the same (after `label_map`) mix as they are; other
class lists are refused in one line unless `labels="union"` (the ids of the sorted union,
`mix.classes`; each part's mapping in `mix.label_ids`). Ids are matched by class name,
never by number: a part whose ids list the same names in another order is mapped.
The parts share one task (`mix.task`): classification (an image and a class label) or
detection (an image and "objects" with boxes and class labels, as builds from COCO, VOC
or YOLO annotations store them; each object's label mapped by name, its box as stored:
`input_pipeline.detection_train` / `grain_pipeline.detection_train` read such a mix). Parts in buckets share one shard
cache (`cache_dir`, `cache_limit`): windows are sized so that every part's windows of every
reader, and the next ones, fit in the limit together.
"""

import dataclasses
import hashlib
import json
import threading

import numpy as np

from imagesets.annotations import schema as schema_lib
from imagesets.reading import mix_order
from imagesets.reading import order as order_lib
from imagesets.reading import shard_reads
from imagesets.reading import sources as sources_lib
from imagesets.reading import split_runs

LABELS = ("same", "union")
OBJECTS = "objects"   # a detection dataset's Sequence of {"bbox", "label", ...}


@dataclasses.dataclass(frozen=True)
class Part:
  """A split of a prepared version and its share of the mix (at most one of `weight`,
  `repeat`, `choose`; see the module docstring). `label_map` renames classes
  ({its class name: the mix's}); `dataset` is "name[/config][:version]"."""

  dataset: str
  data_dir: str | None = None
  split: str = "train"
  weight: float | None = None
  repeat: float | None = None
  choose: int | None = None
  label_map: dict | None = None

  def describe(self) -> str:
    return f"{self.dataset}[{self.split}]"


_PART_SALT = 3   # (input_pipeline's seeds use salts 1 and 2)


class Mix(sources_lib.Reopened):
  """Parts opened and checked, their shares, classes and read orders (`mix(...)` makes one).
  Pickled by its arguments (Grain's worker processes open the parts again)."""

  def __init__(self, parts, *, seed: int = 0, labels: str = "same", cache_dir=None,
               cache_limit=None, examples_per_epoch: int | None = None,
               image_key: str = "image", label_key: str = "label"):
    self._args = dict(parts=tuple(parts), seed=int(seed), labels=labels, cache_dir=cache_dir,
                      cache_limit=cache_limit, examples_per_epoch=examples_per_epoch,
                      image_key=image_key, label_key=label_key)
    self._open()

  def _open(self):
    args = self._args
    self.parts: tuple[Part, ...] = args["parts"]
    self.seed, self.image_key, self.label_key = args["seed"], args["image_key"], args["label_key"]
    if not self.parts or not all(isinstance(p, Part) for p in self.parts):
      raise ValueError("mix() takes a list of mixing.Part(dataset, data_dir=..., weight=...)")
    if args["labels"] not in LABELS:
      raise ValueError(f"labels must be one of {LABELS}, not {args['labels']!r}")
    buckets = [sources_lib.is_bucket_url(p.data_dir) for p in self.parts]
    if not any(buckets):   # (refused in one line: only a bucket read has a cache)
      sources_lib.check_cache_options(self.parts[0].data_dir, args["cache_dir"],
                                      args["cache_limit"])
    folders = args.get("folders") or [None] * len(self.parts)
    self.sources = [
        sources_lib.open_folder(folder) if folder
        else sources_lib.open_source(
            p.dataset, p.data_dir, **(dict(cache_dir=args["cache_dir"],
                                           cache_limit=args["cache_limit"]) if bucket else {}))
        for p, bucket, folder in zip(self.parts, buckets, folders)]
    self.shards = [split_runs.split_shards(s.builder, p.split)
                   for p, s in zip(self.parts, self.sources)]
    self.sizes = [sum(s.take for s in shards) for shards in self.shards]
    for part, size in zip(self.parts, self.sizes):
      if not size:
        raise ValueError(f"{part.describe()} has no records: a mix reads from every part")
    self.task, self.classes, self.label_ids = _classes(self, args["labels"])
    self.per_epoch, self.examples_per_epoch = _shares(self.parts, self.sizes,
                                                      args["examples_per_epoch"])
    self.orders = [order_lib.Order(shards, order_lib.derived_seed(self.seed, _PART_SALT, k),
                                   True, "shuffle")
                   for k, shards in enumerate(self.shards)]
    described = json.dumps(["exact epochs", [o.fingerprint for o in self.orders],
                            list(self.per_epoch),
                            [list(ids) for ids in self.label_ids], self.seed,
                            self.examples_per_epoch, self.image_key, self.label_key,
                            # (classification mixes' fingerprints stay those saved before)
                            *([self.task] if self.task != schema_lib.CLASSIFICATION else [])])
    self.fingerprint = hashlib.sha256(described.encode()).hexdigest()[:16]

  def __getstate__(self):
    # Local parts reopened from the version folders opened here: a worker process reads
    # the same versions without the builders' code (nor TensorFlow).
    return {**self._args, "folders": [None if s.streamed else str(s.folder)
                                      for s in self.sources]}

  @property
  def proportions(self) -> tuple[float, ...]:
    """Each part's share of a mixed epoch's records."""
    return tuple(c / self.examples_per_epoch for c in self.per_epoch)

  def order(self, readers: int, windows, **resumed) -> mix_order.MixedOrder:
    """The mixed order of `readers` readers reading each part in windows of `windows[k]`
    shards (see `mix_order.MixedOrder` for `resumed`)."""
    return mix_order.MixedOrder(self.orders, self.per_epoch, readers, windows, **resumed)

  def __repr__(self) -> str:
    shares = ", ".join(f"{p.describe()}: {s:.3g}" for p, s in zip(self.parts, self.proportions))
    return f"Mix({shares}; seed={self.seed}, {len(self.classes)} classes)"

  def run(self, readers: int = 1, *, start=None, held: int = 1, num_epochs=None,
          window_shards: int = split_runs.DEFAULT_WINDOW_SHARDS) -> "MixedRun":
    return MixedRun(self, readers, start=start, held=held, num_epochs=num_epochs,
                    window_shards=window_shards)


def mix(parts, *, seed: int = 0, labels: str = "same", cache_dir=None, cache_limit=None,
        examples_per_epoch: int | None = None, image_key: str = "image",
        label_key: str = "label") -> Mix:
  """The parts (`Part`s) as one mixed source for `classification_train` or, of detection
  datasets, `detection_train` (`input_pipeline`'s and `grain_pipeline`'s; see the module
  docstring). `examples_per_epoch`: an epoch's records with weights (default: the parts'
  records together)."""
  return Mix(parts, seed=seed, labels=labels, cache_dir=cache_dir, cache_limit=cache_limit,
             examples_per_epoch=examples_per_epoch, image_key=image_key, label_key=label_key)


def _shares(parts, sizes, examples_per_epoch):
  """(each part's records a mixed epoch, the epoch's records)."""
  given = [[name for name in ("weight", "repeat", "choose") if getattr(p, name) is not None]
           for p in parts]
  for part, names in zip(parts, given):
    if len(names) > 1:
      raise ValueError(f"{part.describe()} gives {' and '.join(names)}: give one of weight, "
                       "repeat, choose")
  weighted = [bool(names) and names[0] == "weight" for names in given]
  if any(weighted) and not all(weighted):
    raise ValueError("some parts give a weight and some do not: give every part a weight, "
                     "or give parts repeat= / choose= (records an epoch) instead")
  if all(weighted):
    total = examples_per_epoch if examples_per_epoch is not None else sum(sizes)
    if isinstance(total, bool) or not isinstance(total, int) or total < 1:
      raise ValueError(f"examples_per_epoch must be a positive whole number, not {total!r}")
    shares = mix_order.apportion(total, [p.weight for p in parts])
    for part, share in zip(parts, shares):
      if not share:
        raise ValueError(f"{part.describe()}'s weight gives it none of the {total:,} records of "
                         "a mixed epoch: give it a larger weight or examples_per_epoch, or "
                         "leave it out")
  else:
    if examples_per_epoch is not None:
      raise ValueError("examples_per_epoch goes with weights; with repeat= and choose= an "
                       "epoch is the parts' records an epoch together")
    shares = []
    for part, size in zip(parts, sizes):
      if part.choose is not None:
        count = part.choose
      else:
        repeat = 1 if part.repeat is None else part.repeat
        count = round(repeat * size) if isinstance(repeat, (int, float)) and repeat > 0 else 0
      if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"{part.describe()}: repeat must be a positive number and choose a "
                         f"positive whole number of records an epoch (it has {size})")
      shares.append(count)
    total = sum(shares)
  if isinstance(total, bool) or not isinstance(total, int) or total < 1:
    raise ValueError(f"examples_per_epoch must be a positive whole number, not {total!r}")
  return tuple(shares), total


def _task_and_names(part: Part, source, image_key: str, label_key: str):
  """(task, class names) of a part: a classification dataset's `label_key` class label, or
  the class label of a detection dataset's objects (`annotations.schema`)."""
  features = source.builder.info.features
  if image_key in features:
    label = features[label_key] if label_key in features.keys() else None
    if hasattr(label, "names") and not hasattr(label, "feature"):   # (not a Sequence's)
      return schema_lib.CLASSIFICATION, list(label.names)
    objects = getattr(features[OBJECTS] if OBJECTS in features.keys() else None, "feature", None)
    inner = objects["label"] if objects is not None and "label" in objects.keys() else None
    if objects is not None and "bbox" in objects.keys() and hasattr(inner, "names"):
      if label_key != "label":
        raise ValueError(f"label_key={label_key!r}: {part.describe()} is a detection dataset, "
                         f"whose labels are its {OBJECTS!r}' own; leave label_key out")
      return schema_lib.DETECTION, list(inner.names)
  raise ValueError(
      f"{part.describe()} has no {image_key!r} image with a {label_key!r} class label or "
      f"\"objects\" with boxes and class labels (its features: {', '.join(features.keys())}): "
      "a mix is of classification or detection datasets; name the features with image_key= "
      "and label_key=")


def _classes(mix_: Mix, labels: str):
  """(the parts' task, the mix's class names, each part's [its label id -> the mix's])."""
  named, tasks = [], []
  for part, source in zip(mix_.parts, mix_.sources):
    task, names = _task_and_names(part, source, mix_.image_key, mix_.label_key)
    if tasks and task != tasks[0]:
      raise ValueError(f"{mix_.parts[0].describe()} is a {tasks[0]} dataset and "
                       f"{part.describe()} a {task} one: the parts of a mix share one task")
    tasks.append(task)
    renames = dict(part.label_map or {})
    unknown = sorted(set(renames) - set(names))
    if unknown:
      raise ValueError(f"{part.describe()}'s label_map names {unknown[0]!r}, which is not one "
                       f"of its classes ({', '.join(names[:8])}{', ...' if len(names) > 8 else ''})")
    named.append([str(renames.get(n, n)) for n in names])
  if labels == "union":
    classes = sorted(set().union(*named))
  else:
    classes = list(dict.fromkeys(named[0]))
    for part, names in zip(mix_.parts[1:], named[1:]):
      if set(names) != set(classes):
        raise ValueError(
            f"the parts have different classes: {_shown(mix_.parts[0], classes)}, "
            f"{_shown(part, names)}; give labels='union' (ids of the sorted union, in "
            "mix.classes) or map them with Part(label_map={name: mix_name})")
  index = {name: i for i, name in enumerate(classes)}
  return tasks[0], tuple(classes), tuple(tuple(index[n] for n in names) for names in named)


def _shown(part: Part, names) -> str:
  names = sorted(set(names))
  return (f"{part.describe()} has {len(names)} ({', '.join(names[:5])}"
          f"{', ...' if len(names) > 5 else ''})")


class MixedRun:
  """The reads of `readers` readers of a mix: reader r reads positions
  [offsets[r], length(r)) of its run (see the module docstring), from `start` (a
  `MixedPosition` or its JSON: with the same readers and windows a record-for-record
  continuation, else each part resumes from its own position), up to mixed epoch
  `num_epochs` (None: no end). `held`: windows of each part a reader pins at once."""

  def __init__(self, mix_: Mix, readers: int, *, start=None, held: int = 1, num_epochs=None,
               window_shards: int = split_runs.DEFAULT_WINDOW_SHARDS):
    self.mix, self.readers, self.num_epochs = mix_, readers, num_epochs
    if readers < 1:
      raise ValueError(f"readers must be at least 1, not {readers}")
    position = None if start is None else mix_order.MixedPosition.from_json(start)
    if position is not None and (position.fingerprint != mix_.fingerprint
                                 or len(position.sources) != len(mix_.parts)):
      raise mix_order.MixedPositionError(
          "this mixed read position was saved by a job reading another mix (other parts, "
          "versions, shares, seed or labels): resume with the mix it was saved with, or "
          "start without it")
    streamed = [s for s in mix_.sources if s.cache is not None]
    largest = max((s.largest_shard for s in streamed), default=0)
    windows = []
    for source, part, shards in zip(mix_.sources, mix_.parts, mix_.shards):
      window = window_shards
      if source.cache is not None:   # every part's windows of every reader in one limit
        window = source.cache.window_size_for(window_shards, largest, held,
                                              readers * len(streamed))
        source.cache.check_fits(largest, "the mix's parts in the cache", held,
                                readers * len(streamed))
      split_runs.check_readers(source.builder, part.split, shards, readers, "readers of the mix")
      windows.append(window)
    self.windows = tuple(windows)
    resumed, self.offsets, self.first_index = {}, [0] * readers, 0
    if position is not None:
      saved = dict(sources=position.sources, passes=position.passes,
                   first_full=position.first_full)
      before = mix_.order(position.readers, position.windows, **saved)
      before.check_reachable(position.at, MAX_EPOCHS)
      if position.readers == readers and position.windows == self.windows:   # continued
        resumed, self.offsets = saved, list(position.at)
        self.first_index = position.first_index
      else:   # each part from its own position, the unfinished epochs dealt to these readers
        resumed = before.resumed(position.at)
        self.first_index = position.next_index()
    self.order = mix_.order(readers, self.windows, num_epochs=num_epochs, **resumed)
    self.runs = self.order.parts
    self._lock = threading.Lock()
    self._reads: dict[tuple[int, int], shard_reads.PlannedReads] = {}

  def length(self, reader: int) -> int | None:
    """The end of the reader's positions (None: no end)."""
    return self.order.length(reader)

  def global_index(self, reader: int, j):
    """The job's count of the example at the reader's position j (unique over resumes)."""
    return self.first_index + np.asarray(j, np.int64) * self.readers + reader

  def reads(self, k: int, reader: int) -> shard_reads.PlannedReads:
    with self._lock:
      key = (k, reader)
      if key not in self._reads:
        source = self.mix.sources[k]
        self._reads[key] = shard_reads.PlannedReads(source.store(), source.file_format,
                                                    self.runs[k], reader)
      return self._reads[key]

  def read(self, reader: int, j0: int, count: int) -> tuple[np.ndarray, list[bytes]]:
    """(part, serialized example) of the reader's positions [j0, j0 + count)."""
    parts, ranks = self.order.sources_at(reader, j0, count)
    out: list[bytes] = [b""] * count
    for k in np.unique(parts).tolist():
      where = np.flatnonzero(parts == k)
      # (a reader's ranks of one part are consecutive in its positions)
      for i, record in zip(where.tolist(), self._read_ranks(k, reader, int(ranks[where[0]]),
                                                            len(where))):
        out[i] = record
    return parts, out

  def read_one(self, reader: int, j: int) -> tuple[int, bytes]:
    """(part, serialized example) of the reader's position j."""
    parts, ranks = self.order.sources_at(reader, j, 1)
    k = int(parts[0])
    q, at = self.runs[k].place(reader, int(ranks[0]))
    return k, self.reads(k, reader).read(q, at, 1)[0]

  def _read_ranks(self, k: int, reader: int, first: int, count: int) -> list[bytes]:
    run, out = self.runs[k], []
    while count:
      q, at = run.place(reader, first)
      take = min(count, len(run.reader_pass(q, reader)) - at)
      out += self.reads(k, reader).read(q, at, take)
      first, count = first + take, count - take
    return out

  def position(self, taken) -> mix_order.MixedPosition:
    """The position of readers that have each read `taken[r]` examples in this run."""
    taken = [int(t) for t in taken]
    if len(taken) != self.readers or min(taken) < 0:
      raise ValueError(f"give the examples each of the {self.readers} readers took, not {taken}")
    return mix_order.MixedPosition(
        self.readers, tuple(o + t for o, t in zip(self.offsets, taken)), self.windows,
        self.order.sources, self.order.all_passes, self.order.first_full,
        self.mix.fingerprint, self.first_index)

  def finish(self) -> None:
    """Lets go of every shard no read is using (a finished run)."""
    with self._lock:
      reads = list(self._reads.values())
    for got in reads:
      got.finish()

  def close(self) -> None:
    with self._lock:
      reads, self._reads = list(self._reads.values()), {}
    for got in reads:
      got.close()


# Mixed epochs a saved position may be into past its leftovers (untrusted input: placing a
# reader costs every mixed pass before it; far beyond any real job's).
MAX_EPOCHS = 100_000


def _out_of_range(part: int, label, count: int) -> str:
  return (f"a record of part {part} has label {label}, not one of its {count} class ids: "
          "its features do not describe its records")


def mapped_labels(label_ids, part: int, labels) -> np.ndarray:
  """Part `part`'s label ids (numpy) as the mix's: -1 (no label) stays -1; an id the part's
  features do not list is an error."""
  ids, labels = np.asarray(label_ids[part], np.int64), np.asarray(labels, np.int64)
  bad = labels >= len(ids)
  if bad.any():
    raise ValueError(_out_of_range(part, int(labels[bad][0]), len(ids)))
  return np.where(labels < 0, labels, ids[np.maximum(labels, 0)])


@dataclasses.dataclass(frozen=True)
class Pipeline:
  """A mix's training pipeline (`dataset`: its batches, as tf.data), the run of all the
  job's input pipelines (`run`) and the batch size: what
  `input_pipeline.classification_train(mix, ..., with_position=True)` (or
  `detection_train`) returns. Keep it: `position` needs the run, which a dataset (or one
  mapped from it) does not give back."""
  dataset: object   # a tf.data.Dataset (this module imports no TensorFlow)
  run: MixedRun
  batch_size: int

  def position(self, taken) -> dict:
    """The position (JSON) of the readers that have each taken `taken[r]` examples in this
    run (batches taken times the batch size), to give as `start=` with any number of
    readers."""
    return self.run.position(taken).to_json()


def position(pipeline: Pipeline, taken) -> dict:
  """`pipeline.position(taken)`: the position (JSON) of a mixed pipeline's readers that
  have each taken `taken[r]` examples in this run (`pipeline`: one of them; batches taken
  times the batch size), to give as `start=` with any number of readers."""
  if not isinstance(pipeline, Pipeline):
    raise ValueError("position() takes the mixing.Pipeline that input_pipeline."
                     "classification_train (or detection_train) returns with "
                     f"with_position=True, not a {type(pipeline).__name__}: make the pipeline "
                     "with with_position=True, keep the object it returns and train on its "
                     ".dataset")
  return pipeline.position(taken)
