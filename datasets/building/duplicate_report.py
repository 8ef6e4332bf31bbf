"""What a build does with its duplicates and quality findings: the closing summary line, the
report files and the card beside dataset_info.json, and the leakage action
(`duplicates.LEAKAGE_ACTIONS`).

The fingerprints come from the build's workers (`generation`); grouping them takes well
under a second for thousands of images (docs/know_your_data.md). On Beam the runner's
workers group them, find the quality findings and count the card's tallies
(`beam_report`): the driver reads what they found, not the fingerprints.
"""

import dataclasses
import json
from typing import Callable

from absl import logging
from etils import epath

from imagesets.building import generation
from imagesets.reports import dataset_card
from imagesets.analysis import duplicates
from imagesets.analysis import image_quality


@dataclasses.dataclass(frozen=True)
class Found:
  """What `finish` found and stored: the summary counts for the metadata, and the groups
  and findings as the stored reports hold them (the page is drawn from these)."""
  summary: dict
  groups: list[duplicates.Group]
  findings: list[image_quality.Finding]
  num_images: int


def raise_if_leaking(report: generation.Report, title: str) -> None:
  """LeakageError when the groups Beam's workers found (`report.known`) cross splits."""
  if report.known is not None:
    duplicates.raise_if_leaking(report.known.groups, title)


def _compact(report) -> str:
  # (by the C encoder: Python's indenting one is several times slower on a large version's
  # report; `jq` shows them)
  return json.dumps(report, separators=(",", ":"))


def finish(report: generation.Report, data_dir: epath.PathLike, *, action: str,
           title: str, pool=None, meanwhile: Callable[[], None] = lambda: None
           ) -> Found | None:
  """Groups the build's images (or takes what Beam's workers found of them: `known`),
  acts on leakage, writes the report and the card into `data_dir`; returns what it found
  (None when `action` is "off" or the build fingerprinted nothing). `pool`: worker
  processes that group while this process finds the quality findings and runs
  `meanwhile` (`duplicates.begin`): the caller's work that needs no groups (the build's
  record index), run once whatever the action."""
  if action == "off":
    meanwhile()
    return None
  if report.known is not None:
    meanwhile()
    groups, findings, tallies = report.known.groups, report.known.findings, report.known.tallies
    quality = _compact(image_quality.to_json(findings, tallies.num_images))
  else:
    images = report.images  # the examples written (not the dropped, nor those past a cap)
    members = [member for member, _ in images]
    fingerprints = [fingerprint for _, fingerprint in images]
    finding = duplicates.begin(members, fingerprints, pool=pool)
    findings = image_quality.find(members, fingerprints)
    tallies = dataset_card.Tallies.of(images)
    quality = _compact(image_quality.to_json(findings, tallies.num_images))
    meanwhile()
    groups = finding.groups()
  if not tallies.num_images:
    return None
  leaks = [group for group in groups if group.cross_split]
  if action == "error":  # (local builds stopped before writing: `generation`; Beam here)
    duplicates.raise_if_leaking(groups, title)
  directory = epath.Path(data_dir)
  report_json = duplicates.to_json(groups, tallies.num_images, report.dropped)
  (directory / duplicates.REPORT_FILE).write_text(_compact(report_json))
  (directory / image_quality.QUALITY_FILE).write_text(quality)
  (directory / dataset_card.CARD_FILE).write_text(
      dataset_card.markdown(title, tallies, groups, report.dropped, findings))
  # A warning when a split leaks (`imagesets build` repeats the line as its last).
  (logging.warning if leaks else logging.info)(
      "%s: %s; %s", title, duplicates.summary(groups, tallies.num_images, report.dropped),
      image_quality.summary(findings))
  return Found({key: report_json[key] for key in ("num_images", "num_cross_split",
                                                  "num_label_conflicts")} | {
      "num_groups": len(groups), "num_dropped": len(report.dropped),
      "report": duplicates.REPORT_FILE,
      "quality": image_quality.counts(findings), "quality_report": image_quality.QUALITY_FILE},
      groups, findings, tallies.num_images)
