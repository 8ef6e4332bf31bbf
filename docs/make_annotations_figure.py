"""Makes docs/annotations_examples.png: the boxes of a build from a COCO file, read back
from the stored records (not from the annotation file) and drawn with their class names.

    python docs/make_annotations_figure.py

The build is the `annotated` builder's example: crops of real photos
(datasets/annotated/dummy_data) with the boxes its COCO export gives, stored as TFDS's
normalised ymin, xmin, ymax, xmax.
"""

import pathlib
import tempfile

import numpy as np
import PIL.Image
import PIL.ImageDraw

import imagesets  # noqa: F401  (registers `annotated`)
from imagesets.annotated import annotated_dataset_builder as annotated
import tensorflow_datasets as tfds

OUT = pathlib.Path(__file__).resolve().parent / "annotations_examples.png"
SCALE, COLUMNS = 2, 4
COLOURS = ["#e6194b", "#3cb44b", "#ffe119", "#4363d8", "#f58231"]


def drawn(example: dict, names: list[str]) -> PIL.Image.Image:
  """The stored image, enlarged, with each stored box and its class name."""
  image = PIL.Image.fromarray(example["image"])
  image = image.resize((image.width * SCALE, image.height * SCALE), PIL.Image.NEAREST)
  draw = PIL.ImageDraw.Draw(image)
  for (ymin, xmin, ymax, xmax), label in zip(example["objects"]["bbox"],
                                             example["objects"]["label"]):
    box = [xmin * image.width, ymin * image.height, xmax * image.width, ymax * image.height]
    draw.rectangle(box, outline=COLOURS[label % len(COLOURS)], width=2)
    draw.text((box[0] + 3, box[1] + 2), names[label], fill=COLOURS[label % len(COLOURS)])
  return image


def main():
  with tempfile.TemporaryDirectory() as tmp:
    builder = annotated.Builder(config="example", data_dir=tmp)
    builder.download_and_prepare()
    names = builder.info.features["objects"]["label"].names
    examples = [example for split in builder.info.splits
                for example in tfds.as_numpy(builder.as_dataset(split=split))]
    examples.sort(key=lambda e: e["file_name"])
    pictures = [drawn(example, names) for example in examples]
  cell = max(p.width for p in pictures), max(p.height for p in pictures)
  rows = -(-len(pictures) // COLUMNS)
  sheet = PIL.Image.new("RGB", (cell[0] * COLUMNS, cell[1] * rows), "white")
  for i, picture in enumerate(pictures):
    sheet.paste(picture, ((i % COLUMNS) * cell[0], (i // COLUMNS) * cell[1]))
  sheet.save(OUT, optimize=True)
  print(f"wrote {OUT} ({np.prod(sheet.size)} pixels, {len(pictures)} images)")


if __name__ == "__main__":
  main()
