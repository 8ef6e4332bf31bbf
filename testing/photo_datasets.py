"""Small folder datasets of real-photo crops, built as `imagesets build` builds them, for
tests and benchmarks of reading several datasets at once (mixing)."""

import pathlib

from imagesets_testing import photo_crops
from imagesets_testing import sample_images
from imagesets_testing.trees import write_tree


def build(data_dir, name: str, classes, count: int, *, seed: int = 0,
          file_format: str = "tfrecord", size=(160, 120), num_shards: int | None = None,
          version: str = "1.0.0") -> str:
  """Builds NAME:VERSION into `data_dir`: `count` JPEG crops of real scenes, photo i in
  class classes[i % len(classes)], every photo in "train"; returns "name:version"."""
  from imagesets.building import class_folders_builder
  from imagesets.class_folders import named_build
  data_dir = pathlib.Path(data_dir)
  files = {f"{classes[i % len(classes)]}/{name}_{i:05d}.jpg": data
           for i, (_, data) in enumerate(photo_crops.jpegs(count, seed=seed, size=size,
                                                           scenes=15))}
  root = write_tree(data_dir.parent / f"{name}-{version}-photos", files)
  options = class_folders_builder.ClassFoldersConfig(
      name=name, split_proportions={"train": 1.0}, leakage="off",
      **({"min_shards": num_shards} if num_shards else {}))
  named_build.build(root, name, version=version, data_dir=str(data_dir), options=options,
                    file_format=file_format, progress=None)
  return f"{name}:{version}"


def pets(base, count: int = 12) -> tuple[pathlib.Path, str]:
  """(data dir, source folder) of pets:1.0.0 in `base`: `count` small JPEGs, cat and dog by
  turns, built with the default options as `imagesets build` builds them."""
  from imagesets.building import class_folders_builder
  from imagesets.class_folders import named_build
  base = pathlib.Path(base)
  source = write_tree(base / "photos", {f"{'cat' if i % 2 else 'dog'}/{i}.jpg":
                                        sample_images.jpeg(40, 50, seed=i) for i in range(count)})
  named_build.build(source, "pets", version="1.0.0", data_dir=str(base / "tfds"),
                    options=class_folders_builder.ClassFoldersConfig(name="pets"))
  return base / "tfds", source
