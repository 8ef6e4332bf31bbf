"""version_diff: every kind of change, matched by content, then by file name."""

import hashlib

import numpy as np

from imagesets.reports import version_diff
from imagesets_testing import planted_copies
from imagesets_testing import sample_images

Entry = version_diff.Entry


def e(split, name, label, seed: bytes):
  """An example whose image is a small PNG of pixels drawn from `seed`."""
  pixels = np.frombuffer(hashlib.sha256(seed).digest()[:12], np.uint8).reshape(2, 2, 3)
  return Entry.of(split, name, label, sample_images.encode(pixels, "PNG"))


OLD = [e("train", "cat/1.jpg", "cat", b"one"), e("train", "cat/2.jpg", "cat", b"two"),
       e("train", "dog/3.jpg", "dog", b"three"), e("test", "dog/4.jpg", "dog", b"four"),
       e("test", "cat/5.jpg", "cat", b"five"), e("train", "cat/6.jpg", "cat", b"six"),
       e("train", "dog/7.jpg", "dog", b"seven")]
NEW = [e("train", "cat/1.jpg", "cat", b"one"),            # unchanged
       e("train", "cat/2.jpg", "cat", b"two, edited"),    # changed
       e("train", "cat/3.jpg", "cat", b"three"),          # relabelled (moved to cat/)
       e("train", "dog/4.jpg", "dog", b"four"),           # moved test -> train
       e("test", "cat/8.jpg", "cat", b"eight"),           # added
       e("train", "cat/6b.jpg", "cat", b"six"),           # renamed
       e("train", "dog/7.jpg", "cat", b"seven")]          # relabelled in place
# cat/5.jpg removed


def test_every_kind_per_split_with_labels():
  result = version_diff.diff(OLD, NEW)
  assert not result.same
  assert result.to_json() == {"splits": {
      "train": {"added": [], "removed": [],
                "changed": [{"file_name": "cat/2.jpg", "label": "cat"}],
                "relabelled": [{"file_name": "cat/3.jpg", "label": "cat", "old_label": "dog",
                                "old_file_name": "dog/3.jpg"},
                               {"file_name": "dog/7.jpg", "label": "cat", "old_label": "dog"}],
                "renamed": [{"file_name": "cat/6b.jpg", "label": "cat",
                             "old_file_name": "cat/6.jpg"}],
                "moved_in": [{"file_name": "dog/4.jpg", "label": "dog", "from": "test"}],
                "moved_out": [], "unchanged": 1},
      "test": {"added": [{"file_name": "cat/8.jpg", "label": "cat"}],
               "removed": [{"file_name": "cat/5.jpg", "label": "cat"}],
               "changed": [], "relabelled": [], "renamed": [], "moved_in": [],
               "moved_out": [{"file_name": "dog/4.jpg", "label": "dog", "to": "train"}],
               "unchanged": 0}}}


def test_a_rename_is_its_own_kind_and_a_difference():
  """Same content, split and label under another file name: listed, never silent."""
  pixels = sample_images.photo(60, 80, seed=2)
  old = [Entry.of("train", "cat/1.jpg", "cat", planted_copies.original(pixels)),
         Entry.of("train", "cat/2.jpg", "cat", planted_copies.original(pixels[::-1]))]
  new = [Entry.of("train", "cat/one.jpg", "cat", planted_copies.exact(pixels)),  # EXIF added
         Entry.of("train", "cat/2.jpg", "cat", planted_copies.original(pixels[::-1]))]
  result = version_diff.diff(old, new)
  assert not result.same
  assert result.splits["train"]["renamed"] == [
      {"file_name": "cat/one.jpg", "label": "cat", "old_file_name": "cat/1.jpg"}]
  assert result.splits["train"]["unchanged"] == 1
  assert not any(result.splits["train"][kind] for kind in version_diff.KINDS
                 if kind != "renamed")


def test_same_examples_in_another_order_are_the_same():
  result = version_diff.diff(OLD, list(reversed(OLD)))
  assert result.same and result.splits["train"]["unchanged"] == 5


def test_without_file_names_matching_is_by_content():
  old = [e("train", None, "0", b"a"), e("train", None, "1", b"b"), e("test", None, "0", b"c")]
  new = [e("train", None, "1", b"a"), e("test", None, "1", b"b"), e("test", None, "0", b"d")]
  splits = version_diff.diff(old, new).splits
  assert [i["old_label"] for i in splits["train"]["relabelled"]] == ["0"]
  assert splits["test"]["moved_in"][0]["file_name"].startswith("sha256:")
  assert len(splits["test"]["added"]) == len(splits["test"]["removed"]) == 1


def test_summary_has_a_line_and_a_class_table_per_split_and_shows_names():
  lines = version_diff.summary(version_diff.diff(OLD, NEW), "pets:1.0.0", "pets:1.1.0", show=1)
  assert lines[0] == ("pets:1.0.0 -> pets:1.1.0: 1 added, 1 removed, 1 changed, 2 relabelled, "
                      "1 renamed, 1 moved between splits; 1 unchanged")
  assert lines[1] == "train: 1 changed, 2 relabelled, 1 renamed, 1 moved in; 1 unchanged"
  assert lines[2].split() == ["class", "added", "removed", "changed", "relabelled", "renamed",
                              "moved", "in", "moved", "out"]
  assert lines[3].split() == ["cat", "0", "0", "1", "2", "1", "0", "0"]
  assert "    relabelled: cat/3.jpg [cat] (was dog/3.jpg [dog])" in lines
  assert "    renamed: cat/6b.jpg [cat] (was cat/6.jpg)" in lines
  assert "    relabelled: ... and 1 more" in lines


def test_a_relabel_that_changes_split_is_a_relabel_and_a_move():
  old = [e("train", "cat/1.jpg", "cat", b"one")]
  new = [e("test", "cat/1.jpg", "dog", b"one")]
  result = version_diff.diff(old, new)
  assert result.splits["test"]["relabelled"] == [
      {"file_name": "cat/1.jpg", "label": "dog", "old_label": "cat", "from": "train"}]
  assert result.splits["train"]["moved_out"] == [
      {"file_name": "cat/1.jpg", "label": "cat", "to": "test"}]
  assert version_diff.summary(result, "a", "b")[0] == (
      "a -> b: 0 added, 0 removed, 0 changed, 1 relabelled (1 of them also moved), "
      "0 renamed, 1 moved between splits; 0 unchanged")


def test_a_relabelled_or_moved_example_names_its_old_file():
  """A relabel in class folders is a new path: the old one is named, as for a rename."""
  old = [e("train", "dog/1.jpg", "dog", b"one"), e("train", "cat/2.jpg", "cat", b"two")]
  new = [e("train", "cat/1.jpg", "cat", b"one"), e("test", "cat/2b.jpg", "cat", b"two")]
  result = version_diff.diff(old, new)
  assert result.splits["train"]["relabelled"] == [
      {"file_name": "cat/1.jpg", "label": "cat", "old_label": "dog", "old_file_name": "dog/1.jpg"}]
  assert result.splits["test"]["moved_in"] == [
      {"file_name": "cat/2b.jpg", "label": "cat", "old_file_name": "cat/2.jpg", "from": "train"}]
  assert result.splits["train"]["moved_out"] == [
      {"file_name": "cat/2.jpg", "label": "cat", "to": "test", "new_file_name": "cat/2b.jpg"}]


def test_a_label_to_or_from_none_is_shown_and_a_nameless_side_gets_no_old_name():
  """A version without labels (label None) or without file names (matched by content)."""
  old = [e("train", "a/1.jpg", None, b"one"), e("train", None, "cat", b"two")]
  new = [e("train", "a/1.jpg", "cat", b"one"), e("train", "b/2.jpg", "dog", b"two")]
  result = version_diff.diff(old, new)
  assert result.splits["train"]["relabelled"] == [
      {"file_name": "a/1.jpg", "label": "cat", "old_label": None},
      {"file_name": "b/2.jpg", "label": "dog", "old_label": "cat"}]
  lines = version_diff.summary(result, "a", "b", show=5)
  assert "    relabelled: a/1.jpg [cat] (was [None])" in lines
  assert "    relabelled: b/2.jpg [dog] (was [cat])" in lines


def test_a_photo_replaced_under_its_name_in_another_split_is_changed_and_moved():
  """Under content split keys, new bytes pick the split anew: the replacement is said."""
  result = version_diff.diff([e("train", "cat/1.jpg", "cat", b"one"),
                              e("train", "cat/2.jpg", "cat", b"two")],
                             [e("test", "cat/1.jpg", "cat", b"other"),
                              e("train", "cat/2.jpg", "cat", b"two")])
  splits = result.splits
  assert splits["test"]["changed"] == [{"file_name": "cat/1.jpg", "label": "cat",
                                        "from": "train"}]
  assert splits["train"]["moved_out"] == [{"file_name": "cat/1.jpg", "label": "cat",
                                           "to": "test", "changed": True}]
  assert splits["test"]["moved_in"] == [{"file_name": "cat/1.jpg", "label": "cat",
                                         "from": "train"}]
  assert not any(splits[split][kind] for split in splits for kind in ("added", "removed"))
  # Each split's old count: unchanged + removed + renamed + moved_out + what did not move.
  assert splits["train"]["unchanged"] + len(splits["train"]["moved_out"]) == 2
  assert version_diff.summary(result, "a", "b")[0] == (
      "a -> b: 0 added, 0 removed, 1 changed (1 of them also moved), 0 relabelled, "
      "0 renamed, 1 moved between splits; 1 unchanged")


def test_a_name_in_several_splits_is_matched_only_within_its_split():
  """Builders whose splits share file names (oxford17's train1/test2 ...): a name the
  whole side holds more than once is no match across splits, also once its other copies
  are paired."""
  old = [e("train1", "image_0001.jpg", "a", b"one"), e("test2", "image_0001.jpg", "a", b"one")]
  new = [e("train1", "image_0001.jpg", "a", b"new"),
         e("validation2", "image_0001.jpg", "a", b"new")]
  splits = version_diff.diff(old, new).splits
  assert splits["train1"]["changed"] == [{"file_name": "image_0001.jpg", "label": "a"}]
  assert splits["test2"]["removed"] == [{"file_name": "image_0001.jpg", "label": "a"}]
  assert splits["validation2"]["added"] == [{"file_name": "image_0001.jpg", "label": "a"}]
  assert not any(splits[s][k] for s in splits for k in ("moved_in", "moved_out"))


def test_a_copy_whose_name_is_gone_is_the_one_renamed():
  """Two old copies of one picture, one renamed, the other's name now on new content: the
  rename is the copy whose name is gone; the other is changed under its name."""
  for other in ("validation", "train"):
    old = [e("train", "a.jpg", "x", b"X"), e(other, "d.jpg", "x", b"X")]
    new = [e(other, "b.jpg", "x", b"X"), e("train", "a.jpg", "x", b"Y")]
    splits = version_diff.diff(old, new).splits
    assert splits[other]["renamed"] == [{"file_name": "b.jpg", "label": "x",
                                         "old_file_name": "d.jpg"}], other
    assert splits["train"]["changed"] == [{"file_name": "a.jpg", "label": "x"}], other
    assert not any(splits[s][k] for s in splits
                   for k in ("added", "removed", "moved_in", "moved_out")), (other, splits)


def test_a_replacement_that_moves_with_another_label_is_one_change():
  """As in place: `changed` with its `old_label` (and the move), not also `relabelled`."""
  splits = version_diff.diff([e("train", "a.jpg", "cat", b"one")],
                             [e("test", "a.jpg", "dog", b"two")]).splits
  assert splits["test"]["changed"] == [{"file_name": "a.jpg", "label": "dog",
                                        "old_label": "cat", "from": "train"}]
  assert splits["test"]["relabelled"] == []


def test_a_photo_moved_over_anothers_name_keeps_both_photos_lines():
  """dog/IMG_0002.jpg moved into bird/ over bird/IMG_0002.jpg (camera names clash): the
  dog photo is relabelled under its new path, the bird photo it replaced is removed; with
  names matched first, the dog path was "removed" and the bird photo's loss unsaid."""
  old = [e("train", "dog/IMG_0002.jpg", "dog", b"dog photo"),
         e("test", "bird/IMG_0002.jpg", "bird", b"bird photo"),
         e("train", "dog/IMG_0003.jpg", "dog", b"another dog")]
  new = [e("train", "bird/IMG_0002.jpg", "bird", b"dog photo"),
         e("train", "dog/IMG_0003.jpg", "dog", b"another dog")]
  splits = version_diff.diff(old, new).splits
  assert splits["train"]["relabelled"] == [
      {"file_name": "bird/IMG_0002.jpg", "label": "bird", "old_label": "dog",
       "old_file_name": "dog/IMG_0002.jpg"}]
  assert splits["test"]["removed"] == [{"file_name": "bird/IMG_0002.jpg", "label": "bird"}]
  assert splits["train"]["unchanged"] == 1
  assert sum(len(splits[s][k]) for s in splits for k in version_diff.KINDS) == 2
  # Moved over it in another split: still the photo itself, moved and relabelled.
  moved = version_diff.diff(old, [e("test", "bird/IMG_0002.jpg", "bird", b"dog photo")])
  assert moved.splits["test"]["relabelled"][0]["old_file_name"] == "dog/IMG_0002.jpg"
  assert moved.splits["test"]["removed"] == [{"file_name": "bird/IMG_0002.jpg",
                                              "label": "bird"}]


def test_same_pixels_other_bytes_is_unchanged():
  pixels = sample_images.photo(60, 80, seed=1)
  old = [Entry.of("train", "cat/1.jpg", "cat", planted_copies.original(pixels))]
  new = [Entry.of("train", "cat/1.jpg", "cat", planted_copies.exact(pixels))]  # EXIF added
  assert version_diff.diff(old, new).same


def test_every_example_is_accounted_for_once_on_each_side():
  """Random edits of random versions (kept, edited in place or into another split, moved,
  renamed, relabelled, removed, added; names and contents that collide): each split's old
  count = unchanged + removed + renamed + moved_out + its changed and relabelled that did
  not move; its new count the same with added and moved_in."""
  rng = np.random.default_rng(7)
  splits = ["train", "validation", "test"]
  for case in range(150):
    old, new = [], []
    for i in range(int(rng.integers(0, 12))):
      split, name = splits[rng.integers(3)], f"c{rng.integers(2)}/{rng.integers(8)}.jpg"
      label, seed = name.split("/")[0], f"{case}.{rng.integers(10)}".encode()
      old.append(e(split, name, label, seed))
      edit = rng.integers(7)
      if edit == 0:
        continue                                                        # removed
      if edit in (1, 2):                                                # edited (maybe moved)
        seed, split = seed + b" edited", splits[rng.integers(3)] if edit == 2 else split
      elif edit == 3:
        split = splits[rng.integers(3)]                                 # moved
      elif edit == 4:
        name = f"{label}/{rng.integers(8)}b.jpg"                        # renamed
      elif edit == 5:
        label = "c2"                                                    # relabelled
      new.append(e(split, name, label, seed))
    for i in range(int(rng.integers(0, 4))):                            # added
      new.append(e(splits[rng.integers(3)], f"c0/{rng.integers(8)}.jpg", "c0",
                   f"{case}.new{i}".encode()))
    result = version_diff.diff(old, new).splits
    for split in splits:
      changes = result.get(split)
      if changes is None:
        assert not any(x.split == split for x in old + new)
        continue
      stayed = sum("from" not in item for kind in ("changed", "relabelled")
                   for item in changes[kind])
      both = changes["unchanged"] + len(changes["renamed"]) + stayed
      assert sum(x.split == split for x in old) == (
          both + len(changes["removed"]) + len(changes["moved_out"])), (case, split, changes)
      assert sum(x.split == split for x in new) == (
          both + len(changes["added"]) + len(changes["moved_in"])), (case, split, changes)
