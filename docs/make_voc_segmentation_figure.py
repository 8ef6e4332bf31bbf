"""Draws docs/voc_segmentation_examples.png: images, masks overlaid in VOC colours, masks.

    python docs/make_voc_segmentation_figure.py

The real VOC tar cannot be downloaded where this was written, so the figure is built
from a generated VOC-shaped tree (imagesets_testing.fake_voc), through the
real path: `voc_segmentation` built with --manual_dir, read back with tfds.load, and the
decoded class ids coloured with the PASCAL palette.
"""

import pathlib
import tempfile

import numpy as np
import PIL.Image
import PIL.ImageDraw
import tensorflow_datasets as tfds

import imagesets  # noqa: F401
from imagesets.annotations import masks
from imagesets_testing import fake_voc
from imagesets.voc_segmentation import voc_pairs

OUT = pathlib.Path(__file__).resolve().parent / "voc_segmentation_examples.png"
COLUMNS = ("image", "class_mask overlaid (alpha 0.55)", "class_mask", "object_mask")
LABEL_HEIGHT = 14


def _overlay(image, class_ids, alpha=0.55):
  colours = masks.pascal_palette()[class_ids]
  blended = image * (1 - alpha) + colours * alpha
  labelled = class_ids != 0  # background shows the photo
  return np.where(labelled[..., None], blended, image).astype(np.uint8)


def _legend(width, per_row=8, swatch=12):
  """The 21 class colours and void's, with their ids and names."""
  entries = [*enumerate(voc_pairs.CLASS_NAMES), (voc_pairs.VOID, "void")]
  rows = -(-len(entries) // per_row)
  legend = PIL.Image.new("RGB", (width, rows * (swatch + 6) + 6), (255, 255, 255))
  draw = PIL.ImageDraw.Draw(legend)
  palette = masks.pascal_palette()
  for position, (class_id, name) in enumerate(entries):
    x, y = 6 + (position % per_row) * (width // per_row), 6 + (position // per_row) * (swatch + 6)
    draw.rectangle((x, y, x + swatch, y + swatch), fill=tuple(int(v) for v in palette[class_id]),
                   outline=(0, 0, 0))
    draw.text((x + swatch + 3, y), f"{class_id} {name}", fill=(0, 0, 0))
  return np.asarray(legend)


def main():
  palette = masks.pascal_palette()
  with tempfile.TemporaryDirectory() as tmp:
    fake_voc.write_tree(tmp, num_train=4, num_val=1, num_unlabelled=0,
                        height=(150, 150), width=(200, 200), seed=3)
    ds = tfds.load("voc_segmentation", split="train", data_dir=f"{tmp}/tfds",
                   download_and_prepare_kwargs={"download_config": tfds.download.DownloadConfig(
                       manual_dir=tmp)})
    examples = sorted(tfds.as_numpy(ds), key=lambda e: e["image_id"])
  rows = []
  for example in examples:
    class_ids, instance_ids = example["class_mask"][..., 0], example["object_mask"][..., 0]
    names = ", ".join(voc_pairs.CLASS_NAMES[c] for c in np.unique(class_ids) if 0 < c < 255)
    tiles = [example["image"], _overlay(example["image"], class_ids), palette[class_ids],
             palette[instance_ids]]
    row = np.concatenate([np.pad(t, ((LABEL_HEIGHT, 4), (4, 4), (0, 0)), constant_values=255)
                          for t in tiles], axis=1)
    row = PIL.Image.fromarray(row)
    PIL.ImageDraw.Draw(row).text((6, 1), f"{example['image_id'].decode()}: {names}", fill=(0, 0, 0))
    rows.append(np.asarray(row))
  header = PIL.Image.new("RGB", (rows[0].shape[1], LABEL_HEIGHT + 4), (255, 255, 255))
  for column, title in enumerate(COLUMNS):
    PIL.ImageDraw.Draw(header).text((6 + column * rows[0].shape[1] // 4, 3), title, fill=(0, 0, 0))
  figure = np.concatenate([np.asarray(header), *rows, _legend(rows[0].shape[1])], axis=0)
  PIL.Image.fromarray(figure).save(OUT, optimize=True)
  print(OUT)


if __name__ == "__main__":
  main()
