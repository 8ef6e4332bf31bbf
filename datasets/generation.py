"""Per-example work that runs the same way locally and on Apache Beam.

A builder lists its work items on the driver as `(key, item)` pairs and names a
top-level (picklable) function `process(item) -> (example, note)` that raises
`BadItem(reason)` for bad input; `note` (or None) says something worth recording
about a good item, e.g. why a file was re-encoded. `Generation.examples(...)` runs it:

* locally, in key order, on the build's worker pool (`parallel_map`: bounded memory);
* on Beam, when the build was given Beam options (`tfds build --beam_pipeline_options`),
  as `Create | FlatMap` on the runner's workers.

Both paths turn every BadItem into a `Problem(key, reason)` and keep every note.
Beam workers write theirs to files under the (temporary) data dir, which the driver
reads once the pipeline is done. `report()` gives all of them to the builder, which
raises one error or records them (`builder_base.ImageSetBuilder`).
"""

import dataclasses
import json
import os
from typing import Any, Callable, Iterator, Sequence

from etils import epath
import tensorflow_datasets as tfds

from imagesets import parallel_map
from imagesets import problems as problems_lib

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


class _LocalItem:
  """Picklable `item -> outcome` for the worker pool."""

  def __init__(self, process: Process):
    self.process = process

  def __call__(self, key_item):
    return _outcome(self.process, *key_item)


@dataclasses.dataclass
class Generation:
  """One build's run of per-example work over all of its splits."""

  use_beam: bool
  data_dir: epath.PathLike
  pool: Any = None  # a parallel_map.executor(), or None to run inline
  _problems: list[problems_lib.Problem] = dataclasses.field(default_factory=list)
  _notes: dict[str, str] = dataclasses.field(default_factory=dict)
  _unfinished: dict[str, tuple[Sequence, Process]] = dataclasses.field(default_factory=dict)

  def examples(self, split: str, items: Sequence[tuple[str, Item]], process: Process):
    """What `_split_generators` returns for one split."""
    if self.use_beam:
      return self._beam(split, items, process)
    self._unfinished[split] = (items, process)
    return self._local(split, items, process)

  def _local(self, split, items, process) -> Iterator[tuple[str, dict]]:
    for key, example, note, reason in parallel_map.ordered_map(
        _LocalItem(process), items, self.pool):
      self._record(key, note, reason)
      if example is not None:
        yield key, example
    del self._unfinished[split]

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
      for _ in self._local(split, *self._unfinished[split]):
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
