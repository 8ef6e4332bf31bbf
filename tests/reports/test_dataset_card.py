"""dataset_card: counts per split and class, size and format distribution, duplicates."""

from imagesets.reports import dataset_card
from imagesets.analysis import duplicates
from imagesets.analysis import image_hashes
from imagesets_testing import sample_images

Member = duplicates.Member


def _fingerprint(height, width, fmt="jpeg"):
  return image_hashes.Fingerprint("0" * 32, 0, height, width, fmt)


IMAGES = [(Member("train", "a/1", "a"), _fingerprint(100, 150)),
          (Member("train", "b/2", "b"), _fingerprint(300, 400)),
          (Member("train", "a/3", "a"), _fingerprint(600, 500, "png")),
          (Member("test", "a/4", "a"), _fingerprint(3000, 4000))]


def test_statistics():
  stats = dataset_card.statistics(dataset_card.Tallies.of(IMAGES))
  assert stats == {"splits": {"train": {"a": 2, "b": 1}, "test": {"a": 1}},
                   "shorter_side": {"0-127": 1, "256-511": 2, ">= 2048": 1},
                   "formats": {"jpeg": 3, "png": 1},
                   "sizes": {"min": [100, 150], "max": [3000, 4000]}}


def test_card_shows_counts_and_names_leaks_and_conflicts():
  group = duplicates.Group("near", (Member("train", "a/1", "a"), Member("test", "a/4", "b")))
  card = dataset_card.markdown("pets/1.0.0", dataset_card.Tallies.of(IMAGES), [group])
  assert "| a | 2 | 1 |" in card and "| **total** | 3 | 1 |" in card
  assert "Formats: jpeg 3, png 1" in card
  assert "1 cross splits (leakage): train/a/1 = test/a/4; 1 label conflict(s)" in card
  assert "| near | yes | yes | train/a/1: a<br>test/a/4: b |" in card


def test_names_are_escaped_in_the_markdown():
  members = [duplicates.Member("train", "cat/a|b.jpg", "cat"),
             duplicates.Member("test", "dog/<img src=x onerror=alert(1)>.jpg", "cat")]
  fingerprint = image_hashes.of_bytes(sample_images.encode(sample_images.photo(40, 50, seed=1),
                                                           "JPEG"))
  images = [(m, fingerprint) for m in members]
  card = dataset_card.markdown("pets", dataset_card.Tallies.of(images), duplicates.find(members, [fingerprint] * 2))
  assert "<img" not in card and "a|b" not in card
  assert "&lt;img src=x onerror=alert(1)&gt;" in card and "a\\|b" in card


def test_a_backslash_in_a_name_is_shown_as_itself():
  # Markdown reads a backslash before punctuation as an escape: the name a\|b was written
  # a\\|b and shown as a|b; x\&lt; was shown as x&lt;. The backslash is escaped too.
  group = duplicates.Group("exact", (Member("train", "cat/a\\|b.jpg", "cat"),
                                     Member("test", "cat/x\\&lt;.jpg", "cat")))
  card = dataset_card.markdown("pets", dataset_card.Tallies.of(IMAGES), [group])
  assert "train/cat/a\\\\\\|b.jpg: cat<br>test/cat/x\\\\&amp;lt;.jpg: cat" in card
