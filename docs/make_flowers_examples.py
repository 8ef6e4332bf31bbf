"""Makes docs/flowers_examples.png: tfds.visualization.show_examples on a flowers build.

    pip install -e '.[docs]'   # matplotlib
    python docs/make_flowers_examples.py

The real flower_photos archive cannot be downloaded where this project is developed, so the
picture shows a build of photo-like images (imagesets_testing.sample_images) in the five
flower_photos class folders, including a sideways phone photo (EXIF orientation 6) and a
grayscale JPEG that the builder stored upright and as RGB.
"""

import pathlib
import tempfile

import matplotlib
matplotlib.use("Agg")

import imagesets  # noqa: E402,F401
from imagesets_testing import sample_images  # noqa: E402
from imagesets.flowers import flowers_dataset_builder as flowers  # noqa: E402
from imagesets.class_folders import class_folders_dataset_builder as class_folders  # noqa: E402
import tensorflow_datasets as tfds  # noqa: E402

OUT = pathlib.Path(__file__).resolve().parent / "flowers_examples.png"


def main():
  with tempfile.TemporaryDirectory() as tmp:
    root = pathlib.Path(tmp) / "photos"
    for c, name in enumerate(flowers.FLOWER_CLASSES):
      (root / name).mkdir(parents=True)
      for i in range(3):
        (root / name / f"{i}.jpg").write_bytes(sample_images.jpeg(150, 200, seed=10 * c + i))
    upright = sample_images.photo(200, 150, seed=7)
    (root / "tulips" / "phone_sideways.JPG").write_bytes(sample_images.sideways_jpeg(upright))
    (root / "daisy" / "grey.jpeg").write_bytes(
        sample_images.encode(sample_images.photo(150, 200, seed=8)[..., 1], "JPEG"))
    builder = class_folders.Builder(
        config=class_folders.ClassFoldersConfig(name="examples", root=str(root),
                                     split_proportions={"train": 1.0}),
        data_dir=pathlib.Path(tmp) / "tfds")
    builder.download_and_prepare()
    ds = builder.as_dataset(split="train", shuffle_files=False)
    figure = tfds.visualization.show_examples(ds, builder.info, rows=3, cols=6,
                                              plot_scale=2.4)
    figure.savefig(OUT, dpi=80, bbox_inches="tight")
    print(f"wrote {OUT}; converted: {builder.info.metadata['converted_files']}")


if __name__ == "__main__":
  main()
