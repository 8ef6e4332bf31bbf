"""duplicates: groups of exact and near copies, leakage and label conflicts, what drop removes."""

import collections
import dataclasses
import json
import os
import random
import tracemalloc

import numpy as np
import pytest

from gated_pool import GatedPool
from imagesets.analysis import duplicates
from imagesets.analysis import image_hashes
from imagesets_testing import photo_crops
from imagesets_testing import planted_copies
from imagesets_testing import real_photos
from imagesets_testing import sample_images

Member = duplicates.Member


def _flip(value: int, bits: int, rng: random.Random) -> int:
  for bit in rng.sample(range(image_hashes.HASH_BITS), bits):
    value ^= 1 << bit
  return value


@pytest.mark.parametrize("flipped", [0, 8, 16])
def test_near_pairs_finds_hashes_a_few_bits_apart_among_many(flipped):
  rng = random.Random(flipped)
  hashes = [rng.getrandbits(image_hashes.HASH_BITS) for _ in range(5000)]
  planted = {index: len(hashes) + n for n, index in enumerate(range(0, 5000, 100))}
  hashes += [_flip(hashes[index], flipped, rng) for index in planted]
  found = duplicates.near_pairs(hashes)
  assert found == set(planted.items())  # every planted pair, no random one (they differ by ~64)


def test_near_pairs_respects_the_threshold():
  rng = random.Random(1)
  base = rng.getrandbits(image_hashes.HASH_BITS)
  hashes = [base, _flip(base, 20, rng), _flip(base, 40, rng)]
  assert duplicates.near_pairs(hashes, threshold=26) == {(0, 1)}


def _planted():
  """Ten distinct photos in train (labels a/b), each kind of copy of one of them elsewhere."""
  members, fingerprints = [], []
  photos = [sample_images.photo(150 + 9 * i, 200, seed=40 + i) for i in range(10)]
  for index, pixels in enumerate(photos):
    members.append(Member("train", f"{index}.jpg", "ab"[index % 2]))
    fingerprints.append(image_hashes.of_bytes(planted_copies.original(pixels)))
  for index, (kind, make) in enumerate(planted_copies.KINDS.items()):
    split = ["train", "validation", "test", "test", "validation"][index]
    label = "b" if kind == "crop_5" else "ab"[index % 2]  # photo 4 is "a": a label conflict
    members.append(Member(split, f"copy_{kind}.jpg", label))
    fingerprints.append(image_hashes.of_bytes(make(photos[index])))
  return members, fingerprints


def test_every_kind_of_copy_is_found_and_distinct_photos_are_not_paired():
  groups = duplicates.find(*_planted())
  assert [[m.file_name for m in g.members] for g in groups] == [
      ["0.jpg", "copy_exact.jpg"], ["1.jpg", "copy_jpeg_q60.jpg"],
      ["2.jpg", "copy_resized_50.jpg"], ["3.jpg", "copy_png.jpg"], ["4.jpg", "copy_crop_5.jpg"]]
  # (a PNG of a JPEG's pixels is a near copy: fingerprints decode JPEGs small, PNGs in full)
  assert [g.kind for g in groups] == ["exact", "near", "near", "near", "near"]
  assert [g.cross_split for g in groups] == [False, True, True, True, True]
  assert [g.label_conflict for g in groups] == [False, False, False, False, True]


def test_drop_keeps_the_earliest_split_of_each_leaking_group():
  groups = duplicates.find(*_planted())
  assert [(m.split, m.file_name) for m in duplicates.to_drop(groups)] == [
      ("validation", "copy_crop_5.jpg"), ("validation", "copy_jpeg_q60.jpg"),
      ("test", "copy_png.jpg"), ("test", "copy_resized_50.jpg")]
  # A copy in validation and test only: validation keeps it.
  group = duplicates.Group("exact", (Member("validation", "v", "a"), Member("test", "t", "a")))
  assert duplicates.to_drop([group]) == [Member("test", "t", "a")]


def test_summary_names_the_leaks_and_json_round_trips():
  members, fingerprints = _planted()
  groups = duplicates.find(members, fingerprints)
  line = duplicates.summary(groups, len(members), show=2)
  assert line.startswith("duplicates: 5 group(s) (1 exact, 4 near) among 15 images; 4 cross "
                         "splits (leakage): train/1.jpg = validation/copy_jpeg_q60.jpg; "
                         "train/2.jpg = test/copy_resized_50.jpg; and 2 more")
  assert line.endswith("; 1 label conflict(s)")
  report = duplicates.to_json(groups, len(members))
  assert report["groups"][0] == {"kind": "exact", "cross_split": False, "label_conflict": False,
                                 "members": [{"split": "train", "file_name": "0.jpg", "label": "a"},
                                             {"split": "train", "file_name": "copy_exact.jpg",
                                              "label": "a"}],
                                 "exact_sets": [], "links": []}
  assert duplicates.from_json(report) == (groups, [])
  assert duplicates.summary([], 3) == "duplicates: none among 3 images"
  # A drop that left no group is still said (the dropped are not among the images).
  assert (duplicates.summary([], 3, [Member("test", "x.jpg", "a")])
          == "duplicates: none among 3 images; dropped 1 leaked example(s)")


def test_a_near_group_says_which_members_have_the_very_same_pixels():
  pixels = sample_images.photo(150, 200, seed=3)
  members = [Member("train", "a.jpg", "a"), Member("test", "b.jpg", "a"),
             Member("validation", "c.jpg", "a")]
  fingerprints = [image_hashes.of_bytes(planted_copies.original(pixels)),
                  image_hashes.of_bytes(planted_copies.exact(pixels)),
                  image_hashes.of_bytes(planted_copies.jpeg_q60(pixels))]
  [group] = duplicates.find(members, fingerprints)
  assert group.kind == "near" and [m.split for m in group.members] == ["train", "validation",
                                                                       "test"]
  assert group.exact_sets == ((0, 2),)  # train/a.jpg and test/b.jpg: the same pixels
  assert group.same_pixels() == ["train/a.jpg = test/b.jpg"]


def test_a_near_group_lists_its_sets_of_copies_by_their_first_members():
  pixels = sample_images.photo(150, 200, seed=3)
  members = [Member("test", "b.jpg", "a"), Member("validation", "d.jpg", "a"),
             Member("train", "a.jpg", "a"), Member("validation", "c.jpg", "a")]
  fingerprints = [image_hashes.of_bytes(make(pixels)) for make in (
      planted_copies.exact, planted_copies.jpeg_q60, planted_copies.original,
      planted_copies.jpeg_q60)]
  [group] = duplicates.find(members, fingerprints)
  assert [m.file_name for m in group.members] == ["a.jpg", "c.jpg", "d.jpg", "b.jpg"]
  assert group.kind == "near" and group.exact_sets == ((0, 3), (1, 2))
  assert group.same_pixels() == ["train/a.jpg = test/b.jpg",
                                 "validation/c.jpg = validation/d.jpg"]


def _fingerprints(pictures, make):
  return {name: image_hashes.of_bytes(make(pixels)) for name, pixels in pictures.items()}


def test_tiles_of_real_photos_are_not_paired():
  # Whole photos and tiles of them: textures, skies and microscopy, where the 128-bit
  # hashes alone propose distinct pairs; the thumbnails must refuse every one.
  pictures = {**real_photos.photos(), **real_photos.tiles(3), **real_photos.tiles(5)}
  named = _fingerprints(pictures, planted_copies.original)
  members = [Member("train", name, name.split("#")[0]) for name in named]
  groups = duplicates.find(members, list(named.values()))
  # (a tile and its own photo or an overlapping tile of it may pair; other photos never)
  assert [[m.file_name for m in g.members] for g in groups
          if len({m.label for m in g.members}) > 1] == []


@pytest.mark.parametrize("kind", list(planted_copies.KINDS))
def test_each_kind_of_copy_of_real_photos_is_found(kind):
  pictures = real_photos.photos()
  originals = _fingerprints(pictures, planted_copies.original)
  copies = _fingerprints(pictures, planted_copies.KINDS[kind])
  members = ([Member("train", name, name) for name in originals]
             + [Member("test", name, name) for name in copies])
  groups = duplicates.find(members, list(originals.values()) + list(copies.values()))
  found = sorted(g.members[0].file_name for g in groups
                 if [(m.split, m.file_name) for m in g.members]
                 == [("train", g.members[0].file_name), ("test", g.members[0].file_name)])
  assert len(found) >= len(pictures) - (1 if kind == "crop_5" else 0), sorted(
      set(pictures) - set(found))
  assert len(groups) == len(found)  # and nothing else paired


def test_drop_does_not_chain_a_near_group():
  a, b, c = (Member(s, n, "x") for s, n in (("train", "a"), ("validation", "b"), ("test", "c")))
  group = duplicates.Group("near", (a, b, c), links=((0, 1), (1, 2)))  # a ~ b ~ c, a unlike c
  assert duplicates.to_drop([group]) == [b]
  group = duplicates.Group("near", (a, b, c), links=((0, 1), (0, 2), (1, 2)))
  assert duplicates.to_drop([group]) == [b, c]


def test_drop_removes_every_copy_of_a_dropped_picture_the_links_reach_through_its_pixels():
  # A photo in train, and one resized copy of it stored twice (the same bytes) in validation
  # and test: the links join train to validation's copy only (one member an exact set), yet
  # the test copy has its pixels: it leaks as much and must go too (it was kept).
  pixels = real_photos.photos()["coffee"]
  members = [Member("train", "a.jpg", "x"), Member("validation", "b.jpg", "x"),
             Member("test", "c.jpg", "x")]
  fingerprints = [image_hashes.of_bytes(planted_copies.original(pixels))] + [
      image_hashes.of_bytes(planted_copies.resized_half(pixels))] * 2
  [group] = duplicates.find(members, fingerprints)
  assert group.kind == "near" and group.exact_sets == ((1, 2),) and group.links == ((0, 1),)
  assert duplicates.to_drop([group]) == members[1:]


def test_a_picture_stored_a_thousand_times_costs_no_quadratic_memory():
  # (a "no photo" placeholder, black frames): once 32 million pairs were listed, 8.6 GB.
  rng = random.Random(5)
  thumbnail = bytes(rng.getrandbits(8) for _ in range(image_hashes.SMALL ** 2))
  fingerprints = [image_hashes.Fingerprint(f"{i:032x}", rng.getrandbits(image_hashes.HASH_BITS),
                                           8, 8, "jpeg", thumbnail) for i in range(19_000)]
  same = rng.getrandbits(image_hashes.HASH_BITS)
  fingerprints += [image_hashes.Fingerprint("f" * 32 if i % 2 else "e" * 32, same, 8, 8, "jpeg",
                                            thumbnail) for i in range(1000)]
  members = [Member("train" if i % 3 else "test", f"{i}.jpg", "a") for i in range(20_000)]
  tracemalloc.start()
  try:
    groups = duplicates.find(members, fingerprints)
    peak = tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()
  assert [len(g.members) for g in groups] == [1000] and groups[0].kind == "near"
  assert peak < 100 * 2 ** 20
  assert len(duplicates.to_drop(groups)) == sum(m.split == "test" for m in groups[0].members)


def test_a_stored_report_is_checked_and_names_are_printable():
  members, fingerprints = _planted()
  report = duplicates.to_json(duplicates.find(members, fingerprints), len(members))
  counts = {"train": 11, "validation": 2, "test": 2}
  assert duplicates.from_json(report, "s3://b/pets/duplicates.json", counts)[0]
  bad = [{**report, "num_images": 99}, {**report, "groups": [{"kind": "near", "members": [
      {"split": "train", "file_name": "a", "label": "a", "extra": 1}] * 2}]},
         {k: v for k, v in report.items() if k != "num_images"},
         {**report, "groups": [{**report["groups"][1], "exact_sets": [[0, 99]]}]},
         # a member repeated: each repeat would print the member's name again (a page of
         # 100 MB from a report of 300 KB)
         {**report, "groups": [{**report["groups"][1], "exact_sets": [[0] * 1000]}]},
         {**report, "groups": [{**report["groups"][1], "exact_sets": [[0, 1], [1, 0]]}]},
         {**report, "groups": [report["groups"][1]] * 2},  # an image in two groups
         {**report, "groups": [{**report["groups"][1],
                                "members": report["groups"][1]["members"] * 2}]}]
  for broken in bad:
    with pytest.raises(duplicates.BadReport, match=r"^s3://b/pets/duplicates.json: unreadable "
                       r"duplicate report \(.+\); run imagesets duplicates SPEC --recompute"):
      duplicates.from_json(broken, "s3://b/pets/duplicates.json", counts)
  name = "train/\x1b]0;owned\x07\x1b[2J.jpg"
  assert duplicates.printable(name) == "train/\\x1b]0;owned\\x07\\x1b[2J.jpg"
  group = duplicates.Group("exact", (Member("train", name[6:], "a"), Member("test", "b", "a")))
  assert "\x1b" not in duplicates.summary([group], 2)


def test_the_summary_of_a_report_stored_by_a_build(tmp_path):
  """What `imagesets build` and the demo print after a build: the stored report's line,
  checked against the version beside it (its folder may come from elsewhere)."""
  members, fingerprints = _planted()
  splits = dict(collections.Counter(m.split for m in members))
  assert duplicates.stored_summary(tmp_path, splits) is None  # (none stored: --leakage off)
  groups = duplicates.find(members, fingerprints)
  (tmp_path / duplicates.REPORT_FILE).write_text(
      json.dumps(duplicates.to_json(groups, len(members))))
  assert duplicates.stored_summary(tmp_path, splits) == duplicates.summary(groups, len(members))
  assert duplicates.stored_summary(tmp_path, splits).startswith("duplicates: ")
  # not JSON; no image count; nested past Python's recursion limit (a bare RecursionError)
  for broken in ('{"groups": [', '{"groups": []}',
                 '{"groups": ' + "[" * 100_000 + "]" * 100_000 + "}"):
    (tmp_path / duplicates.REPORT_FILE).write_text(broken)
    with pytest.raises(duplicates.BadReport, match=rf"^{tmp_path}/duplicates.json: unreadable "
                       r"duplicate report \(.+\); run imagesets duplicates SPEC --recompute"):
      duplicates.stored_summary(tmp_path, splits)
  (tmp_path / duplicates.REPORT_FILE).write_text(  # another version's report, or a forged one
      json.dumps(duplicates.to_json(groups, 999999)))
  with pytest.raises(duplicates.BadReport, match="num_images 999999 but the version holds"):
    duplicates.stored_summary(tmp_path, splits)


# What a picture may cost in thumbnail checks, whatever the clustering: PARTNERS while
# groups are joined (`_near_links`), _ALL_PAIRS - 1 in a small cross-split group.
_CHECKS_A_PICTURE = duplicates.PARTNERS + duplicates._ALL_PAIRS - 1


class _Checks:
  """Every thumbnail check `find` makes: in all, and per picture (exact-set representative).
  Counts `_alike`'s pairs and also calls of the one-pair `similarity`, so that code checking
  pairs one by one is counted too."""

  def __init__(self, monkeypatch):
    self.total, self.counts = 0, []
    alike, similarity = getattr(duplicates, "_alike", None), duplicates.similarity

    def counted_alike(thumbnails, blank, first, second, *rest):
      self.total += len(first)
      self.counts.append(np.bincount(np.concatenate([first, second]),
                                     minlength=len(thumbnails)))
      return alike(thumbnails, blank, first, second, *rest)

    def counted_similarity(a, b):
      self.total += 1
      return similarity(a, b)

    if alike is not None:  # (code that checks one pair at a time has only `similarity`)
      monkeypatch.setattr(duplicates, "_alike", counted_alike)
    monkeypatch.setattr(duplicates, "similarity", counted_similarity)

  def most_of_one_picture(self) -> int:
    return int(np.sum(self.counts, axis=0).max()) if self.counts else 0


def _fingerprinted(made):
  pictures, fingerprints = [], []
  for picture, data in made:
    pictures.append(picture)
    fingerprints.append(image_hashes.of_bytes(data))
  return pictures, fingerprints


@pytest.fixture(scope="module")
def crops_of_three_scenes():
  """2,000 crops and burst frames of three real photos: correlated hashes."""
  return _fingerprinted(photo_crops.jpegs(2000, seed=7, scenes=3, size=(200, 133)))


def test_grouping_crops_of_a_few_scenes_checks_a_bounded_number_of_pairs(
    monkeypatch, crops_of_three_scenes):
  # Joining candidates before confirming them made one component of a scene's crops and
  # checked its pairs: 161,237 checks for 3,000 crops of five scenes (54 a picture).
  pictures, fingerprints = crops_of_three_scenes
  checks = _Checks(monkeypatch)
  members = [Member("train" if i % 4 else "test", f"{i}.jpg", p.scene)
             for i, p in enumerate(pictures)]
  groups = duplicates.find(members, fingerprints)
  assert checks.total <= 5 * len(pictures)  # (10 checks in all a picture)
  assert checks.most_of_one_picture() <= _CHECKS_A_PICTURE
  # Only confirmed pairs join: no group mixes scenes, and burst frames are found together.
  index = {m: i for i, m in enumerate(members)}
  assert all(g.label_conflict is False for g in groups)
  group_of = {index[m]: n for n, g in enumerate(groups) for m in g.members}
  bursts = collections.defaultdict(set)
  for i, picture in enumerate(pictures):
    if picture.burst >= 0:
      bursts[picture.burst].add(group_of.get(i, -1 - i))
  assert sum(len(groups_of_burst) == 1 for groups_of_burst in bursts.values()) >= 0.8 * len(bursts)


def test_one_picture_a_thousand_times_other_bytes_costs_about_one_check_each(monkeypatch):
  # The same frame re-encoded 1,000 times (other pixels each time): one near group.
  photo = real_photos.photos()["coffee"]
  made = ((None, sample_images.encode(np.clip(photo.astype(int) + shift % 7 - 3, 0, 255)
                                      .astype(np.uint8), "JPEG", quality=50 + shift % 50))
          for shift in range(1000))
  _, fingerprints = _fingerprinted(made)
  assert len({f.pixels for f in fingerprints}) > 100
  checks = _Checks(monkeypatch)
  [group] = duplicates.find([Member("train", f"{i}.jpg", "a") for i in range(1000)],
                            fingerprints)
  assert len(group.members) == 1000
  assert checks.total <= 2 * len({f.pixels for f in fingerprints})


def test_mostly_alike_pictures_cost_a_bounded_number_of_checks(monkeypatch):
  # 1,500 crops of one photo (a folder of one subject: documents, X-rays): hashes close,
  # most crops overlapping, joined into one long chain.
  pictures, fingerprints = _fingerprinted(photo_crops.jpegs(
      1500, seed=3, scenes=1, size=(96, 96), share_in_bursts=0))
  checks = _Checks(monkeypatch)
  duplicates.find([Member("train", f"{i}.jpg", "a") for i in range(1500)], fingerprints)
  assert checks.total <= 24 * len(pictures)  # (48 checks in all a picture)
  assert checks.most_of_one_picture() <= _CHECKS_A_PICTURE


def test_the_summary_shows_a_leak_by_members_of_two_splits_in_one_line():
  # A burst of five train frames with one test frame sorted last was shown as three train
  # members: no leak visible in the line that says there is one.
  burst = tuple(Member("train", f"frame_{i}.jpg", "a") for i in range(5)) + (
      Member("test", "frame_9.jpg", "a"),)
  groups = [duplicates.Group("near", burst, links=tuple((i, i + 1) for i in range(5)))] * 500
  line = duplicates.summary(groups, 3000)
  assert ": train/frame_0.jpg = train/frame_1.jpg = test/frame_9.jpg (+3);" in line
  assert "\n" not in line and len(line) < 400 and line.count("frame_0") == 3


def test_a_crowd_of_one_hash_finds_its_copies_within_the_cap(monkeypatch):
  # Hashes that cannot tell pictures apart (flat frames, one texture, scans of one form):
  # 1,515 tiles of the real photos given hashes at most 2 bits apart, 76 of them with a
  # JPEG quality 60 copy. The thumbnails must find every copy, each picture within its
  # checks (without the cap some took part in 366).
  rng = random.Random(11)
  base = rng.getrandbits(image_hashes.HASH_BITS)
  tiles = {f"{name}@{grid}": pixels for grid in (4, 6, 7)
           for name, pixels in real_photos.tiles(grid).items()}
  owners, fingerprints = [], []
  for number, pixels in enumerate(tiles.values()):
    made = [planted_copies.original(pixels)] + (
        [planted_copies.jpeg_q60(pixels)] if number % 20 == 0 else [])
    for data in made:
      owners.append(number)
      fingerprints.append(dataclasses.replace(image_hashes.of_bytes(data),
                                              perceptual=_flip(base, 2, rng)))
  checks = _Checks(monkeypatch)
  members = [Member("train", f"{i}.jpg", "a") for i in range(len(owners))]
  groups = duplicates.find(members, fingerprints)
  assert checks.most_of_one_picture() <= duplicates.PARTNERS  # (no cross-split group)
  group_of = {int(m.file_name[:-4]): n for n, g in enumerate(groups) for m in g.members}
  copies = [i for i in range(1, len(owners)) if owners[i] == owners[i - 1]]
  assert len(copies) == 76
  assert [i for i in copies if group_of.get(i, -1) != group_of.get(i - 1, -2)] == []


@pytest.mark.parametrize("seed", [1, 2])
def test_the_groups_are_the_same_whatever_order_the_images_come_in(
    crops_of_three_scenes, seed):
  # A version built on a base lists its kept photos first: its report must be a full
  # build's, links included (`to_drop` follows them).
  pictures, fingerprints = crops_of_three_scenes
  members = [Member("train" if i % 4 else "test", f"{i}.jpg", p.scene)
             for i, p in enumerate(pictures)]
  order = list(range(len(members)))
  random.Random(seed).shuffle(order)
  groups = duplicates.find(members, fingerprints)
  shuffled = duplicates.find([members[i] for i in order], [fingerprints[i] for i in order])
  assert sum(len(g.links) for g in groups) > len(groups)  # (groups of three and more)
  assert duplicates.to_json(shuffled, len(members)) == duplicates.to_json(groups, len(members))
  assert duplicates.to_drop(shuffled) == duplicates.to_drop(groups)


def test_members_of_one_name_with_other_labels_group_whatever_their_order():
  # (one name, two labels: a stored report read back, or a builder whose names repeat)
  made = [image_hashes.of_bytes(sample_images.encode(real_photos.photos()["coffee"],
                                                    "JPEG"))] * 3  # (the same picture)
  members = [Member("train", "a.jpg", "cat"), Member("train", "a.jpg", "dog"),
             Member("test", "b.jpg", "cat")]
  one = duplicates.find(members, made)
  other = duplicates.find(members[::-1], made)
  assert duplicates.to_json(one, 3) == duplicates.to_json(other, 3) and one


def test_a_pairs_score_is_the_same_bits_whatever_else_is_compared_with_it(
    crops_of_three_scenes):
  """Scores decide groups at a threshold: a pair scored alone (a version built on a base,
  a Beam worker) must get the very bits it gets among thousands of pairs."""
  _, fingerprints = crops_of_three_scenes
  thumbnails, _ = duplicates._thumbnail_rows([f.thumbnail for f in fingerprints])
  rng = np.random.default_rng(3)
  first = rng.integers(0, len(thumbnails), 3000)
  second = rng.integers(0, len(thumbnails), 3000)
  together = duplicates.similarities(thumbnails, first, second)
  for size in (1, 7, 500):
    apart = np.concatenate([duplicates.similarities(thumbnails, first[at:at + size],
                                                    second[at:at + size])
                            for at in range(0, len(first), size)])
    assert np.array_equal(apart, together), size
  # Regions made once for every picture (`find` under _REGIONS_HELD) give the same bits.
  held = duplicates._every_region(thumbnails)
  assert np.array_equal(duplicates.similarities(thumbnails, first, second, held), together)


def test_groups_are_the_same_with_regions_held_or_made_per_check(
    monkeypatch, crops_of_three_scenes):
  pictures, fingerprints = crops_of_three_scenes
  members = [duplicates.Member("train", f"{i:05d}.jpg", None) for i in range(len(pictures))]
  held = duplicates.find(members, fingerprints)
  monkeypatch.setattr(duplicates, "_REGIONS_HELD", 0)
  assert duplicates.find(members, fingerprints) == held
  assert any(group.kind == duplicates.NEAR for group in held)


def test_a_pictures_thumbnail_keys_are_the_same_bits_in_any_batch(crops_of_three_scenes,
                                                                   monkeypatch):
  # The bands sort by them and `_far_apart` cuts by them: a Beam worker keys a picture alone.
  _, fingerprints = crops_of_three_scenes
  thumbnails, _ = duplicates._thumbnail_rows([f.thumbnail for f in fingerprints])
  together = duplicates._thumbnail_keys(thumbnails)
  for size in (1, 7, 500):
    apart = [duplicates._thumbnail_keys(thumbnails[at:at + size])
             for at in range(0, len(thumbnails), size)]
    for field, held in zip(together._fields, together):
      assert np.array_equal(np.concatenate([getattr(a, field) for a in apart]), held), field
  # `find` keys them from the regions it holds for the checks: the same bits (in blocks
  # that start apart from the regions' blocks too)
  regions = duplicates._every_region(thumbnails)
  monkeypatch.setattr(duplicates, "_BATCH", 7)
  for held_regions in (regions, duplicates._every_region(thumbnails)):
    from_regions = duplicates._thumbnail_keys(thumbnails, held_regions)
    for field, held in zip(together._fields, together):
      assert np.array_equal(getattr(from_regions, field), held), field


def _every_kept_pair_checked(words, thumbnails, blank):
  """Step 3 of the module doc as written: every kept pair checked, components of the
  confirmed ones, their minimum spanning forest."""
  count = len(words)
  codes, votes = duplicates._picked(words, duplicates._thumbnail_keys(thumbnails),
                                    duplicates.THRESHOLD)
  first, second = codes // count, codes % count
  distance = duplicates._distances(words, first, second)
  kept = duplicates._partnered(first, second, votes, distance, count)
  first, second, distance = first[kept], second[kept], distance[kept]
  alike = duplicates._alike(thumbnails, blank, first, second)
  parent = list(range(count))

  def root(node):
    while parent[node] != node:
      node = parent[node]
    return node
  for a, b in zip(first[alike].tolist(), second[alike].tolist()):
    a, b = root(a), root(b)
    parent[max(a, b)] = min(a, b)
  links = duplicates.forest_links(first[alike], second[alike], distance[alike], count)
  return ([root(node) for node in range(count)],
          sorted(zip(first[alike][links].tolist(), second[alike][links].tolist())),
          int(len(first)))


@pytest.mark.parametrize("scenes", [1, 3])
def test_checking_only_what_can_change_the_forest_gives_every_checked_pairs_groups(
    monkeypatch, scenes):
  # `_near_links` skips pairs already joined; Beam's workers check every kept pair. Both
  # must give the same components and links (crops of one scene: long chains, refusals).
  pictures, fingerprints = _fingerprinted(photo_crops.jpegs(
      1200, seed=scenes, scenes=scenes, size=(96, 96), share_in_bursts=0.3))
  thumbnails, blank = duplicates._thumbnail_rows([f.thumbnail for f in fingerprints])
  words = duplicates._as_words([f.perceptual for f in fingerprints])
  labels, links, kept = _every_kept_pair_checked(words, thumbnails, blank)
  checks = _Checks(monkeypatch)
  found = duplicates._near_links(words, thumbnails, blank, duplicates.THRESHOLD)
  assert found.label.tolist() == labels
  assert sorted(zip(found.first.tolist(), found.second.tolist())) == links
  assert len(set(labels)) < len(labels) - 100 and len(links) > 100
  assert checks.total < kept  # (fewer checks for the same answer)


def test_a_bucket_picked_alone_or_in_stretches_picks_what_the_whole_band_picks(
    crops_of_three_scenes):
  # Beam's workers pick a band's bucket alone, or a large one in stretches of its order
  # with the WINDOW entries on either side: each must pick exactly what the band picks.
  _, fingerprints = crops_of_three_scenes
  words = duplicates._as_words([f.perceptual for f in fingerprints])
  thumbnails, _ = duplicates._thumbnail_rows([f.thumbnail for f in fingerprints])
  keys = duplicates._thumbnail_keys(thumbnails)
  count, compared = len(words), 0
  bands = duplicates._bucket_keys(words, duplicates._band_positions())
  for band in (0, 17, 63):
    key = bands[band]
    codes = duplicates._band_picks(words, key, keys, band, duplicates.THRESHOLD)
    assert codes.dtype == np.int64  # (i * N + j passes 2**31 at 46,341 pictures)
    whole = collections.Counter(codes.tolist())
    for bucket, size in collections.Counter(key.tolist()).most_common(3):
      held = np.flatnonzero(key == bucket)
      part = lambda at: (words[at], key[at], duplicates._Keys(*(k[at] for k in keys)))
      alone = duplicates._band_picks(*part(held), band, duplicates.THRESHOLD)
      picked = collections.Counter((held[alone // size] * count + held[alone % size]).tolist())
      assert picked == collections.Counter(
          {code: n for code, n in whole.items() if key[code // count] == bucket})
      # In stretches: the bucket's order cut in three, each with its neighbours' WINDOW.
      order = held[duplicates._sorted_places(
          duplicates._places(key[held], words[held], part(held)[2], band))]
      stretched = collections.Counter()
      for start, end in ((0, size // 3), (size // 3, 2 * size // 3), (2 * size // 3, size)):
        near = np.sort(order[max(0, start - duplicates.WINDOW):end + duplicates.WINDOW])
        own = np.isin(near, order[start:end])
        codes = duplicates._band_picks(*part(near), band, duplicates.THRESHOLD, own)
        stretched.update((near[codes // len(near)] * count + near[codes % len(near)]).tolist())
      assert stretched == picked
      compared += size
  assert compared > 150


def _every_pick(words, keys):
  """Every band's picks, counted: what `_picked` merges run by run."""
  picks = collections.Counter()
  bands = duplicates._bucket_keys(words, duplicates._band_positions())
  for band, key in enumerate(bands):
    picks.update(duplicates._band_picks(words, key, keys, band, duplicates.THRESHOLD).tolist())
  return picks


def _partners_by_hand(first, second, votes, distance):
  """Each picture's PARTNERS first pairs by (picks, distance, the other), kept by both."""
  mine = collections.defaultdict(list)
  for pair, (a, b) in enumerate(zip(first.tolist(), second.tolist())):
    rank = duplicates.partner_rank(int(votes[pair]), int(distance[pair]))
    mine[a].append((rank, b, pair))
    mine[b].append((rank, a, pair))
  kept = collections.Counter(pair for pairs in mine.values()
                             for _, _, pair in sorted(pairs)[:duplicates.PARTNERS])
  return np.array([kept[pair] == 2 for pair in range(len(first))], bool)


def _band_picks_by_hand(words, key, keys, band):
  """A band's picks as the module doc says them, one picture at a time: each picks the
  PICKS nearest candidates after it and the PICKS nearest before it in its bucket's order."""
  places = duplicates._places(key, words, keys, band).tolist()
  order = sorted(range(len(words)), key=lambda i: (places[i], i))
  bits = lambda value: bin(int(value)).count("1")

  def candidate(a, b):
    far = (bits(keys.simhash[a] ^ keys.simhash[b]) > duplicates._FAR_BITS
           and not keys.flat[a] and not keys.flat[b])
    return (key[a] == key[b] and not far and bits(words[a, 0] ^ words[b, 0])
            + bits(words[a, 1] ^ words[b, 1]) <= duplicates.THRESHOLD)
  picks = collections.Counter()
  for at, picture in enumerate(order):
    for step in (1, -1):
      near = [order[at + step * offset] for offset in range(1, duplicates.WINDOW + 1)
              if 0 <= at + step * offset < len(order)]
      for other in [o for o in near if candidate(picture, o)][:duplicates.PICKS]:
        picks[min(picture, other) * len(words) + max(picture, other)] += 1
  return picks


def test_a_band_picks_what_each_picture_picks_by_hand(crops_of_three_scenes):
  # `_band_pairs` gives each pair once with its picks (1 or 2), picked offset by offset for
  # every picture at once: the picks of the pictures one by one.
  _, fingerprints = crops_of_three_scenes
  words = duplicates._as_words([f.perceptual for f in fingerprints])
  thumbnails, _ = duplicates._thumbnail_rows([f.thumbnail for f in fingerprints])
  keys = duplicates._thumbnail_keys(thumbnails)
  bands = duplicates._bucket_keys(words, duplicates._band_positions())
  once = twice = 0
  for band in (0, 17, 40, 63):
    low, high, picks = duplicates._band_pairs(words, bands[band], keys, band,
                                              duplicates.THRESHOLD)
    codes = duplicates._codes(low, high, len(words))
    assert len(np.unique(codes)) == len(codes) and picks.dtype == np.uint8
    assert dict(zip(codes.tolist(), picks.tolist())) == _band_picks_by_hand(
        words, bands[band], keys, band)
    once, twice = once + int((picks == 1).sum()), twice + int((picks == 2).sum())
  assert once > 50 and twice > 1000  # (pairs picked by one of their pictures, by both)


@pytest.mark.parametrize("count, picks, last", [
    (1, 0, 0), (2, 0, 0), (50, 3, 3), (50, 49, 0), (50, 49, 10), (50, 50, 0), (50, 4000, 64),
    (3_000_000, 10, 10), (3_000_000, 4000, 0), (3_000_000, 3_500_000, 64)])
def test_picks_are_counted_as_every_pick_whichever_way(count, picks, last):
  # (`_counted` sorts fewer pairs than pictures, buckets more by picture: the same result;
  # pairs in any order, a pair given once or twice a band, the `last` given the last pair
  # up to BANDS times: up to 2 BANDS picks)
  rng = np.random.default_rng(count + picks + last)
  first = rng.integers(0, max(count - 1, 1), picks)
  second = np.minimum(first + 1 + rng.integers(0, 3, picks), count - 1)
  codes = first * count + second
  codes[:last] = (count - 2) * count + count - 1 if count > 1 else 0
  codes = rng.permutation(codes)
  times = rng.integers(1, 3, picks).astype(np.uint8)
  low, high = (ends.astype(duplicates._index_type(count)) for ends in np.divmod(codes, count))
  got, votes = duplicates._counted(low, high, times, count)
  every = np.repeat(codes, times)
  distinct, counted = np.unique(every, return_counts=True)
  assert got.dtype == np.int64 and votes.dtype == np.uint8
  assert np.array_equal(got, distinct) and np.array_equal(votes, counted)
  if last == duplicates.BANDS:
    assert votes.max() > duplicates.BANDS  # (the last pair: past 64 picks, within a byte)
  if picks > last + 20:
    assert len(distinct) > 10 and len(set(votes.tolist())) > 1  # (sums of mixed weights)


@pytest.mark.parametrize("held, ranked", [(1000, 1), (5000, 300), (1 << 22, 1 << 20)])
def test_picks_merged_in_runs_and_partners_ranked_in_ranges_are_every_picks(
    monkeypatch, crops_of_three_scenes, held, ranked):
  # `_picked` counts picks in runs of _HELD_PICKS and merges them; `_partnered` ranks
  # _RANKED pairs at a time: at any sizes, what a count of every pick and a ranking of
  # each picture's pairs by hand give.
  _, fingerprints = crops_of_three_scenes
  monkeypatch.setattr(duplicates, "_HELD_PICKS", held)
  monkeypatch.setattr(duplicates, "_RANKED", ranked)
  words = duplicates._as_words([f.perceptual for f in fingerprints])
  thumbnails, _ = duplicates._thumbnail_rows([f.thumbnail for f in fingerprints])
  keys = duplicates._thumbnail_keys(thumbnails)
  codes, votes = duplicates._picked(words, keys, duplicates.THRESHOLD)
  assert dict(zip(codes.tolist(), votes.tolist())) == _every_pick(words, keys)
  count = len(words)
  first, second = codes // count, codes % count
  distance = duplicates._distances(words, first, second).astype(np.uint8)
  kept = duplicates._partnered(first, second, votes, distance, count)
  assert np.array_equal(kept, _partners_by_hand(first, second, votes, distance))
  crowded = np.bincount(np.concatenate([first, second])) > duplicates.PARTNERS
  assert crowded.sum() > 20 and (~kept).sum() > 100  # (pictures past PARTNERS: ranked)


@pytest.mark.parametrize("seed", range(20))
def test_groups_sorted_by_their_first_members_are_in_group_order(seed):
  """`sorted_groups` keys only the first members unless two groups share one (a name
  twice, other pixels): the order of `group_order` either way."""
  rng = np.random.default_rng(seed)
  names = [f"{c}/{i:03d}.jpg" for c in "ab" for i in range(int(rng.integers(2, 30)))]
  groups = []
  for _ in range(int(rng.integers(0, 40))):
    members = sorted({duplicates.Member(str(rng.choice(["train", "test", "validation"])),
                                        str(rng.choice(names)),
                                        str(rng.choice(["a", "b"])) if rng.random() < 0.9
                                        else None) for _ in range(int(rng.integers(2, 5)))},
                     key=duplicates.member_order)
    if len(members) < 2:
      continue
    links = tuple((0, i) for i in range(1, len(members)) if rng.random() < 0.7)
    groups.append(duplicates.Group(duplicates.NEAR, tuple(members), ((0,),), links))
  shuffled = [groups[i] for i in rng.permutation(len(groups))]
  assert duplicates.sorted_groups(shuffled) == sorted(groups, key=duplicates.group_order)


def test_workers_that_pick_the_bands_give_the_groups_one_process_finds(
    monkeypatch, crops_of_three_scenes):
  """`find(pool=)`: two worker processes pick half of the bands each, merged here; the
  groups and links are those a process alone finds (2,000 crops of three real scenes:
  correlated hashes, many pairs picked twice). Fewer pictures than _PICKED_APART: picked
  here, nothing sent."""
  from imagesets.building import parallel_map
  pictures, fingerprints = crops_of_three_scenes
  members = [Member(("train", "test", "validation")[i % 3], f"{i:04d}.jpg", p.scene)
             for i, p in enumerate(pictures)]
  alone = duplicates.find(members, fingerprints)
  sent = []
  monkeypatch.setattr(duplicates, "_PICKED_APART", 1_000)
  _picked_here_only_below(monkeypatch, 1_000)  # (the workers' picks, not made here again)
  with parallel_map.executor(2) as pool:
    submit = pool.submit
    monkeypatch.setattr(pool, "submit", lambda fn, *args: sent.append(
        (fn.__name__, args[3])) or submit(fn, *args))
    apart = duplicates.find(members, fingerprints, pool=pool)
    assert sent == [("_picked_in", range(0, duplicates.BANDS // 2)),
                    ("_picked_in", range(duplicates.BANDS // 2, duplicates.BANDS))]
    few = duplicates.find(members[:999], fingerprints[:999], pool=pool)
  assert len(sent) == 2
  assert apart == alone and len(alone) > 20 and any(len(g.links) > 5 for g in alone)
  assert few == duplicates.find(members[:999], fingerprints[:999])


def _picked_here_only_below(monkeypatch, count: int) -> None:
  """`_picked` (every band picked in this process) refuses `count` pictures or more."""
  picked = duplicates._picked

  def here(words, *args):
    assert len(words) < count, "picked in this process, not taken from the workers"
    return picked(words, *args)
  monkeypatch.setattr(duplicates, "_picked", here)


def test_the_caller_goes_on_while_the_workers_pick(monkeypatch, crops_of_three_scenes):
  """`begin` returns with the bands handed to the workers and none of their work done;
  `groups()` takes their picks: the groups `find` gives."""
  pictures, fingerprints = crops_of_three_scenes
  members = [Member(("train", "test")[i % 2], f"{i:04d}.jpg", p.scene)
             for i, p in enumerate(pictures)]
  alone = duplicates.find(members, fingerprints)
  monkeypatch.setattr(duplicates, "_PICKED_APART", 1_000)
  _picked_here_only_below(monkeypatch, 1_000)
  pool = GatedPool()
  try:
    finding = duplicates.begin(members, fingerprints, pool=pool)
    assert pool.sent == ["_picked_in", "_picked_in"]
  finally:
    pool.gate.set()
  assert finding.groups() == alone and pool.sent == ["_picked_in", "_picked_in"]
  pool.threads.shutdown()


class _Broken:
  """A pool whose worker dies with the work (`BrokenProcessPool`), or that is shut down."""

  def __init__(self, shut: bool):
    self.shut, self.sent = shut, 0

  def submit(self, *args):
    import concurrent.futures
    self.sent += 1
    if self.shut:
      raise RuntimeError("cannot schedule new futures after shutdown")
    future = concurrent.futures.Future()
    future.set_exception(concurrent.futures.process.BrokenProcessPool("a worker died"))
    return future


@pytest.mark.parametrize("shut", [False, True])
def test_groups_a_lost_worker_would_have_found_are_found_here(monkeypatch, shut,
                                                            crops_of_three_scenes):
  """A worker killed while it picks (out of memory), or a pool already shut down: the
  build picks and checks itself; the same groups."""
  pictures, fingerprints = crops_of_three_scenes
  members = [Member(("train", "test")[i % 2], f"{i:04d}.jpg", p.scene)
             for i, p in enumerate(pictures)]
  monkeypatch.setattr(duplicates, "_PICKED_APART", 1_000)
  pool = _Broken(shut)
  assert duplicates.find(members, fingerprints, pool=pool) == duplicates.find(
      members, fingerprints)
  assert pool.sent == (1 if shut else 2)


def test_a_bands_bucket_is_its_hash_bits_in_order_and_places_any_bands_at_once():
  rng = random.Random(11)
  hashes = [rng.getrandbits(image_hashes.HASH_BITS) for _ in range(300)] + [0, (1 << 128) - 1]
  words = duplicates._as_words(hashes)
  positions = duplicates._band_positions()
  buckets = duplicates._bucket_keys(words, positions)
  assert buckets.shape == (duplicates.BANDS, len(hashes)) and buckets.dtype == np.uint64
  for band, bits in enumerate(positions.tolist()):  # (bit 0: the hash's highest)
    assert buckets[band].tolist() == [
        sum(((h >> (127 - bit)) & 1) << (len(bits) - 1 - k) for k, bit in enumerate(bits))
        for h in hashes]
  assert duplicates._bucket_keys(words, positions[5:7]).tolist() == buckets[5:7].tolist()
  for few in (0, 1, 3, duplicates._GATHERED):  # (few hashes: every bit gathered at once)
    assert duplicates._bucket_keys(words[:few], positions).tolist() == buckets[:, :few].tolist()
  # One picture's places in every band at once (Beam's workers) are its band-by-band ones.
  thumbnails = np.random.default_rng(3).integers(0, 256, (len(hashes), image_hashes.SMALL**2),
                                                  np.uint8)
  keys = duplicates._thumbnail_keys(thumbnails)
  for picture in (0, 7, len(hashes) - 1):
    one = duplicates._Keys(*(field[picture:picture + 1] for field in keys))
    at_once = duplicates._places(buckets[:, picture], words[picture:picture + 1], one,
                                 np.arange(duplicates.BANDS))
    assert at_once.tolist() == [
        duplicates._places(buckets[band], words, keys, band)[picture]
        for band in range(duplicates.BANDS)]


def _advised_huge(array: np.ndarray) -> bool:
  """Whether the mapping holding the middle of `array`'s memory was advised to use huge
  pages ("hg" in its VmFlags: numpy advises it for the 2 MiB-aligned part of its large
  arrays)."""
  address = array.__array_interface__["data"][0] + array.nbytes // 2
  with open("/proc/self/smaps") as maps:
    inside = False
    for line in maps:
      fields = line.split()
      if "-" in fields[0] and ":" not in fields[0]:
        low, high = (int(part, 16) for part in fields[0].split("-"))
        inside = low <= address < high
      elif inside and fields[0] == "VmFlags:":
        return "hg" in fields[1:]
  raise AssertionError("no mapping holds the array")


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="Linux's memory maps")
def test_the_regions_are_held_in_small_pages():
  # Where the kernel compacts memory to find huge pages, one first touch of tens of MB
  # advised to use them cost a build up to 0.25 s of system time; small pages, ~0.01 s.
  thumbnails = np.random.default_rng(0).integers(0, 256, (20_000, image_hashes.SMALL ** 2),
                                                 np.uint8)
  numpy_own = np.ones(thumbnails.size * 4, np.float32)
  if not _advised_huge(numpy_own):
    pytest.skip("numpy advises no huge pages here")
  regions = duplicates._every_region(thumbnails)
  assert regions.standard.nbytes > 20 * 2**20 and not _advised_huge(regions.standard)
  np.testing.assert_array_equal(  # (the same values as regions made a block at a time)
      regions.standard[:5], duplicates._regions(thumbnails[:5].astype(np.float32),
                                                duplicates._centre_maps()).standard)
