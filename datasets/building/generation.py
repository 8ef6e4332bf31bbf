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

Both paths turn every BadItem into a `Problem(key, reason)` and keep every note.
Beam workers write theirs to files under the (temporary) data dir, which the driver
reads once the pipeline is done. `report()` gives all of them to the builder, which
raises one error or records them (`builder_base.ImageSetBuilder`).
"""

import dataclasses
import itertools
import json
import os
from typing import Any, Callable, Iterator, Sequence

from etils import epath
import tensorflow_datasets as tfds

from imagesets.building import parallel_map
from imagesets.building import prepared_records
from imagesets.building import problems as problems_lib

Item = Any
Process = Callable[[Item], tuple[dict, str | None]]
_REPORT_DIR = "_imagesets_report"


class BadItem(Exception):
  """Raised by a `process` function: this item cannot become an example."""

  def __init__(self, reason: str):
    super().__init__(reason)
    self.reason = reason


@dataclasses.dataclass(frozen=True)
class Report:
  problems: list[problems_lib.Problem]   # sorted
  notes: dict[str, str]                  # key -> note, sorted by key


def _outcome(process: Process, key: str, item: Item):
  """(key, example, note, reason): one shape for both runners."""
  try:
    example, note = process(item)
  except BadItem as bad:
    return key, None, None, bad.reason
  return key, example, note, None


def _examples_of(outcome):
  key, example, _, _ = outcome
  if example is not None:
    yield key, example


def _report_lines(outcome):
  key, _, note, reason = outcome
  if reason is not None:
    yield json.dumps({"problem": [key, reason]})
  if note is not None:
    yield json.dumps({"note": [key, note]})


def _local_outcome(work):
  """(key, hashed key, example or record, note, reason) for the worker pool: the item
  comes with its split's (top-level) function and, to make records, a RecordMaker."""
  process, maker, hkey, key, item = work
  key, example, note, reason = _outcome(process, key, item)
  if example is not None and maker is not None:
    example = maker.make(example)
  return key, hkey, example, note, reason


# Work goes to the workers in tasks of 64 items (fewer, larger messages between the
# processes: a flowers build ran 7 % faster than with 16), 3 tasks per worker in flight:
# enough to keep going while TFDS writes a finished split's shards (~0.1 s per 2,400 photos).
_CHUNK, _WINDOW_CHUNKS = 64, 3


@dataclasses.dataclass
class Generation:
  """One build's run of per-example work over all of its splits."""

  use_beam: bool
  data_dir: epath.PathLike
  pool: Any = None  # a parallel_map.executor(), or None to run inline
  features: Any = None  # the builder's FeaturesDict: local splits can then be made as records
  # Write each split in the order its items are given, not TFDS's hashed-key order (the
  # keras cache: its stored order is keras' output order, read back sequentially).
  keep_order: bool = False
  _problems: list[problems_lib.Problem] = dataclasses.field(default_factory=list)
  _notes: dict[str, str] = dataclasses.field(default_factory=dict)
  _unfinished: dict[str, tuple[Sequence, Process]] = dataclasses.field(default_factory=dict)
  # Locally, one stream of outcomes runs over every split's items in the order the
  # splits were given, which is the order TFDS writes them in: the workers go on with
  # the next split while TFDS writes one's shards. `None`: not started; `False`: given up
  # (TFDS asked for splits in another order, stopped a split early, e.g.
  # --max_examples_per_split, or a rerun): each split then runs alone.
  _stream: Any = None
  _stream_splits: list[str] = dataclasses.field(default_factory=list)
  _stream_owed: int = 0  # outcomes of the split being read from the stream, not taken yet
  _stream_records: bool = False  # the stream makes records (in shard order), not examples

  def examples(self, split: str, items: Sequence[tuple[str, Item]], process: Process):
    """What `_split_generators` returns for one split."""
    if self.use_beam:
      return self._beam(split, items, process)
    self._unfinished[split] = (items, process)
    return prepared_records.LocalSplit(lambda: self._local(split),
                                       lambda: self._local(split, records=True))

  def _local(self, split, *, records=False, share=True) -> Iterator[tuple]:
    """(key, example) pairs, or with `records` (hashed key, record) pairs in shard order."""
    for key, hkey, payload, note, reason in self._outcomes(split, records, share):
      self._record(key, note, reason)
      if payload is not None:
        yield (hkey, payload) if records else (key, payload)
    del self._unfinished[split]

  def _work(self, split, records):
    """The work items of `split`: in key order, or in shard order to make records."""
    items, process = self._unfinished[split]
    if not records:
      return ((process, None, None, key, item) for key, item in items)
    maker = prepared_records.RecordMaker(self.features)
    order = ([(position, position) for position in range(len(items))] if self.keep_order
             else prepared_records.hashed_order(split, (key for key, _ in items)))
    return ((process, maker, hkey, *items[position]) for hkey, position in order)

  def _outcomes(self, split, records, share):
    """The outcomes of `split`'s items, in order: from the shared stream when TFDS asks
    for the splits in the order given, else from a run of this split alone."""
    if share and self._stream is None:
      self._stream_splits = list(self._unfinished)
      self._stream_records = records
      work = itertools.chain.from_iterable(
          [self._work(name, records) for name in self._stream_splits])
      self._stream = parallel_map.ordered_map(_local_outcome, work, self.pool,
                                              chunk_size=_CHUNK, window=_WINDOW_CHUNKS)
    if (share and self._stream and self._stream_splits[:1] == [split]
        and self._stream_records == records and not self._stream_owed):
      self._stream_splits.pop(0)
      self._stream_owed = len(self._unfinished[split][0])
      return self._take_from_stream(self._stream_owed)
    if self._stream:
      self._stream.close()  # cancels the work not started yet
    self._stream = False
    return parallel_map.ordered_map(_local_outcome, self._work(split, records), self.pool,
                                    chunk_size=_CHUNK, window=_WINDOW_CHUNKS)

  def _take_from_stream(self, count):
    for outcome in itertools.islice(self._stream, count):
      self._stream_owed -= 1  # a split left unfinished leaves the stream out of step
      yield outcome

  def _record(self, key, note, reason):
    if reason is not None:
      self._problems.append(problems_lib.Problem(key, reason))
    if note is not None:
      self._notes[key] = note

  def check_unfinished(self) -> None:
    """Runs the items of splits TFDS did not finish, for their problems only.

    When a build fails early (e.g. TFDS stops at a split with no good example),
    this still finds every problem, so one error can list them all.
    """
    for split in list(self._unfinished):
      for _ in self._local(split, share=False):
        pass

  def _beam(self, split, items, process):
    beam = tfds.core.lazy_imports.apache_beam
    report_prefix = os.fspath(self._report_dir() / split)

    class _ProcessItems(beam.PTransform):

      def expand(self, pipeline):
        outcomes = (
            pipeline
            | "Items" >> beam.Create(list(items))
            | "Process" >> beam.MapTuple(lambda key, item: _outcome(process, key, item)))
        _ = (outcomes
             | "Report" >> beam.FlatMap(_report_lines)
             | "WriteReport" >> beam.io.WriteToText(report_prefix, file_name_suffix=".jsonl"))
        return outcomes | "Examples" >> beam.FlatMap(_examples_of)

    return _ProcessItems()

  def _report_dir(self) -> epath.Path:
    return epath.Path(self.data_dir) / _REPORT_DIR

  def report(self) -> Report:
    """Every problem and note of the build; Beam's are read (and removed) from the data dir."""
    report_dir = self._report_dir()
    if self.use_beam and report_dir.exists():
      for path in sorted(report_dir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
          record = json.loads(line)
          if "problem" in record:
            self._record(record["problem"][0], None, record["problem"][1])
          else:
            self._record(record["note"][0], record["note"][1], None)
      for path in report_dir.iterdir():
        path.unlink()
      report_dir.rmdir()
    return Report(sorted(set(self._problems)), dict(sorted(self._notes.items())))
