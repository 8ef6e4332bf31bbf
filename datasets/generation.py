"""Per-example work that runs the same way locally and on Apache Beam.

A builder lists its work items on the driver as `(key, item)` pairs and names a
top-level (picklable) function `process(item) -> example dict` that raises
`BadItem(reason)` for bad input. `Generation.examples(...)` then runs it:

* locally, in key order, on `workers` processes (decoding is CPU-bound);
* on Beam, when the build was given Beam options (`tfds build --beam_pipeline_options`),
  as `Create | FlatMap` on the runner's workers.

Both paths turn every BadItem into a `Problem(key, reason)`. Beam workers write
theirs to files under the (temporary) data dir, which the driver reads once the
pipeline is done. `Generation.finish()` then raises one error listing every bad
item, or, when skipping was asked for, returns them so the builder records them
in the dataset's metadata. Nothing is dropped silently either way.
"""

import concurrent.futures
import dataclasses
import json
import multiprocessing
import os
from typing import Any, Callable, Iterator, Sequence

from absl import logging
from etils import epath
import tensorflow_datasets as tfds

from imagesets import problems as problems_lib

Item = Any
Process = Callable[[Item], dict]
_PROBLEMS_DIR = "_imagesets_problems"


class BadItem(Exception):
  """Raised by a `process` function: this item cannot become an example."""

  def __init__(self, reason: str):
    super().__init__(reason)
    self.reason = reason


def _outcome(process: Process, key: str, item: Item):
  """(key, example, None) or (key, None, reason): one shape for both runners."""
  try:
    return key, process(item), None
  except BadItem as bad:
    return key, None, bad.reason


def _examples_of(outcome):
  key, example, _ = outcome
  if example is not None:
    yield key, example


def _problem_json(outcome):
  key, _, reason = outcome
  if reason is not None:
    yield json.dumps({"where": key, "reason": reason})


@dataclasses.dataclass
class Generation:
  """One build's run of per-example work over all of its splits."""

  use_beam: bool
  workers: int = 1
  data_dir: epath.Path | None = None
  _local_problems: list[problems_lib.Problem] = dataclasses.field(default_factory=list)

  def examples(self, split: str, items: Sequence[tuple[str, Item]], process: Process):
    """What `_split_generators` returns for one split."""
    if self.use_beam:
      return self._beam(split, items, process)
    return self._local(items, process)

  def _local(self, items, process) -> Iterator[tuple[str, dict]]:
    if self.workers > 1 and len(items) > 1:
      # fork: children inherit the builder's state; `process` touches no TensorFlow.
      context = multiprocessing.get_context("fork")
      with concurrent.futures.ProcessPoolExecutor(self.workers, mp_context=context) as pool:
        keys, values = zip(*items)
        chunk = max(1, min(64, len(items) // (4 * self.workers)))
        outcomes = pool.map(_outcome, [process] * len(items), keys, values, chunksize=chunk)
        yield from self._collect_local(outcomes)
    else:
      yield from self._collect_local(_outcome(process, key, item) for key, item in items)

  def _collect_local(self, outcomes):
    for key, example, reason in outcomes:
      if reason is None:
        yield key, example
      else:
        self._local_problems.append(problems_lib.Problem(key, reason))

  def _beam(self, split, items, process):
    beam = tfds.core.lazy_imports.apache_beam
    problems_prefix = os.fspath(self._problems_dir() / split)

    class _ProcessItems(beam.PTransform):

      def expand(self, pipeline):
        outcomes = (
            pipeline
            | "Items" >> beam.Create(list(items))
            | "Process" >> beam.MapTuple(lambda key, item: _outcome(process, key, item)))
        _ = (outcomes
             | "Problems" >> beam.FlatMap(_problem_json)
             | "WriteProblems" >> beam.io.WriteToText(problems_prefix, file_name_suffix=".jsonl"))
        return outcomes | "Examples" >> beam.FlatMap(_examples_of)

    return _ProcessItems()

  def _problems_dir(self) -> epath.Path:
    return epath.Path(self.data_dir) / _PROBLEMS_DIR

  def problems(self) -> list[problems_lib.Problem]:
    """Every problem of the build; Beam's are read (and removed) from the data dir."""
    found = list(self._local_problems)
    if self.use_beam and self._problems_dir().exists():
      for path in sorted(self._problems_dir().glob("*.jsonl")):
        for line in path.read_text().splitlines():
          found.append(problems_lib.Problem(**json.loads(line)))
      for path in self._problems_dir().iterdir():
        path.unlink()
      self._problems_dir().rmdir()
    return sorted(found)

  def finish(self, *, source: str, fix: str, skip_bad: bool) -> list[problems_lib.Problem]:
    """Raises one error for all problems, or returns them when skipping was asked for."""
    found = self.problems()
    if found and skip_bad:
      logging.warning("Skipped %d bad item(s) of %s:\n%s", len(found), source,
                      "\n".join(f"  {p.where}: {p.reason}" for p in found))
      return found
    problems_lib.raise_if_any(found, source=source, fix=fix)
    return []
