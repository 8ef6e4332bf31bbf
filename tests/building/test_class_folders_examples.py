"""class_folders_examples: one image file of a class-per-folder tree becomes one example (its
bytes when they can be stored as they are, else a recorded conversion); a bad file becomes a
BadItem naming why, never a crash of the worker."""

import io
import pickle

import numpy as np
import PIL.Image
import pytest

from imagesets.building import class_folders_examples as examples
from imagesets.building import generation
from imagesets_testing import sample_images
from imagesets_testing.trees import write_tree

UPRIGHT = sample_images.photo(40, 30, seed=4)
FILES = {
    "cat/plain.jpg": sample_images.jpeg(30, 40, seed=1),
    "cat/nested/deeper/big.JPG": sample_images.jpeg(300, 400, seed=2),
    "dog/phone.jpg": sample_images.sideways_jpeg(UPRIGHT),
    "dog/sticker.png": sample_images.rgba_png(UPRIGHT),
    "dog/cut.jpg": sample_images.jpeg(60, 80, seed=3)[:300],
    "dog/text.jpg": b"not an image\n",
}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
  return write_tree(tmp_path_factory.mktemp("tree"), FILES)


def _pixels(encoded):
  with PIL.Image.open(io.BytesIO(encoded)) as image:
    return np.asarray(image)


def test_a_plain_jpeg_is_stored_as_it_came_with_its_facts(root):
  features, conversion = examples.make_example(root, "cat/plain.jpg")
  assert conversion is None
  assert features == {"image": FILES["cat/plain.jpg"], "label": "cat",
                      "file_name": "cat/plain.jpg", "height": 30, "width": 40, "channels": 3,
                      "format": "jpeg"}


def test_the_label_is_the_top_level_folder_of_a_nested_file(root):
  features, _ = examples.make_example(root, "cat/nested/deeper/big.JPG")
  assert (features["label"], features["file_name"]) == ("cat", "cat/nested/deeper/big.JPG")


def test_a_sideways_phone_photo_is_stored_upright_and_says_why(root):
  features, conversion = examples.make_example(root, "dog/phone.jpg")
  assert conversion and "orientation" in conversion.lower()
  assert (features["height"], features["width"]) == UPRIGHT.shape[:2]
  assert _pixels(features["image"]).shape == UPRIGHT.shape
  assert np.abs(_pixels(features["image"]).astype(int) - UPRIGHT).mean() < 8


def test_an_rgba_png_is_stored_as_rgb(root):
  features, conversion = examples.make_example(root, "dog/sticker.png")
  assert conversion is not None and features["channels"] == 3
  assert _pixels(features["image"]).shape == (*UPRIGHT.shape[:2], 3)


def test_shorter_side_downscales_large_files_only(root):
  big, why = examples.make_example(root, "cat/nested/deeper/big.JPG", shorter_side=64)
  assert why is not None and 64 <= min(big["height"], big["width"]) < 300
  assert _pixels(big["image"]).shape[:2] == (big["height"], big["width"])
  small, why = examples.make_example(root, "cat/plain.jpg", shorter_side=64)
  assert why is None and small["image"] == FILES["cat/plain.jpg"]  # never upscaled


@pytest.mark.parametrize("path, says", [("dog/cut.jpg", "unreadable image header"),
                                        ("dog/text.jpg", "not an image"),
                                        ("dog/gone.jpg", "cannot be read")])
def test_a_bad_file_is_a_bad_item_with_its_reason(root, path, says):
  with pytest.raises(generation.BadItem, match=says):
    examples.process_file(examples.work_item(root, path))


def test_process_file_is_picklable_by_reference_for_beam_and_worker_processes(root):
  function = pickle.loads(pickle.dumps(examples.process_file))
  assert function is examples.process_file
  assert function(examples.work_item(root, "cat/plain.jpg"))[0]["image"] == FILES["cat/plain.jpg"]
