"""What a Beam build knows of its images, computed on the runner's workers: the groups of
duplicates, the quality findings and the card's counts, with nothing of the images
gathered on the driver (docs/scaling.md).

* groups: `beam_duplicates.Groups`, the very groups `duplicates.find` gives in one process;
* the card's counts: a `dataset_card.Tallies` summed over the images (one element, as
  large as the distinct (split, label) pairs, image sizes and formats, not the images);
* quality findings: each image's on the worker that holds it (`image_quality.findings_of`),
  given the version's median side from those counts (a side input of one number).

`Report` turns a PCollection of (member, fingerprint) into JSON lines, a record each:
{"group": ...}, {"finding": ...} and one {"tallies": ...}; `known` reads them back, in
the order one process gives them (`duplicates.group_order`, `image_quality.finding_order`).
"""

import functools
import operator
from typing import Iterable, NamedTuple

import apache_beam as beam

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


class Report(beam.PTransform):
  """(duplicates.Member, image_hashes.Fingerprint) in; the JSON lines `known` reads out.
  `groups`: its `beam_duplicates.Groups`, whose `check(result)` says whether the finished
  pipeline's groups are final."""

  def __init__(self, groups: beam_duplicates.Groups | None = None):
    super().__init__()
    self.groups = groups or beam_duplicates.Groups()

  def expand(self, images):
    tallies = images | "Tallies" >> beam.CombineGlobally(_Tallied())
    side = tallies | "Median side" >> beam.Map(lambda t: image_quality.median_side(t.sizes))
    findings = images | "Findings" >> beam.FlatMap(
        lambda image, side: image_quality.findings_of(*image, side),
        beam.pvalue.AsSingleton(side))
    return ((images | "Groups" >> self.groups
             | "Group lines" >> beam.Map(lambda group: {"group": group.to_json()}),
             findings | "Finding lines" >> beam.Map(lambda f: {"finding": f.to_json()}),
             tallies | "Tally line" >> beam.Map(lambda t: {"tallies": t.to_json()}))
            | "Lines" >> beam.Flatten())


def known(records: Iterable[dict], source: str) -> Known:
  """The `Known` of a `Report`'s records (parsed JSON lines), checked as stored reports are
  (`duplicates.from_json`, `image_quality.from_json`); `source` names them in errors."""
  groups, findings, tallies = [], [], []
  for record in records:
    if "group" in record:
      groups.append(record["group"])
    elif "finding" in record:
      findings.append(record["finding"])
    else:
      tallies.append(dataset_card.Tallies.from_json(record["tallies"]))
  if len(tallies) != 1:
    raise duplicates.BadReport(f"{source}: {len(tallies)} counts of the images where one "
                               "is written: the pipeline did not finish its report")
  [tallies] = tallies
  groups, _ = duplicates.from_json({"groups": groups, "num_images": tallies.num_images}, source)
  return Known(sorted(groups, key=duplicates.group_order),
               sorted(image_quality.from_json({"findings": findings}, source),
                      key=image_quality.finding_order), tallies)
