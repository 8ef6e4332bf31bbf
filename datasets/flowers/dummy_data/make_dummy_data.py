"""Writes dummy_data/flower_photos.tgz: a small flower_photos look-alike (run from anywhere).

    python datasets/flowers/dummy_data/make_dummy_data.py

Same layout as the real archive (flower_photos/<class>/<name>.jpg plus LICENSE.txt), with
7 small photo-like JPEGs per class. Deterministic: re-running rewrites the same images.
"""

import gzip
import io
import pathlib
import tarfile

from imagesets_testing import sample_images
from imagesets.flowers import flowers_dataset_builder as flowers

PER_CLASS = 7
HERE = pathlib.Path(__file__).resolve().parent


def main():
  # mtime=0 in the gzip header too, so the archive bytes are the same on every run.
  with gzip.GzipFile(HERE / "flower_photos.tgz", "wb", mtime=0) as packed, \
      tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as tar:
    def add(name, data):
      info = tarfile.TarInfo(f"flower_photos/{name}")
      info.size, info.mtime, info.mode = len(data), 0, 0o644
      tar.addfile(info, io.BytesIO(data))

    add("LICENSE.txt", b"All images in this archive are made by make_dummy_data.py.\n")
    for index, name in enumerate(flowers.FLOWER_CLASSES):
      for number in range(PER_CLASS):
        seed = index * 100 + number
        add(f"{name}/{seed:04d}_dummy.jpg",
            sample_images.jpeg(24 + number * 4, 32 + index * 4, seed=seed, quality=80))


if __name__ == "__main__":
  main()
