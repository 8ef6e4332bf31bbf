"""voc_round_trip (through `imagesets verify`'s `round_trip.verify`): images byte for byte,
masks as the source PNGs' palette indices, every listed id stored in its split."""

import numpy as np
import pytest
import tensorflow_datasets as tfds

from imagesets.verifying import round_trip
from imagesets.voc_segmentation import voc_pairs
from imagesets.voc_segmentation import voc_segmentation_dataset_builder as voc
from imagesets_testing import fake_voc


@pytest.mark.parametrize("file_format", ["tfrecord", "array_record"])
def test_voc_images_and_masks_match_their_source(tmp_path, file_format):
  folder = fake_voc.write_tree(tmp_path / "src", num_train=3, num_val=2)
  builder = voc.Builder(data_dir=tmp_path / "tfds", file_format=file_format)
  builder.download_and_prepare(
      download_config=tfds.download.DownloadConfig(manual_dir=str(tmp_path / "src")))
  report = round_trip.verify(builder.data_path, tmp_path / "src")
  assert report.ok and report.checked == 5 == report.identical, report.lines()
  # One class id changed in one mask, one listed id dropped from the build's view.
  image_id = (folder / voc_pairs.LISTS_DIR / "val.txt").read_text().split()[0]
  mask_path = folder / voc_pairs.CLASS_DIR / f"{image_id}.png"
  indices = np.array(fake_voc.PIL.Image.open(mask_path))
  indices[0, 0] = 1 if indices[0, 0] != 1 else 2
  fake_voc.write_palette_png(indices, mask_path)
  with open(folder / voc_pairs.LISTS_DIR / "train.txt", "a") as listed:
    listed.write("2012_999999\n")
  report = round_trip.verify(builder.data_path, tmp_path / "src")
  found = {p.where: p.reason for p in report.mismatches}
  assert "class_mask differs" in found[image_id]
  assert "not stored in train" in found["2012_999999"]
  assert len(found) == 2
