"""page_pictures: a picture is reused only for the very same input, and a bad cache costs
pictures, never a wrong one."""

import io
import json
import os

import numpy as np
import PIL.Image

from imagesets.reports import page_pictures
from imagesets.reports import report_page
from imagesets.reports import version_examples
from imagesets_testing import photo_crops
from imagesets_testing import sample_images


class Counted:
  def __init__(self):
    self.made = []

  def __call__(self, image, boxes, mask):
    self.made.append(image)
    return report_page.thumbnail(image, boxes, mask)


def _examples(count: int, seed: int = 4) -> list[version_examples.Example]:
  return [version_examples.Example("train", f"{picture.scene}/{i}.jpg", picture.scene, data)
          for i, (picture, data) in enumerate(photo_crops.jpegs(count, seed=seed,
                                                                 size=(120, 90)))]


def test_a_second_page_reuses_the_pictures_of_the_same_images_only(tmp_path):
  path = tmp_path / page_pictures.FILE
  examples = _examples(12)
  first = page_pictures.Cache(path, make=Counted())
  uris = [first.picture(e) for e in examples]
  assert len(first._make.made) == 12 and all(u.startswith("data:image/jpeg") for u in uris)
  first.save()
  edited = version_examples.Example("train", "edited.jpg", "x", sample_images.encode(
      np.asarray(PIL.Image.open(io.BytesIO(examples[0].image)))[::-1], "JPEG"))
  boxed = version_examples.Example("train", "boxed.jpg", "x", examples[1].image,
                                   boxes=((0.1, 0.1, 0.5, 0.5, "cat"),))
  second = page_pictures.Cache(path, make=Counted())
  again = [second.picture(e) for e in examples[2:]] + [second.picture(edited),
                                                       second.picture(boxed)]
  assert again[:10] == uris[2:] and second.reused == 10
  assert second._make.made == [edited.image, boxed.image]  # (other bytes; other boxes)
  assert again[10] == report_page.thumbnail(edited.image) and again[11] != uris[1]
  second.save()  # holds what the second page asked for, no more
  assert len(json.loads(path.read_text())["pictures"]) == 12


def test_a_cache_that_is_not_one_costs_pictures_not_a_wrong_one(tmp_path):
  path = tmp_path / page_pictures.FILE
  examples = _examples(3)
  cache = page_pictures.Cache(path)
  good = [cache.picture(e) for e in examples]
  cache.save()
  stored = json.loads(path.read_text())
  keys = sorted(stored["pictures"])
  stored["pictures"][keys[0]] = "javascript:alert(1)"  # (inlined into the page: refused)
  stored["pictures"][keys[1]] = "data:image/jpeg;base64,<b>"
  path.write_text(json.dumps(stored))
  counted = page_pictures.Cache(path, make=Counted())
  assert [counted.picture(e) for e in examples] == good
  assert len(counted._make.made) == 2 and counted.reused == 1
  for text in ("{", "[1, 2]", "", '{"pictures": [], "records": {}}'):
    path.write_text(text)
    counted = page_pictures.Cache(path, make=Counted())
    assert [counted.picture(e) for e in examples] == good and counted.reused == 0
  assert page_pictures.beside("gs://bucket/data/pets/1.0.0") is None


def _mask(image: bytes, value: int) -> bytes:
  width, height = PIL.Image.open(io.BytesIO(image)).size
  out = io.BytesIO()
  PIL.Image.fromarray(np.full((height, width), value, np.uint8)).save(out, "PNG")
  return out.getvalue()


def test_another_mask_another_library_or_a_full_build_draws_again(tmp_path, monkeypatch):
  path = tmp_path / page_pictures.FILE
  image = _examples(1)[0].image
  masked = version_examples.Example("train", "a.jpg", "x", image, mask=_mask(image, 1))
  first = page_pictures.Cache(path)
  tinted = first.picture(masked)
  first.save()
  other_mask = version_examples.Example("train", "a.jpg", "x", image, mask=_mask(image, 2))
  again = page_pictures.Cache(path, make=Counted())
  assert again.picture(masked) == tinted and again.reused == 1
  assert again.picture(other_mask) != tinted and again._make.made == [image]
  # a full build (nothing to build on) reads no old picture; another Pillow draws anew
  full = page_pictures.Cache(path, reuse=False, make=Counted())
  assert full.picture(masked) == tinted and full.reused == 0 and len(full._make.made) == 1
  monkeypatch.setattr(page_pictures, "_DRAWN_BY", ("another Pillow",))
  upgraded = page_pictures.Cache(path, make=Counted())
  upgraded.picture(masked)
  assert upgraded.reused == 0


def test_what_is_not_a_regular_file_is_not_read(tmp_path):
  path = tmp_path / page_pictures.FILE
  os.mkfifo(path)  # (opened without waiting for a writer)
  assert page_pictures.Cache(path)._old == {}
  path.unlink()
  path.symlink_to("/dev/zero")  # (not followed, never read whole)
  assert page_pictures.Cache(path)._old == {}


class Reads:
  """A `version_examples.Located`'s reader that counts its reads."""

  def __init__(self, image: bytes):
    self.image, self.count = image, 0

  def __call__(self) -> bytes:
    self.count += 1
    return self.image


def _located(example, record: str | None) -> tuple[version_examples.Located, Reads]:
  read = Reads(example.image)
  return version_examples.Located(example.split, example.file_name, example.label, read,
                                  record=record), read


def test_a_record_known_by_its_shard_and_position_is_pictured_without_reading_it(tmp_path):
  path = tmp_path / page_pictures.FILE
  examples = _examples(4)
  first = page_pictures.Cache(path, reuse=False)
  records = [f"{'ab' * 32}/{i}" for i in range(4)]
  uris = [first.picture(_located(e, r)[0]) for e, r in zip(examples, records)]
  first.save()
  second = page_pictures.Cache(path, make=Counted())
  kept = [_located(e, r) for e, r in zip(examples, records)]
  assert [second.picture(located) for located, _ in kept] == uris
  assert [read.count for _, read in kept] == [0] * 4 and second.reused == 4
  # Another shard or position is another record: read, and its picture found by its bytes
  # (a photo a rewritten shard keeps)
  moved, read = _located(examples[0], f"{'cd' * 32}/0")
  assert second.picture(moved) == uris[0] and read.count == 1 and second.reused == 5
  assert second._make.made == []
  second.save()
  stored = json.loads(path.read_text())
  assert len(stored["pictures"]) == 4 and len(stored["records"]) == 5
  # A record key pointing at no stored picture, or a cache of an older imagesets (key ->
  # picture only): the record is read
  stored["pictures"].pop(stored["records"][page_pictures.record_key(records[2])])
  path.write_text(json.dumps(stored))
  third = page_pictures.Cache(path, make=Counted())
  located, read = _located(examples[2], records[2])
  assert third.picture(located) == uris[2] and read.count == 1 and len(third._make.made) == 1
  path.write_text(json.dumps(stored["pictures"]))
  older = page_pictures.Cache(path, make=Counted())
  located, read = _located(examples[3], records[3])
  assert older.picture(located) == uris[3] and read.count == 1 and older.reused == 1
