"""What a Beam build knows of its images, computed on the runner's workers: the groups of
duplicates, the quality findings and the card's counts, with nothing of the images
gathered on the driver (docs/scaling.md).

* groups: `beam_duplicates.Groups`, the very groups `duplicates.find` gives in one process;
* the card's counts: a `dataset_card.Tallies` summed over the images (one element, as
  large as the distinct (split, label) pairs, image sizes and formats, not the images);
* quality findings: each image's on the worker that holds it (`image_quality.findings_of`),
  given the version's median side from those counts (a side input of one number).

`Report` turns a PCollection of (key, member, fingerprint) into JSON lines, a record each:
{"group": ...}, {"finding": ...}, one {"tallies": ...} and, with leakage="drop",
{"dropped": ...}; `known` reads them back, in the order one process gives them
(`duplicates.group_order`, `image_quality.finding_order`, `duplicates.member_order`).
"""

import functools
import operator
from typing import Iterable, NamedTuple

import apache_beam as beam

from imagesets.analysis import beam_components
from imagesets.analysis import beam_duplicates
from imagesets.analysis import duplicates
from imagesets.analysis import image_quality
from imagesets.reports import dataset_card


class Known(NamedTuple):
  """What the workers found: as `duplicates.find`, `image_quality.find` and
  `dataset_card.Tallies.of` give it over the same images."""
  groups: list[duplicates.Group]
  findings: list[image_quality.Finding]
  tallies: dataset_card.Tallies
  dropped: list[duplicates.Member] = []  # leakage="drop": as `duplicates.to_drop` names them


class _Tallied(beam.CombineFn):
  """The images' `dataset_card.Tallies` (a sum: any split of the images into parts)."""

  def create_accumulator(self):
    return dataset_card.Tallies()

  def add_input(self, tallies, image):
    return tallies.add(*image)

  def merge_accumulators(self, parts):
    return functools.reduce(operator.add, parts, dataset_card.Tallies())

  def extract_output(self, tallies):
    return tallies


def _by_marks(elements, marks, where, label: str, *, marked: bool):
  """The `elements` whose `where(element)` is (`marked`) or is not among the keys `marks`
  (a PCollection), by a join: no side input as large as the marks."""
  return ({"element": elements | f"{label}: where" >> beam.Map(lambda e: (where(e), e)),
           "mark": marks | f"{label}: marks" >> beam.Map(lambda key: (key, None))}
          | f"{label}: join" >> beam.CoGroupByKey()
          | f"{label}: taken" >> beam.FlatMap(
              lambda joined: joined[1]["element"] if bool(joined[1]["mark"]) == marked else []))


def without(elements, dropped, where, label: str):
  """`elements` but those whose (split, key) `where(element)` gives is `dropped` (a
  PCollection of (split, key))."""
  return _by_marks(elements, dropped, where, label, marked=False)


class Report(beam.PTransform):
  """(key, duplicates.Member, image_hashes.Fingerprint) in; {"lines": the JSON lines `known`
  reads} out. With `drop` (leakage="drop"): the copies `duplicates.to_drop` names, decided on
  the groups of every image, are left out of the report (it describes the version, as a
  local build's), named in it ({"dropped": member} lines), and given as "dropped": the
  (split, key) of each. `check(result)` says whether the finished pipeline's groups are
  final (`beam_duplicates.Groups.check`). `images`: how many come in at most, when the
  driver knows it (the components' rounds are then `beam_components.rounds_for` it)."""

  def __init__(self, drop: bool = False, images: int | None = None):
    super().__init__()
    rounds = (beam_components.ROUNDS if images is None
              else beam_components.rounds_for(images))
    self.groups = beam_duplicates.Groups(rounds=rounds)
    # (the groups over every image, the drop is decided on)
    self.decision = beam_duplicates.Groups(rounds=rounds, name="decision") if drop else None

  def check(self, result) -> dict:
    """The counters of the report's grouping; raises as `beam_duplicates.Groups.check`
    does for it and (with `drop`) for the grouping the drop was decided on, each apart."""
    if self.decision is not None:
      self.decision.check(result)
    return self.groups.check(result)

  def expand(self, images):
    found = {}
    lines = []
    if self.decision is not None:
      decided = (images
                 | "Decide: images" >> beam.Map(lambda image: (image[1], image[2]))
                 | "Decide: groups" >> self.decision
                 | "Decide: dropped" >> beam.FlatMap(lambda group: duplicates.to_drop([group])))
      # (a member's order is its id: its split, file name and label, as primitives)
      found["dropped"] = (
          _by_marks(images, decided | "Decide: ids" >> beam.Map(duplicates.member_order),
                    lambda image: duplicates.member_order(image[1]), "Decide", marked=True)
          | "Decide: at" >> beam.Map(lambda image: (image[1].split, image[0])))
      lines.append(decided | "Dropped lines" >> beam.Map(lambda m: {"dropped": m.to_json()}))
      images = without(images, found["dropped"], lambda image: (image[1].split, image[0]),
                       "Kept images")
    images = images | "Members" >> beam.Map(lambda image: (image[1], image[2]))
    tallies = images | "Tallies" >> beam.CombineGlobally(_Tallied())
    side = tallies | "Median side" >> beam.Map(lambda t: image_quality.median_side(t.sizes))
    findings = images | "Findings" >> beam.FlatMap(
        lambda image, side: image_quality.findings_of(*image, side),
        beam.pvalue.AsSingleton(side))
    lines += [images | "Groups" >> self.groups
              | "Group lines" >> beam.Map(lambda group: {"group": group.to_json()}),
              findings | "Finding lines" >> beam.Map(lambda f: {"finding": f.to_json()}),
              tallies | "Tally line" >> beam.Map(lambda t: {"tallies": t.to_json()})]
    found["lines"] = tuple(lines) | "Lines" >> beam.Flatten()
    return found


def known(records: Iterable[dict], source: str) -> Known:
  """The `Known` of a `Report`'s records (parsed JSON lines), checked as stored reports are
  (`duplicates.from_json`, `image_quality.from_json`); `source` names them in errors."""
  groups, findings, tallies, dropped = [], [], [], []
  for record in records:
    if "group" in record:
      groups.append(record["group"])
    elif "finding" in record:
      findings.append(record["finding"])
    elif "dropped" in record:
      dropped.append(record["dropped"])
    else:
      tallies.append(dataset_card.Tallies.from_json(record["tallies"]))
  if len(tallies) != 1:
    raise duplicates.BadReport(f"{source}: {len(tallies)} counts of the images where one "
                               "is written: the pipeline did not finish its report")
  [tallies] = tallies
  groups, dropped = duplicates.from_json(
      {"groups": groups, "num_images": tallies.num_images, "dropped": dropped}, source,
      names_once=False)
  return Known(duplicates.sorted_groups(groups),
               sorted(image_quality.from_json({"findings": findings}, source),
                      key=image_quality.finding_order), tallies,
               sorted(dropped, key=duplicates.member_order))
