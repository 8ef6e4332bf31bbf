"""Groups of duplicates on Beam (DirectRunner): the very groups `duplicates.find` gives, on
crops and burst frames of real photos with exact copies, leaks across splits, label
conflicts and one name twice; the components' rounds said, the work counted."""

import collections
import dataclasses
import pathlib
import pickle

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam")
from apache_beam.options import pipeline_options  # noqa: E402

from imagesets.analysis import beam_components  # noqa: E402
from imagesets.analysis import beam_duplicates  # noqa: E402
from imagesets.analysis import duplicates  # noqa: E402
from imagesets.analysis import image_hashes  # noqa: E402
from imagesets_testing import photo_crops  # noqa: E402
from imagesets_testing import real_photos  # noqa: E402
from imagesets_testing import sample_images  # noqa: E402

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
                 rounds=None, **options):
  """(the groups Beam found, sorted as `find` sorts them, its counters)."""
  saved = folder / "groups.pickle"

  def _save(groups, path: str) -> None:  # (nested: pickled whole for worker processes)
    pathlib.Path(path).write_bytes(pickle.dumps(groups))
  pipeline = beam.Pipeline(options=run_options)
  if rounds is None:   # (what a build states for this many images)
    rounds = beam_components.rounds_for(len(members))
  groups = beam_duplicates.Groups(rounds=rounds, **options)
  _ = (pipeline | beam.Create(list(zip(members, fingerprints))) | groups
       | beam.combiners.ToList() | beam.Map(_save, str(saved)))
  result = pipeline.run()
  result.wait_until_finish()
  counters = groups.check(result)
  return _in_order(pickle.loads(saved.read_bytes())), counters


def _in_order(groups):
  return sorted(groups, key=duplicates.group_order)


def _local_work(members, fingerprints):
  """(picks, kept pairs) of `duplicates.find`'s steps 1 and 2 over the same images."""
  order = duplicates._in_member_order(members, fingerprints, [
      (duplicates.split_rank(m.split), m.file_name) for m in members])
  pictures = {}
  for i in order:  # (each exact set's first in member order, in that order)
    pictures.setdefault(fingerprints[i].pixels, fingerprints[i])
  pictures = list(pictures.values())
  words = duplicates._as_words([f.perceptual for f in pictures])
  thumbnails, _ = duplicates._thumbnail_rows([f.thumbnail for f in pictures])
  codes, votes = duplicates._picked(words, duplicates._thumbnail_keys(thumbnails),
                                    duplicates.THRESHOLD)
  count = max(len(words), 1)
  first, second = codes // count, codes % count
  kept = duplicates._partnered(first, second, votes,
                               duplicates._distances(words, first, second), count)
  return int(votes.sum()), int(kept.sum())


@pytest.fixture(scope="module")
def crops():
  return _images(600, seed=4, scenes=3)


def test_beam_finds_the_groups_one_process_finds(crops, tmp_path):
  members, fingerprints = crops
  local = duplicates.find(members, fingerprints)
  # (buckets of over 12 entries cut in 4: both kinds of bucket in one run)
  found, counters = _beam_groups(members, fingerprints, tmp_path, largest_bucket=12,
                                 stretches=4)
  assert found == local
  assert (counters["picks"], counters["kept_pairs"]) == _local_work(members, fingerprints)
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


@pytest.mark.parametrize("stretches", [3, 64])
def test_a_crowded_bucket_is_cut_into_stretches_with_the_same_work_and_groups(
    tmp_path, stretches):
  # One hash for every picture (flat frames, one texture, scans of a form): every band's
  # one bucket holds them all. Cut into stretches (64: most shorter than WINDOW), each
  # picked with the WINDOW entries on either side, they must make the very picks, keep
  # the very pairs and give the very groups one process does.
  members, fingerprints = _images(300, seed=6, scenes=2)
  fingerprints = [dataclasses.replace(f, perceptual=1 << 100) for f in fingerprints]
  local = duplicates.find(members, fingerprints)
  assert any(g.kind == duplicates.NEAR for g in local)
  found, counters = _beam_groups(members, fingerprints, tmp_path, largest_bucket=40,
                                 stretches=stretches)
  assert found == local
  assert (counters["picks"], counters["kept_pairs"]) == _local_work(members, fingerprints)
  pictures = len({f.pixels for f in fingerprints})
  assert counters["bucket_entries"] == duplicates.BANDS * pictures
  assert counters["bucket_size_max"] <= 2 * pictures / stretches + duplicates.WINDOW


def test_images_without_near_pairs_give_their_groups_and_pass_the_check(tmp_path):
  # No confirmed pair reaches the components: their rounds changed nothing, and say so.
  distinct = [(Member("train", f"{name}.jpg", name),
               image_hashes.of_bytes(sample_images.encode(pixels, "JPEG")))
              for name, pixels in list(real_photos.photos().items())[:4]]
  images = distinct + [(Member("test", "copy.jpg", "x"), distinct[0][1])]  # (an exact copy)
  members, fingerprints = [m for m, _ in images], [f for _, f in images]
  found, counters = _beam_groups(members, fingerprints, tmp_path)
  assert found == duplicates.find(members, fingerprints)
  assert [g.kind for g in found] == [duplicates.EXACT]
  assert counters.get("kept_pairs", 0) == 0 and counters["astray_pairs"] == 0


def test_a_bucket_cut_in_zero_stretches_is_refused():
  with pytest.raises(ValueError, match="stretches"):
    beam_duplicates.Groups(stretches=0)


def test_a_pair_counted_under_two_keys_is_refused(tmp_path, monkeypatch):
  # A runner that groups equal keys apart splits a pair's picks: its votes, and so which
  # pairs are kept, would differ from one process's. The run must be refused, not used.
  members, fingerprints = _images(120, seed=3, scenes=2)
  counted = beam_duplicates._counted

  def split_in_two(pair_picks, counter):  # (as if the runner made two groups of one key)
    pair, distances = pair_picks
    distances = list(distances)
    if len(distances) > 1:
      counter.inc(len(distances))
      yield pair, (1, distances[0])
      yield pair, (len(distances) - 1, distances[0])
    else:
      yield from counted((pair, distances), counter)

  monkeypatch.setattr(beam_duplicates, "_counted", split_in_two)
  with pytest.raises(beam_components.NotConverged, match="under two keys"):
    _beam_groups(members, fingerprints, tmp_path)


def test_picks_lost_on_the_way_to_their_count_are_refused(tmp_path, monkeypatch):
  # A runner that loses (or repeats) elements between the picks and their count changes
  # which pairs are kept: the run must be refused, not used.
  members, fingerprints = _images(120, seed=3, scenes=2)
  counted = beam_duplicates._counted

  def one_lost(pair_picks, counter):
    pair, distances = pair_picks
    distances = list(distances)
    yield from counted((pair, distances[1:] if len(distances) > 1 else distances), counter)

  monkeypatch.setattr(beam_duplicates, "_counted", one_lost)
  with pytest.raises(beam_components.NotConverged, match="arrived where they are counted"):
    _beam_groups(members, fingerprints, tmp_path)


def test_a_worker_makes_the_bands_and_projections_once_not_for_every_picture(monkeypatch):
  # A worker places each picture in every band (`_band_entries`): the bands' bit positions
  # and the SimHash projections are seeded draws, made once a process.
  made, real_rng = [], np.random.default_rng

  def counted_rng(*args, **kwargs):
    made.append(args)
    return real_rng(*args, **kwargs)
  members, fingerprints = _images(24, seed=5, scenes=3)
  monkeypatch.setattr(np.random, "default_rng", counted_rng)
  duplicates._band_positions.cache_clear()
  duplicates._simhash_planes.cache_clear()
  entries = [list(beam_duplicates._band_entries((number, [(member, None, fingerprint)])))
             for number, (member, fingerprint) in enumerate(zip(members, fingerprints))]
  assert len(made) <= 2, len(made)
  # Each entry: the picture's bucket and place in its band, as the one-process bands give.
  words = duplicates._as_words([f.perceptual for f in fingerprints])
  thumbnails, _ = duplicates._thumbnail_rows([f.thumbnail for f in fingerprints])
  keys = duplicates._thumbnail_keys(thumbnails)
  buckets = duplicates._bucket_keys(words, duplicates._band_positions())
  for band in (0, 31, duplicates.BANDS - 1):
    places = duplicates._places(buckets[band], words, keys, band)
    assert [entry[band][0] for entry in entries] == [(band, int(b)) for b in buckets[band]]
    assert [entry[band][1][0] for entry in entries] == places.tolist()
