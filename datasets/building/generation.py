"""Per-example work that runs the same way locally and on Apache Beam.

A builder lists its work items on the driver as `(key, item)` pairs and names a
top-level (picklable) function `process(item) -> (example, note)` that raises
`BadItem(reason)` for bad input; `note` (or None) says something worth recording
about a good item, e.g. why a file was re-encoded. `Generation.examples(...)` runs it:

* locally, in key order, on the build's worker pool (`parallel_map`: bounded memory),
  as one stream across the splits, so the workers never wait while TFDS writes shards;
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


def _local_outcome(process_key_item):
  """`_outcome` for the worker pool: the item comes with its split's (top-level) function."""
  return _outcome(*process_key_item)


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

  def examples(self, split: str, items: Sequence[tuple[str, Item]], process: Process):
    """What `_split_generators` returns for one split."""
    if self.use_beam:
      return self._beam(split, items, process)
    self._unfinished[split] = (items, process)
    return self._local(split, items, process)

  def _local(self, split, items, process, *, share=True) -> Iterator[tuple[str, dict]]:
    for key, example, note, reason in self._outcomes(split, items, process, share):
      self._record(key, note, reason)
      if example is not None:
        yield key, example
    del self._unfinished[split]

  def _outcomes(self, split, items, process, share):
    """The outcomes of `split`'s items, in order: from the shared stream when TFDS asks
    for the splits in the order given, else from a run of this split alone."""
    if share and self._stream is None:
      self._stream_splits = list(self._unfinished)
      given = list(self._unfinished.values())
      work = ((process_, *key_item) for items_, process_ in given for key_item in items_)
      self._stream = parallel_map.ordered_map(_local_outcome, work, self.pool,
                                              chunk_size=_CHUNK, window=_WINDOW_CHUNKS)
    if (share and self._stream and self._stream_splits[:1] == [split]
        and not self._stream_owed):
      self._stream_splits.pop(0)
      self._stream_owed = len(items)
      return self._take_from_stream(len(items))
    if self._stream:
      self._stream.close()  # cancels the work not started yet
    self._stream = False
    return parallel_map.ordered_map(_local_outcome, ((process, *key_item) for key_item in items),
                                    self.pool, chunk_size=_CHUNK, window=_WINDOW_CHUNKS)

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
      for _ in self._local(split, *self._unfinished[split], share=False):
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
