"""beam_report: what Beam's workers find of a build's images is what one process finds:
the groups, the quality findings (the median side summed from parts) and the card's
counts, on crops of real photos with copies, leaks and planted problems."""

import collections
import json
import pathlib

import pytest

beam = pytest.importorskip("apache_beam")
from apache_beam.options import pipeline_options  # noqa: E402

from imagesets.analysis import duplicates  # noqa: E402
from imagesets.analysis import image_hashes  # noqa: E402
from imagesets.analysis import image_quality  # noqa: E402
from imagesets.building import beam_report  # noqa: E402
from imagesets.reports import dataset_card  # noqa: E402
from imagesets_testing import photo_crops  # noqa: E402
from imagesets_testing import quality_cases  # noqa: E402
from imagesets_testing import sample_images  # noqa: E402

Member = duplicates.Member
_PLANTED = (quality_cases.dark, quality_cases.overexposed, quality_cases.blurry,
            quality_cases.grayscale, quality_cases.odd_aspect_ratio, quality_cases.tiny)


def _images():
  """Crops and bursts of real photos in three splits and two sizes, each 10th with a
  planted problem, each 20th also stored as an exact copy in another split, the labels
  (some None) by scene."""
  members, fingerprints = [], []
  for number, (picture, _) in enumerate(photo_crops.jpegs(
      240, seed=3, scenes=3, size=(96, 72), share_in_bursts=0.4)):
    pixels = picture.pixels
    if number % 10 == 5:
      pixels = _PLANTED[number // 10 % len(_PLANTED)](pixels)
    if number % 3 == 0:  # (another size: the median side is not every image's)
      pixels = pixels[:48, :64]
    fingerprint = image_hashes.of_bytes(sample_images.encode(pixels, "JPEG", quality=90))
    split = ("train", "train", "validation", "test")[number % 4]
    label = None if number % 7 == 0 else picture.scene
    members.append(Member(split, f"{picture.scene}/{number:04d}.jpg", label))
    fingerprints.append(fingerprint)
    if number % 20 == 0:
      members.append(Member("test" if split == "train" else "train", f"copy/{number:04d}.jpg",
                            label))
      fingerprints.append(fingerprint)
  return members, fingerprints


def _known(members, fingerprints, folder: pathlib.Path, options=None,
           drop: bool = False) -> beam_report.Known:
  """What a `Report` of the images found (keyed by their position), read back."""
  out = folder / "found"
  with beam.Pipeline(options=options) as pipeline:
    found = (pipeline
             | beam.Create([(f"{i:05d}", *image) for i, image in enumerate(zip(members,
                                                                               fingerprints))])
             | beam_report.Report(drop=drop, images=len(members)))
    _ = (found["lines"] | beam.Map(json.dumps)
         | beam.io.WriteToText(str(out), file_name_suffix=".jsonl"))
  return beam_report.known([json.loads(line) for path in sorted(folder.glob("found*.jsonl"))
                            for line in path.read_text().splitlines()], str(out))


def test_the_workers_find_what_one_process_finds(tmp_path):
  members, fingerprints = _images()
  reordered = list(reversed(range(len(members))))  # (any order in)
  options = pipeline_options.PipelineOptions(direct_num_workers=2,
                                             direct_running_mode="multi_processing")
  known = _known([members[i] for i in reordered], [fingerprints[i] for i in reordered],
                 tmp_path, options)
  groups = duplicates.find(members, fingerprints)
  findings = image_quality.find(members, fingerprints)
  assert known.groups == groups
  assert known.findings == findings
  assert known.tallies == dataset_card.Tallies.of(list(zip(members, fingerprints)))
  # The stored files' bytes, as a local build writes them.
  assert (json.dumps(duplicates.to_json(known.groups, known.tallies.num_images))
          == json.dumps(duplicates.to_json(groups, len(members))))
  assert (dataset_card.markdown("t", known.tallies, known.groups, (), known.findings)
          == dataset_card.markdown("t", dataset_card.Tallies.of(list(zip(members, fingerprints))),
                                   groups, (), findings))
  # Not vacuous: leaks, near groups, and most planted kinds; two sizes, None labels.
  assert any(g.cross_split for g in groups) and any(g.kind == duplicates.NEAR for g in groups)
  assert len({f.kind for f in findings}) >= 4
  assert len(known.tallies.sizes) >= 3 and (("train", None) in known.tallies.classes)


def test_the_median_side_is_the_median_of_every_part(tmp_path):
  """Tiny is relative to the version's median side: most images large, a third small
  (tiny beside the median, not beside each other); the findings of a Beam run on worker
  processes are those of one process over all the images."""
  small = image_hashes.of_bytes(sample_images.jpeg(40, 40, seed=1))
  large = image_hashes.of_bytes(sample_images.jpeg(260, 260, seed=2))
  members = [Member("train", f"{i:03d}.jpg", "a") for i in range(30)]
  fingerprints = [small, large, large] * 10
  known = _known(members, fingerprints, tmp_path, pipeline_options.PipelineOptions(
      direct_num_workers=2, direct_running_mode="multi_processing"))
  assert known.findings == image_quality.find(members, fingerprints)
  assert image_quality.median_side(known.tallies.sizes) == 260.0
  assert [f.file_name for f in known.findings if f.kind == "tiny"] == [
      f"{i:03d}.jpg" for i in range(0, 30, 3)]


def test_tallies_summed_in_parts_are_the_tallies_of_the_whole():
  members, fingerprints = _images()
  images = list(zip(members, fingerprints))
  whole = dataset_card.Tallies.of(images)
  parts = [dataset_card.Tallies.of(images[start::5]) for start in range(5)]
  assert sum(parts, dataset_card.Tallies()) == whole
  assert dataset_card.Tallies.from_json(json.loads(json.dumps(whole.to_json()))) == whole
  assert whole.num_images == len(images)


@pytest.mark.parametrize("tallies", [0, 2])
def test_a_report_without_one_count_of_the_images_is_refused(tallies):
  count = {"tallies": dataset_card.Tallies().to_json()}
  with pytest.raises(duplicates.BadReport, match=f"{tallies} counts of the images"):
    beam_report.known([count] * tallies, "found")


def test_a_group_of_more_images_than_counted_is_refused():
  members = [Member("train", "a.jpg", "x"), Member("test", "b.jpg", "x")]
  group = duplicates.Group(duplicates.EXACT, tuple(members))
  tallies = dataset_card.Tallies(collections.Counter({("train", "x"): 1}),
                                 collections.Counter({(9, 9): 1}), collections.Counter({"jpeg": 1}))
  with pytest.raises(duplicates.BadReport, match="more images in groups"):
    beam_report.known([{"group": group.to_json()}, {"tallies": tallies.to_json()}], "found")


def test_drop_decides_on_every_image_and_reports_the_kept_ones(tmp_path):
  """leakage="drop" on the workers: the copies `to_drop` names over every image are left
  out; the groups, findings and counts are those of the kept images, as a local build's."""
  members, fingerprints = _images()
  dropped = duplicates.to_drop(duplicates.find(members, fingerprints))
  gone = set(dropped)
  kept = [i for i, member in enumerate(members) if member not in gone]
  kept_members, kept_fingerprints = [members[i] for i in kept], [fingerprints[i] for i in kept]
  known = _known(members, fingerprints, tmp_path, drop=True)
  assert known.dropped == dropped and len(dropped) >= 5
  assert known.groups == duplicates.find(kept_members, kept_fingerprints)
  assert known.findings == image_quality.find(kept_members, kept_fingerprints)
  assert known.tallies == dataset_card.Tallies.of(list(zip(kept_members, kept_fingerprints)))
  assert not any(g.cross_split for g in known.groups if g.kind == duplicates.EXACT)


def test_one_name_twice_is_grouped_as_one_process_groups_it(tmp_path):
  """Two images of one split under one file name (labels differ), copies of each other:
  the workers' group is read back, not refused as a stored report's would be."""
  copy = image_hashes.of_bytes(sample_images.jpeg(64, 64, seed=1))
  other = image_hashes.of_bytes(sample_images.jpeg(64, 64, seed=2))
  members = [Member("train", "x/0001.jpg", "cat"), Member("train", "x/0001.jpg", "dog"),
             Member("train", "y.jpg", "cat")]
  known = _known(members, [copy, copy, other], tmp_path)
  assert known.groups == duplicates.find(members, [copy, copy, other])
  assert [m.label for m in known.groups[0].members] == ["cat", "dog"]


def test_the_two_groupings_of_a_drop_count_and_check_apart(tmp_path):
  """With drop, the decision's grouping (every image) and the report's (the kept ones)
  report their own counters: neither count is the sum of both."""
  members, fingerprints = _images()
  gone = set(duplicates.to_drop(duplicates.find(members, fingerprints)))
  pipeline = beam.Pipeline()
  report = beam_report.Report(drop=True, images=len(members))
  _ = (pipeline | beam.Create([(f"{i:05d}", m, f) for i, (m, f) in
                               enumerate(zip(members, fingerprints))]) | report)
  result = pipeline.run()
  result.wait_until_finish()
  counters = report.check(result)
  kept = {f.pixels for m, f in zip(members, fingerprints) if m not in gone}
  every = {f.pixels for f in fingerprints}
  assert counters["bucket_entries"] == duplicates.BANDS * len(kept)
  assert report.decision.check(result)["bucket_entries"] == duplicates.BANDS * len(every)
