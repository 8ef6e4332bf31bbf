"""Groups of duplicates on Beam (DirectRunner): the very groups `duplicates.find` gives, on
crops and burst frames of real photos with exact copies, leaks across splits, label
conflicts and one name twice; the components' rounds said, the work counted."""

import collections
import dataclasses
import pathlib
import pickle

import pytest

beam = pytest.importorskip("apache_beam")
from apache_beam.options import pipeline_options  # noqa: E402

from imagesets.analysis import beam_components  # noqa: E402
from imagesets.analysis import beam_duplicates  # noqa: E402
from imagesets.analysis import duplicates  # noqa: E402
from imagesets.analysis import image_hashes  # noqa: E402
from imagesets_testing import photo_crops  # noqa: E402

Member = duplicates.Member


def _images(count: int, seed: int, scenes: int):
  """Crops and bursts of real photos in three splits, labelled by scene; every 25th also
  stored as an exact copy under another name (a few in another split), one name twice."""
  members, fingerprints = [], []
  for number, (picture, data) in enumerate(photo_crops.jpegs(
      count, seed=seed, scenes=scenes, size=(96, 96), share_in_bursts=0.4)):
    fingerprint = image_hashes.of_bytes(data)
    split = ("train", "train", "validation", "test")[number % 4]
    members.append(Member(split, f"{picture.scene}/{number:04d}.jpg", picture.scene))
    fingerprints.append(fingerprint)
    if number % 25 == 0:
      members.append(Member(("train", "test")[number % 50 == 0], f"copy/{number:04d}.jpg",
                            picture.scene))
      fingerprints.append(fingerprint)
  members.append(Member(members[3].split, members[3].file_name, "other label"))
  fingerprints.append(fingerprints[7])
  return members, fingerprints


def _beam_groups(members, fingerprints, folder, run_options=None,
                 rounds=beam_components.ROUNDS, **options):
  """(the groups Beam found, sorted as `find` sorts them, its counters)."""
  saved = folder / "groups.pickle"

  def _save(groups, path: str) -> None:  # (nested: pickled whole for worker processes)
    pathlib.Path(path).write_bytes(pickle.dumps(groups))
  pipeline = beam.Pipeline(options=run_options)
  groups = beam_duplicates.Groups(rounds=rounds, **options)
  _ = (pipeline | beam.Create(list(zip(members, fingerprints))) | groups
       | beam.combiners.ToList() | beam.Map(_save, str(saved)))
  result = pipeline.run()
  result.wait_until_finish()
  counters = groups.check(result)
  found = pickle.loads(saved.read_bytes())
  return sorted(found, key=lambda group: duplicates._member_order(group.members[0])), counters


@pytest.fixture(scope="module")
def crops():
  return _images(600, seed=4, scenes=3)


def test_beam_finds_the_groups_one_process_finds(crops, tmp_path):
  members, fingerprints = crops
  local = duplicates.find(members, fingerprints)
  found, counters = _beam_groups(members, fingerprints, tmp_path)
  assert found == local
  assert (duplicates.to_json(found, len(members))
          == duplicates.to_json(local, len(members)))
  # The groups hold every case: near groups with links, exact sets, leaks, conflicts.
  kinds = collections.Counter(g.kind for g in local)
  assert kinds[duplicates.NEAR] > 10 and kinds[duplicates.EXACT] >= 1
  assert any(g.cross_split for g in local) and any(g.label_conflict for g in local)
  assert sum(len(g.links) for g in local) > 100 and any(g.exact_sets for g in local)
  # Work counted: each representative in every band's bucket once; a picture checked with
  # at most PARTNERS others.
  pictures = len({f.pixels for f in fingerprints})
  assert counters["bucket_entries"] == duplicates.BANDS * pictures
  assert counters["checks"] <= duplicates.PARTNERS * pictures / 2


def test_beam_finds_the_same_groups_on_worker_processes_in_any_input_order(tmp_path):
  members, fingerprints = _images(160, seed=9, scenes=2)
  local = duplicates.find(members, fingerprints)
  assert any(g.kind == duplicates.NEAR for g in local)
  reordered = list(reversed(range(len(members))))
  options = pipeline_options.PipelineOptions(
      direct_num_workers=2, direct_running_mode="multi_processing")
  found, _ = _beam_groups([members[i] for i in reordered],
                          [fingerprints[i] for i in reordered], tmp_path, options)
  assert found == local


def test_too_few_rounds_of_components_is_an_error_not_other_groups(crops, tmp_path):
  members, fingerprints = crops
  with pytest.raises(beam_components.NotConverged, match="not final"):
    _beam_groups(members, fingerprints, tmp_path, rounds=1)


def test_a_crowded_bucket_is_cut_into_stretches_with_the_same_groups(tmp_path):
  # One hash for every picture (flat frames, one texture, scans of a form): every band's
  # one bucket holds them all. Cut into stretches of at most a few dozen entries, each
  # picked with the WINDOW entries on either side, they must give the same groups.
  members, fingerprints = _images(300, seed=6, scenes=2)
  fingerprints = [dataclasses.replace(f, perceptual=1 << 100) for f in fingerprints]
  local = duplicates.find(members, fingerprints)
  assert any(g.kind == duplicates.NEAR for g in local)
  found, counters = _beam_groups(members, fingerprints, tmp_path, largest_bucket=40,
                                 stretches=16)
  assert found == local
  assert counters["bucket_size_max"] <= 2 * 300 / 16  # (one worker's share of a bucket)
  assert counters["bucket_entries"] == duplicates.BANDS * len({f.pixels for f in fingerprints})
