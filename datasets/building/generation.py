"""Per-example work that runs the same way locally and on Apache Beam.

A builder lists its work items on the driver as `(key, item)` pairs and names a
top-level (picklable) function `process(item) -> (example, note)` that raises
`BadItem(reason)` for bad input; `note` (or None) says something worth recording
about a good item, e.g. why a file was re-encoded. `Generation.examples(...)` runs it:

* locally, on the build's worker pool (`parallel_map`: bounded memory), as one stream
  across the splits, so the workers never wait while shards are written: in key order as
  `(key, example)` pairs, or, for `prepared_records`' writer (our builders' local builds),
  in shard order as `(hashed key, record)` pairs, the workers making each record;
* on Beam, when the build was given Beam options (`tfds build --beam_pipeline_options`),
  as `Create | FlatMap` on the runner's workers.

Both paths turn every BadItem into a `Problem(key, reason)` and keep every note, and
fingerprint each example's image where it was made (`_identity`: `image_hashes`, for the
duplicate report; locally, `leakage="error"` and `"drop"` run the items once more first,
so that a leak stops the build or is left out before any record is written; on Beam the
workers group the images and find the rest (`beam_report`), "drop" leaves out its copies
before TFDS's writers, and "error" stops once the pipeline is done). Beam workers write
theirs to files under the (temporary) data dir, which the driver reads once the pipeline
is done. `report()` gives all of them to the builder, which
raises one error or records them (`builder_base.ImageSetBuilder`).
"""

import dataclasses
import itertools
import json
import os
import sys
from typing import Any, Callable, Iterator, Sequence

from etils import epath
import tensorflow_datasets as tfds
from tqdm import auto as tqdm_auto

import imagesets.console.cli_process as cli_process
import imagesets.tfds_internals as tfds_internals
from imagesets.annotations import schema
from imagesets.building import parallel_map
from imagesets.building import prepared_records
from imagesets.building import problems as problems_lib
from imagesets.analysis import duplicates
from imagesets.analysis import image_hashes

Item = Any
Process = Callable[[Item], tuple[dict, str | None]]
_REPORT_DIR = "_imagesets_report"
# The report's files of what the workers found of the images (not a split name: TFDS's
# split names are words).
_FOUND = "-found"
# The record index's rows the workers write (`beam_index`): beside the report, which is read
# (and removed) before the index is written, so that bad files or a leak stop the build first.
_ROWS_DIR = "_imagesets_rows"


class EmptySplitError(ValueError):
  """Every item of one or more splits was bad (skipped) or dropped: no example left.

  `empty`: split -> (its bad keys, how many of its items leakage="drop" left out)."""

  def __init__(self, empty: dict[str, tuple[Sequence[str], int]]):
    self.empty = empty
    told = [_empty_told(bad, dropped) for bad, dropped in empty.values()]
    names = ", ".join(map(repr, empty))
    what = (f"split {names} has no examples left: {told[0]}" if len(empty) == 1 else
            f"splits {names} have no examples left: "
            + "; ".join(f"{split}: {line}" for split, line in zip(empty, told)))
    super().__init__(what + "; repair or replace them, add images, or change the split "
                     "proportions or seed")

  def __reduce__(self):  # (its one argument is not the message)
    return EmptySplitError, (self.empty,)

  def joined(self, others: Sequence["EmptySplitError"]) -> "EmptySplitError":
    """One error naming this one's splits and the `others`'."""
    return EmptySplitError(self.empty | {split: empty for other in others
                                         for split, empty in other.empty.items()})


def _empty_told(bad: Sequence[str], dropped: int) -> str:
  return (f"{len(bad)} bad file(s) skipped ({', '.join(sorted(bad)[:5])}"
          f"{', ...' if len(bad) > 5 else ''})"
          + (f", {dropped} dropped as copies of images of an earlier split (leakage=drop)"
             if dropped else ""))


class BadItem(Exception):
  """Raised by a `process` function: this item cannot become an example."""

  def __init__(self, reason: str):
    super().__init__(reason)
    self.reason = reason


@dataclasses.dataclass(frozen=True)
class Report:
  problems: list[problems_lib.Problem]   # sorted
  notes: dict[str, str]                  # key -> note, sorted by key
  # Every written example's identity and fingerprint, for the duplicate report (`_identity`).
  images: list[tuple[duplicates.Member, image_hashes.Fingerprint]] = ()
  dropped: list[duplicates.Member] = ()  # left out by leakage="drop"
  # On Beam, what the workers found of the images instead (`beam_report.Known`).
  known: Any = None


def _outcome(process: Process, key: str, item: Item):
  """(key, example, note, reason): one shape for both runners."""
  try:
    example, note = process(item)
  except BadItem as bad:
    return key, None, None, bad.reason
  return key, example, note, None


# The namespace of the Beam counters of a build's own per-item work.
BEAM_NAMESPACE = "imagesets"


def _beam_outcome(key_item: tuple[str, Item], process: Process, fingerprint: bool):
  """(key, example, note, reason, identity or None) on a Beam worker; the images it
  fingerprints are counted ("fingerprinted")."""
  key, example, note, reason = _outcome(process, *key_item)
  identity = None
  if fingerprint and example is not None:
    identity = _identity(example, key)
    tfds.core.lazy_imports.apache_beam.metrics.Metrics.counter(
        BEAM_NAMESPACE, "fingerprinted").inc()
  return key, example, note, reason, identity


def _examples_of(outcome):
  key, example, _, _, _ = outcome
  if example is not None:
    yield key, example


def _report_lines(outcome):
  key, _, note, reason, _ = outcome
  if reason is not None:
    yield json.dumps({"problem": [key, reason]})
  if note is not None:
    yield json.dumps({"note": [key, note]})


def _image_of(outcome, split, described):
  """(key, member, fingerprint) of a Beam worker's fingerprinted example."""
  key, _, _, _, identity = outcome
  if identity is not None and identity[2] is not None:
    file_name, value, fingerprint = identity
    yield key, duplicates.Member(split, file_name, described(value)), fingerprint


def _identity(example: dict, key: str) -> tuple[str, Any, image_hashes.Fingerprint | None]:
  """(file name, annotation (`schema.annotation`), fingerprint) of an example, computed where its image bytes are
  already in memory (the worker that made it). The name is the source file's, or the
  source's id, or the example's key."""
  image = example.get("image")
  try:
    if isinstance(image, (str, os.PathLike)):  # (VOC: TFDS reads the file)
      image = epath.Path(image).read_bytes()
    fingerprint = image_hashes.of_bytes(image) if isinstance(image, bytes) else None
  except Exception:  # pylint: disable=broad-except  # (checked images; never fail a build here)
    fingerprint = None
  return (str(example.get("file_name") or example.get("image_id") or key),
          schema.annotation(example), fingerprint)


def _local_outcome(work):
  """(key, hashed key, example or record, note, reason, identity or None) for the worker
  pool: the item comes with its split's (top-level) function, to make records a RecordMaker,
  and whether to fingerprint its image (`_identity`)."""
  process, maker, fingerprint, hkey, key, item = work
  key, example, note, reason = _outcome(process, key, item)
  identity = _identity(example, key) if fingerprint and example is not None else None
  if example is not None and maker is not None:
    example = maker.make(example)
  return key, hkey, example, note, reason, identity


def _dropped_whole(split: str, items: int) -> duplicates.LeakageError:
  return duplicates.LeakageError(
      f"leakage=drop would leave split {split!r} empty: its {items} image(s) are all copies "
      f"of images of an earlier split; add images to {split!r} or build with --leakage warn")


# Work goes to the workers in tasks of 64 items (fewer, larger messages between the
# processes: a flowers build ran 7 % faster than with 16), 3 tasks per worker in flight:
# enough to keep going while TFDS writes a finished split's shards (~0.1 s per 2,400 photos).
_CHUNK, _WINDOW_CHUNKS = 64, 3
# Leakage actions that must know every fingerprint before the first record is made.
_BEFORE_WRITING = ("error", "drop")


def shows_progress() -> bool:
  """Our bars follow TFDS's switch (`tfds.disable_progress_bar()`) and show in a
  command-line program or on a terminal: a script's log is left as it was."""
  return tfds_internals.progress_bars_on() and (
      cli_process.is_cli_process() or sys.stderr.isatty())


def _progress_bar(desc: str, total: int, disable: bool = False):
  """A bar on stderr counting a build's images to its end ("N/M images"); in a command's
  log (progress_lines.log_friendly_stderr) a line every few seconds and its last state."""
  return tqdm_auto.tqdm(total=total, desc=desc, unit=" images", leave=True, disable=disable,
                        dynamic_ncols=True, bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} "
                        "images [{elapsed}<{remaining}, {rate_fmt}]")


@dataclasses.dataclass
class Generation:
  """One build's run of per-example work over all of its splits."""

  use_beam: bool
  data_dir: epath.PathLike
  pool: Any = None  # a parallel_map.executor(), or None to run inline
  features: Any = None  # the builder's FeaturesDict: local splits can then be made as records
  # duplicates.LEAKAGE_ACTIONS: "off" fingerprints nothing; before any record is made,
  # "error" stops naming the leaks and "drop" leaves out the copies of images of an earlier
  # split (`_fingerprint_first`).
  leakage: str = "warn"
  title: str = ""  # what the leakage error names (the dataset's full name)
  # Write each split in the order its items are given, not TFDS's hashed-key order (the
  # keras cache: its stored order is keras' output order, read back sequentially).
  keep_order: bool = False
  # What the progress bar over every split's items says (None: no bar); "" for
  # "building <title>".
  progress: str | None = ""
  # (split, key, identity) of every example written: what the duplicate report describes,
  # also when TFDS stops a split early (--max_examples_per_split).
  _images: list = dataclasses.field(default_factory=list)
  _dropped: list = dataclasses.field(default_factory=list)
  # split -> [key, record size, fingerprint json or None] of each record made, in the order
  # of its split's records (what `record_index` stores).
  _written: dict = dataclasses.field(default_factory=dict)
  _kept: dict = dataclasses.field(default_factory=dict)  # split -> records not made here
  # (split, key) -> identity of every item, once `_fingerprint_first` ran (else None).
  _fingerprints: dict | None = None
  _problems: list[problems_lib.Problem] = dataclasses.field(default_factory=list)
  _notes: dict[str, str] = dataclasses.field(default_factory=dict)
  _unfinished: dict[str, tuple[Sequence, Process]] = dataclasses.field(default_factory=dict)
  # On Beam, built on a base: a function of the pipeline giving the (key, member,
  # fingerprint) of every record kept from the base (`incremental.kept_images_on_workers`).
  beam_kept: Callable | None = None
  # On Beam: the rows of the record index the workers write of the shards (`beam_index`).
  beam_rows_kept: bool = False
  # On Beam: the splits given (split -> (items, process)), each split's examples once
  # every split's work is in the pipeline (`beam_work`), the report's transform, and what
  # it found once read (`report`).
  _beam_splits: dict = dataclasses.field(default_factory=dict)
  _beam_examples: dict = dataclasses.field(default_factory=dict)
  _beam_report: Any = None
  _known: Any = None
  _pipeline_done: bool = False
  # The grouping's counters once the pipeline is checked (`beam_duplicates.Groups.check`).
  beam_counters: dict = dataclasses.field(default_factory=dict)
  # Locally, one stream of outcomes runs over every split's items in the order the
  # splits were given, which is the order TFDS writes them in: the workers go on with
  # the next split while TFDS writes one's shards. `None`: not started; `False`: given up
  # (TFDS asked for splits in another order, stopped a split early, e.g.
  # --max_examples_per_split, or a rerun): each split then runs alone.
  _stream: Any = None
  _stream_splits: list[str] = dataclasses.field(default_factory=list)
  _stream_owed: int = 0  # outcomes of the split being read from the stream, not taken yet
  _stream_records: bool = False  # the stream makes records (in shard order), not examples
  # The build's progress bar over the items of every split (made at the first item done;
  # False once closed) and the items counted on it.
  _bar: Any = None
  _counted: int = 0

  def examples(self, split: str, items: Sequence[tuple[str, Item]], process: Process,
               kept: int = 0):
    """What `_split_generators` returns for one split; `kept`: the split's records that
    are not made here (a version built on another), so no bad item leaves it empty."""
    self._kept[split] = kept
    if self.use_beam:
      return self._beam(split, items, process)
    self._unfinished[split] = (items, process)
    # The keras cache's records (fixed-shape pixels) are all about one size: its shards are
    # planned from the first record and written as the records come (prepared_records).
    planned = (lambda: len(self._unfinished[split][0])) if self.keep_order else None
    return prepared_records.LocalSplit(lambda: self._local(split),
                                       lambda: self._local(split, records=True), planned)

  def _local(self, split, *, records=False, share=True) -> Iterator[tuple]:
    """(key, example) pairs, or with `records` (hashed key, record) pairs in shard order."""
    bad, made = [], 0
    for key, hkey, payload, note, reason, identity in self._outcomes(split, records, share):
      self._count()
      self._record(key, note, reason)
      if reason is not None:
        bad.append(key)
      if payload is not None:
        # (fingerprinted by its worker now, or by drop's or error's first pass)
        identity = identity or (self._fingerprints or {}).get((split, key))
        if identity is not None:  # (before the yield: TFDS may take no more)
          self._images.append((split, key, identity))
        if records:
          self._written.setdefault(split, []).append(
              (key, len(payload), identity[2].to_json() if identity and identity[2] else None))
        made += 1
        yield (hkey, payload) if records else (key, payload)
    del self._unfinished[split]
    # (TFDS would only say "No examples were yielded.")
    if bad and not made and not self._kept.get(split):
      dropped = sum(member.split == split for member in self._dropped)
      raise EmptySplitError({split: (bad, dropped)})

  def _shows_bars(self) -> bool:
    return self.progress is not None and shows_progress()

  def _count(self) -> None:
    """One more item done, on the build's progress bar."""
    if self._bar is None and not self._shows_bars():
      self._bar = False
    if self._bar is False:
      return
    if self._bar is None:
      total = self._counted + sum(len(items) for items, _ in self._unfinished.values())
      self._bar = _progress_bar(self.progress or f"building {self.title}".strip(), total)
    self._counted += 1
    self._bar.update()

  def close_progress(self) -> None:
    """Ends the progress bar (its last state stays: how far the build got)."""
    if self._bar:
      self._bar.close()
    self._bar = False

  def _work(self, split, records):
    """The work items of `split`: in key order, or in shard order to make records."""
    items, process = self._unfinished[split]
    fingerprint = self.leakage != "off" and self._fingerprints is None
    if not records:
      return ((process, None, fingerprint, None, key, item) for key, item in items)
    maker = prepared_records.RecordMaker(self.features)
    order = ([(position, position) for position in range(len(items))] if self.keep_order
             else prepared_records.hashed_order(split, (key for key, _ in items)))
    return ((process, maker, fingerprint, hkey, *items[position]) for hkey, position in order)

  def _fingerprint_first(self) -> None:
    """leakage="error" or "drop": fingerprints every item of every split before any record
    is made (one more pass of the per-item work), then stops naming every cross-split group
    (error) or leaves out the copies `duplicates.to_drop` names (drop)."""
    splits = list(self._unfinished)
    work = ((process, None, True, None, key, item) for split in splits
            for items, process in [self._unfinished[split]] for key, item in items)
    where = [split for split in splits for _ in self._unfinished[split][0]]
    with _progress_bar(f"duplicate check {self.title}".strip(), len(where),
                       disable=not self._shows_bars()) as bar:
      self._fingerprints = {}
      for split, outcome in zip(where, parallel_map.ordered_map(
          _local_outcome, work, self.pool, chunk_size=_CHUNK, window=_WINDOW_CHUNKS,
          total=len(where))):
        bar.update()
        if outcome[-1] is not None:
          self._fingerprints[(split, outcome[0])] = outcome[-1]
    entries = self._members((split, key, identity)
                            for (split, key), identity in self._fingerprints.items())
    groups = duplicates.find([m for _, m, _ in entries], [f for _, _, f in entries])
    if self.leakage == "error":
      duplicates.raise_if_leaking(groups, self.title)
      return
    self._dropped = duplicates.to_drop(groups)
    dropped = set(self._dropped)
    gone = {(member.split, key) for key, member, _ in entries if member in dropped}
    for split in splits:
      items = self._unfinished[split][0]
      if items and all((split, k) in gone for k, _ in items):
        raise _dropped_whole(split, len(items))
    for split in splits:
      items, process = self._unfinished[split]
      self._unfinished[split] = ([(k, i) for k, i in items if (split, k) not in gone], process)

  def _members(self, images) -> list[tuple[str, duplicates.Member, image_hashes.Fingerprint]]:
    """(key, member, fingerprint) of `images`, (split, key, identity) triples; each
    member's label is what its annotations say (`schema.Schema.describe`)."""
    described = schema.of(self.features).describe
    return [(key, duplicates.Member(split, file_name, described(value)), fingerprint)
            for split, key, (file_name, value, fingerprint) in images
            if fingerprint is not None]

  def written(self, split: str) -> list[list]:
    """[key, size, fingerprint json or None] of each record made for `split`, in order."""
    return [list(row) for row in self._written.get(split, ())]

  def keyed_images(self) -> dict[tuple[str, str], tuple[duplicates.Member,
                                                         image_hashes.Fingerprint]]:
    """(split, key) -> (member, fingerprint) of every written example fingerprinted here."""
    return {(member.split, key): (member, fingerprint)
            for key, member, fingerprint in self._members(self._images)}

  def images(self) -> list[tuple[duplicates.Member, image_hashes.Fingerprint]]:
    """Every written example's member and fingerprint."""
    return [(member, fingerprint) for _, member, fingerprint in self._members(self._images)]

  def _outcomes(self, split, records, share):
    """The outcomes of `split`'s items, in order: from the shared stream when TFDS asks
    for the splits in the order given, else from a run of this split alone."""
    if self.leakage in _BEFORE_WRITING and self._fingerprints is None:
      self._fingerprint_first()
    if share and self._stream is None:
      self._stream_splits = list(self._unfinished)
      self._stream_records = records
      work = itertools.chain.from_iterable(
          [self._work(name, records) for name in self._stream_splits])
      self._stream = parallel_map.ordered_map(
          _local_outcome, work, self.pool, chunk_size=_CHUNK, window=_WINDOW_CHUNKS,
          total=sum(len(self._unfinished[name][0]) for name in self._stream_splits))
    if (share and self._stream and self._stream_splits[:1] == [split]
        and self._stream_records == records and not self._stream_owed):
      self._stream_splits.pop(0)
      self._stream_owed = len(self._unfinished[split][0])
      return self._take_from_stream(self._stream_owed)
    if self._stream:
      self._stream.close()  # cancels the work not started yet
    self._stream = False
    return parallel_map.ordered_map(_local_outcome, self._work(split, records), self.pool,
                                    chunk_size=_CHUNK, window=_WINDOW_CHUNKS,
                                    total=len(self._unfinished[split][0]))

  def _take_from_stream(self, count):
    for outcome in itertools.islice(self._stream, count):
      self._stream_owed -= 1  # a split left unfinished leaves the stream out of step
      yield outcome

  def _record(self, key, note, reason):
    if reason is not None:
      self._problems.append(problems_lib.Problem(key, reason))
    if note is not None:
      self._notes[key] = note

  def check_unfinished(self) -> list[EmptySplitError]:
    """Runs the items of splits TFDS did not finish, for their problems only; returns the
    splits left without an example.

    When a build fails early (e.g. TFDS stops at a split with no good example),
    this still finds every problem, so one error can list them all.
    """
    empty = []
    for split in list(self._unfinished):
      try:
        for _ in self._local(split, share=False):
          pass
      except EmptySplitError as error:  # (its bad items are recorded too)
        empty.append(error)
    return empty

  def _beam(self, split, items, process):
    """The split's transform: its examples, once every split's work is in the pipeline
    (`beam_work`, called before any split's writer: the report over all their images, and
    leakage="drop"'s filter, need them all before any split's examples reach TFDS's
    writer)."""
    beam = tfds.core.lazy_imports.apache_beam
    self._beam_splits[split] = (items, process)
    generation = self

    class _Split(beam.PTransform):

      def expand(self, pipeline):
        return generation._beam_examples[split] | "Examples" >> beam.Map(lambda kv: kv)

    return _Split()

  def beam_work(self, pipeline) -> None:
    """Adds every split's per-item work to the pipeline, once all splits were given;
    each problem and note written to the report folder; with fingerprints, what the
    workers find of the images, those kept from a base too (`beam_report`), written there
    too, and with leakage="drop" the examples it drops left out (`_beam_examples`)."""
    beam = tfds.core.lazy_imports.apache_beam
    fingerprint = self.leakage != "off"
    described = schema.of(self.features).describe
    examples, images = {}, []
    for split, (items, process) in self._beam_splits.items():
      outcomes = (pipeline
                  | f"{split}: items" >> beam.Create(list(items))
                  | f"{split}: process" >> beam.Map(_beam_outcome, process, fingerprint))
      _ = (outcomes
           | f"{split}: report" >> beam.FlatMap(_report_lines)
           | f"{split}: write report" >> beam.io.WriteToText(
               os.fspath(self._report_dir() / split), file_name_suffix=".jsonl"))
      examples[split] = outcomes | f"{split}: examples" >> beam.FlatMap(_examples_of)
      if fingerprint:
        images.append(outcomes | f"{split}: images" >> beam.FlatMap(_image_of, split, described))
      if fingerprint and self.beam_rows_kept:
        from imagesets.building import beam_index  # (Beam builds only: it imports Beam)
        beam_index.rows(outcomes, split, os.fspath(self._rows_dir() / split), split)
    self._beam_examples = examples
    if not fingerprint:
      return
    if self.beam_kept is not None:
      images.append(self.beam_kept(pipeline))
    from imagesets.building import beam_report  # (Beam builds only: it imports Beam)
    self._beam_report = beam_report.Report(drop=self.leakage == "drop", images=sum(
        len(items) for items, _ in self._beam_splits.values()) + sum(self._kept.values()))
    found = tuple(images) | "All images" >> beam.Flatten() | "Know your data" >> self._beam_report
    _ = (found["lines"]
         | "Found lines" >> beam.Map(json.dumps)
         | "Write found" >> beam.io.WriteToText(os.fspath(self._report_dir() / _FOUND),
                                                file_name_suffix=".jsonl"))
    if self.leakage == "drop":
      for split in examples:
        examples[split] = beam_report.without(
            examples[split], found["dropped"],
            lambda example, split=split: (split, example[0]), f"{split}: drop")

  def beam_stop(self, error: BaseException) -> Exception | None:
    """What stopped a Beam build, said as a local build says it, or None. TFDS's writer
    refuses a split left empty inside the pipeline: every item of it was bad (skipped) or,
    with leakage="drop", dropped on the workers after the pipeline was planned. A failed
    pipeline's report may lack the split's problems: its items are run here again, for
    their problems only (as `check_unfinished` does locally)."""
    split = self.use_beam and tfds_internals.empty_split_in(error)
    if not split or split not in self._beam_splits:
      return None
    items, process = self._beam_splits[split]
    bad = sorted(key for key, item in items if _outcome(process, key, item)[3] is not None)
    dropped = len(items) - len(bad) if self.leakage == "drop" else 0
    if not items or len(bad) + dropped < len(items):
      return None
    if self._kept.get(split):  # (built on a base: TFDS's writer gets only the new items)
      return ValueError(
          f"split {split!r}: its new files are all bad ({_empty_told(bad, 0)}), and a Beam "
          "build on a base writes a split's new files with TFDS's Beam writer, which refuses "
          "none; repair or remove them, or build this version locally (no Beam options)")
    return EmptySplitError({split: (bad, dropped)}) if bad else _dropped_whole(split, dropped)

  def check_pipeline(self, result) -> None:
    """Raises when the finished pipeline's groups of duplicates are not final or the runner
    lost elements (`beam_report.Report.check`)."""
    self._pipeline_done = True  # (its report is then read, and its absence said)
    if self._beam_report is None:  # (nothing fingerprinted: no metric asked of the runner)
      return
    beam = tfds.core.lazy_imports.apache_beam
    from imagesets.analysis import beam_components  # (Beam builds only: it imports Beam)
    fingerprinted = beam_components.summed(result.metrics().query(
        beam.metrics.MetricsFilter().with_namespace(BEAM_NAMESPACE))["counters"])
    self.beam_counters = {**self._beam_report.check(result),
                          "fingerprinted": fingerprinted["fingerprinted"]}

  def beam_rows(self) -> str | None:
    """The files of the record index's rows the workers wrote (`beam_rows_kept`), as a
    pattern; None when none was written (nothing fingerprinted)."""
    rows = self._rows_dir()
    return os.fspath(rows / "*.jsonl") if rows.exists() and any(rows.glob("*.jsonl")) else None

  def beam_work_dir(self) -> str:
    """A folder for the index pipeline's own files, removed with the rows."""
    return os.fspath(self._rows_dir() / "work")

  def drop_beam_rows(self) -> None:
    """Removes the rows `beam_rows` names and `beam_work_dir` (once the index is written:
    not a version's files)."""
    if self._rows_dir().exists():
      self._rows_dir().rmtree()

  def _rows_dir(self) -> epath.Path:
    return epath.Path(self.data_dir) / _ROWS_DIR

  def _report_dir(self) -> epath.Path:
    return epath.Path(self.data_dir) / _REPORT_DIR

  def report(self) -> Report:
    """Every problem and note of the build, and on Beam what the workers found of its
    images; Beam's are read (and removed) from the data dir."""
    report_dir = self._report_dir()
    if self.use_beam and report_dir.exists():
      found = []
      for path in sorted(report_dir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
          record = json.loads(line)
          if path.name.startswith(_FOUND):
            found.append(record)
          elif "problem" in record:
            self._record(record["problem"][0], None, record["problem"][1])
          else:
            self._record(record["note"][0], record["note"][1], None)
      # (a failed pipeline's part of a report is not read: the failure is what is said)
      if self._beam_report is not None and self._pipeline_done:
        from imagesets.building import beam_report  # (Beam builds only: it imports Beam)
        self._known = beam_report.known(found, str(report_dir / _FOUND))
        self._dropped = list(self._known.dropped)
      report_dir.rmtree()  # (with what a failed pipeline's sinks left: their temp folders)
    return Report(sorted(set(self._problems)), dict(sorted(self._notes.items())),
                  self.images(), list(self._dropped), self._known)
