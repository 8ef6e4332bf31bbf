"""The main job: build synthetic_images and read it back as a training pipeline.

    python -m imagesets.cli.demo [--config default] [--data_dir DIR] [--batch_size 64] [-v]

Builds the dataset (a no-op when that version is already prepared), reads one epoch
through the training pipeline (`input_pipeline.classification_train`: seeded shuffle,
random-resized crop fused into decoding, flip, batches, prefetch) and prints what came
out: shapes, dtypes, the label histogram and throughput.
"""

import collections
import pathlib
import time

import numpy as np

import imagesets  # noqa: F401  (registers the builders with TFDS)
from imagesets import constants
from imagesets import startup
from imagesets.cli import main as cli_main  # both flag spellings (--data-dir / --data_dir)
from imagesets.analysis import duplicates
from imagesets.analysis import image_quality
from imagesets.reports import report_page


def main(argv=None) -> None:
  parser = cli_main.Parser(prog="imagesets-demo", description=__doc__.splitlines()[0])
  parser.add_argument("--config", default="default", help="synthetic_images config")
  parser.add_argument("--data_dir", default=None, help="TFDS data dir (default: TFDS's)")
  parser.add_argument("--batch_size", type=int, default=64)
  parser.add_argument("--image_size", type=int, default=None,
                      help="output size (default: the config's size, 224 if variable)")
  parser.add_argument("-v", "--verbose", action="store_true",
                      help="show TensorFlow's start-up and device logs")
  args = parser.parse_args(argv)
  startup.load_tensorflow()  # quietly, before anything below imports it
  startup.probe_devices()
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  from imagesets.reading import input_pipeline  # pylint: disable=import-outside-toplevel

  name = f"synthetic_images/{args.config}"
  builder = tfds.builder(name, data_dir=args.data_dir)
  started = time.perf_counter()
  builder.download_and_prepare()
  # The build's closing summaries (also when this version was built before), and its page.
  found = duplicates.stored_summary(
      builder.data_dir, {split: s.num_examples for split, s in builder.info.splits.items()})
  findings = image_quality.read_stored(builder.data_dir)
  page = pathlib.Path(builder.data_dir) / report_page.PAGE_FILE
  print(f"prepared {name} {builder.version} in {builder.data_dir} "
        f"({time.perf_counter() - started:.1f} s)" + (f"; {found}" if found else "")
        + (f"; {image_quality.summary(findings)}" if findings is not None else "")
        + (f"; its page: {page}" if page.exists() else ""))

  image_size = (args.image_size or builder.info.features["image"].shape[0]
                or constants.IMAGE_SIZE)
  # One full epoch (every image once, last batch partial) so the histogram is complete.
  ds = input_pipeline.classification_train(
      builder, batch_size=args.batch_size, image_size=image_size, seed=0, num_epochs=1,
      drop_remainder=False)

  labels = collections.Counter()
  num_images = 0
  first = None
  started = time.perf_counter()
  for batch in ds:
    images, batch_labels = batch["image"], batch["label"]
    first = first or (images, batch_labels)
    labels.update(batch_labels.numpy().tolist())
    num_images += int(images.shape[0])
  elapsed = time.perf_counter() - started

  images, batch_labels = first
  print(f"batch: image {images.shape} {images.dtype.name}, "
        f"label {batch_labels.shape} {batch_labels.dtype.name}")
  print(f"pixel range [{int(tf.reduce_min(images))}, {int(tf.reduce_max(images))}], "
        f"mean {float(tf.reduce_mean(tf.cast(images, tf.float32))):.1f}")
  print(f"label histogram (train, {num_images} images): "
        + " ".join(f"{k}:{labels[k]}" for k in sorted(labels)))
  print(f"throughput: {num_images / elapsed:,.0f} images/s "
        f"({num_images} images in {elapsed:.2f} s, batch {args.batch_size})")
  expected = builder.info.splits["train"].num_examples
  if num_images != expected:
    raise SystemExit(f"read {num_images} train images, dataset_info says {expected}")


if __name__ == "__main__":
  main()
