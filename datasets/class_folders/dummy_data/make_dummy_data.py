"""Writes dummy_data/pets/: a small class-per-folder tree (run from anywhere).

    python datasets/class_folders/dummy_data/make_dummy_data.py

Three classes of small photo-like JPEGs (one PNG), the tree the `example` config builds.
Deterministic: re-running rewrites the same images.
"""

import pathlib

from imagesets_testing import sample_images

HERE = pathlib.Path(__file__).resolve().parent
CLASSES = ["cat", "dog", "parrot"]
PER_CLASS = 8


def main():
  for index, name in enumerate(CLASSES):
    folder = HERE / "pets" / name
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(PER_CLASS):
      seed = index * 100 + number
      (folder / f"{seed:04d}.jpg").write_bytes(
          sample_images.jpeg(24 + number * 4, 32 + index * 4, seed=seed, quality=80))
  (HERE / "pets" / "parrot" / "drawing.png").write_bytes(
      sample_images.encode(sample_images.photo(20, 28, 7), "PNG"))


if __name__ == "__main__":
  main()
