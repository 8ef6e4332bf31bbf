"""Oxford-17 look-alikes made from scratch: `17flowers.tgz` and `datasplits.mat` with the
real layout, for tests and docs (the real files cannot be downloaded here).

The archive holds jpg/image_0001.jpg ... jpg/image_1360.jpg (small photo-like JPEGs,
17 classes of 80 by index) and jpg/files.txt, as the real one; datasplits.mat holds
trn1..3, val1..3, tst1..3 as 1 x N double row vectors of 1-based image indices, 40 / 20 /
20 images of every class per split, as the paper describes.

    python -m imagesets_testing.fake_oxford17 OUT_DIR
"""

import argparse
import gzip
import io
import pathlib
import tarfile

import numpy as np
import scipy.io

from imagesets.oxford17 import oxford17_source as oxford17
from imagesets_testing import sample_images

PER_SPLIT = {"trn": 40, "val": 20, "tst": 20}  # images of each class


def image_bytes(index: int, size: int = 24) -> bytes:
  """The JPEG of image `index`: a different small photo for every index."""
  return sample_images.encode(sample_images.photo(size, size + index % 7, seed=index), "JPEG",
                              quality=85)


def write_archive(path, *, size: int = 24, images: dict[int, bytes] | None = None) -> pathlib.Path:
  """Writes a 17flowers.tgz look-alike; `images` replaces the bytes of some indices."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  images = images or {}
  with gzip.GzipFile(path, "wb", mtime=0) as packed, \
      tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as tar:
    def add(name, data):
      info = tarfile.TarInfo(name)
      info.size, info.mtime, info.mode = len(data), 0, 0o644
      tar.addfile(info, io.BytesIO(data))

    names = [oxford17.relative_path(i) for i in range(1, oxford17.NUM_IMAGES + 1)]
    add(f"{oxford17.IMAGE_DIR}/files.txt",
        "".join(f"{name.split('/')[-1]}\n" for name in names).encode())
    for index, name in enumerate(names, start=1):
      add(name, images.get(index) or image_bytes(index, size))
  return path


def splits(seed: int = 0) -> dict[str, np.ndarray]:
  """{"trn1": indices, ...}: per class, a seeded shuffle cut 40 / 20 / 20."""
  out = {}
  for n in (1, 2, 3):
    rng = np.random.default_rng([seed, n])
    parts = {key: [] for key in PER_SPLIT}
    for label in range(len(oxford17.CLASS_NAMES)):
      indices = rng.permutation(oxford17.PER_CLASS) + 1 + label * oxford17.PER_CLASS
      start = 0
      for key, count in PER_SPLIT.items():
        parts[key] += indices[start:start + count].tolist()
        start += count
    out.update({f"{key}{n}": np.array([sorted(v)], np.float64) for key, v in parts.items()})
  return out


def write_splits(path, split_lists: dict[str, np.ndarray] | None = None) -> pathlib.Path:
  """Writes a datasplits.mat look-alike (MATLAB 5 format, as the real one)."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  scipy.io.savemat(path, split_lists if split_lists is not None else splits())
  return path


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("out_dir")
  args = parser.parse_args()
  out = pathlib.Path(args.out_dir)
  print(write_archive(out / oxford17.ARCHIVE))
  print(write_splits(out / oxford17.SPLITS_FILE))


if __name__ == "__main__":
  main()
