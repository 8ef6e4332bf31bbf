"""voc_segmentation build speed and size against the seed converter, on one generated tree.

    python benchmarks/voc_build.py [--pairs 300] [--repeats 3] [--out benchmarks/out/voc]

Writes a VOC-shaped tree (VOC-sized JPEGs and palette masks, see fake_voc), then times
  * ours: `voc_segmentation` download_and_prepare with --manual_dir (validation of every
    pair, original JPEG bytes, class + object masks as 1-channel PNG, 4+ shards), which
    runs the per-pair work on one process per core; and that per-pair work alone on one
    process (`voc_pairs.process`), for a like-for-like comparison with the seed;
  * seed: the 2016 converter: decode the JPEG and the class mask with PIL,
    `tostring()` both arrays, write one tf.train.Example per pair to one TFRecord.
Prints pairs/s (best of --repeats), output bytes and the size ratio, and checks that
both outputs hold the same pixels for the first pairs.
"""

import argparse
import multiprocessing
import pathlib
import shutil
import time

import numpy as np
import PIL.Image
import tensorflow as tf
import tensorflow_datasets as tfds

import imagesets  # noqa: F401
from imagesets_testing import fake_voc
from imagesets.voc_segmentation import voc_pairs
from imagesets.voc_segmentation import voc_segmentation_dataset_builder as voc


def seed_convert(folder: pathlib.Path, ids, out_path: pathlib.Path) -> None:
  """The seed converter, as written in the blog post (tostring() is tobytes() in NumPy 2)."""
  def _bytes(value):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

  def _int64(value):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

  with tf.io.TFRecordWriter(str(out_path)) as writer:
    for image_id in ids:
      image = np.array(PIL.Image.open(folder / voc_pairs.JPEG_DIR / f"{image_id}.jpg"))
      # PIL reads the palette indices, "not the actual rgb values".
      mask = np.array(PIL.Image.open(folder / voc_pairs.CLASS_DIR / f"{image_id}.png"))
      height, width = image.shape[:2]
      example = tf.train.Example(features=tf.train.Features(feature={
          "height": _int64(height), "width": _int64(width),
          "image_raw": _bytes(image.tobytes()), "mask_raw": _bytes(mask.tobytes())}))
      writer.write(example.SerializeToString())


def ours_build(manual_dir: pathlib.Path, data_dir: pathlib.Path) -> tfds.core.DatasetBuilder:
  builder = voc.Builder(data_dir=data_dir)
  builder.download_and_prepare(
      download_config=tfds.download.DownloadConfig(manual_dir=str(manual_dir)))
  return builder


def best_time(run, repeats):
  times = []
  for _ in range(repeats):
    started = time.perf_counter()
    result = run()
    times.append(time.perf_counter() - started)
  return min(times), result


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--pairs", type=int, default=300)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--out", default="benchmarks/out/voc")
  args = parser.parse_args()
  out = pathlib.Path(args.out)
  shutil.rmtree(out, ignore_errors=True)
  num_val = args.pairs // 2
  folder = fake_voc.write_tree(out / "src", num_train=args.pairs - num_val, num_val=num_val,
                               num_unlabelled=0, height=(333, 500), width=(333, 500))
  ids = [image_id for split_ids in voc_pairs.read_split_lists(folder)[0].values()
         for image_id in split_ids]
  jpeg_bytes = sum((folder / voc_pairs.JPEG_DIR / f"{i}.jpg").stat().st_size for i in ids)
  print(f"{len(ids)} pairs, images 333-500 px a side, mean JPEG {jpeg_bytes / len(ids):,.0f} bytes")

  def ours():
    shutil.rmtree(out / "tfds", ignore_errors=True)
    return ours_build(out / "src", out / "tfds")

  def seed():
    seed_convert(folder, ids, out / "seed.tfrecord")

  def ours_one_process():  # the per-pair work alone, without TFDS or the process pool
    for image_id in ids:
      voc_pairs.process((str(folder), image_id))

  ours_time, builder = best_time(ours, args.repeats)
  ours_one_time, _ = best_time(ours_one_process, args.repeats)
  seed_time, _ = best_time(seed, args.repeats)
  ours_size = sum(p.stat().st_size for p in pathlib.Path(builder.data_path).glob("*.tfrecord-*"))
  seed_size = (out / "seed.tfrecord").stat().st_size

  # Same content in both outputs (first 20 pairs): masks exactly; images up to the small
  # differences between PIL's and TF's JPEG decoders (chroma upsampling, rounding).
  ours_examples = list(tfds.as_numpy(builder.as_dataset(split="train+validation")))
  worst, mean = 0, []
  for record in list(tf.data.TFRecordDataset(str(out / "seed.tfrecord")).take(20)):
    feature = tf.train.Example.FromString(record.numpy()).features.feature
    height, width = feature["height"].int64_list.value[0], feature["width"].int64_list.value[0]
    mask = np.frombuffer(feature["mask_raw"].bytes_list.value[0], np.uint8).reshape(height, width)
    image = np.frombuffer(feature["image_raw"].bytes_list.value[0], np.uint8).reshape(height, width, 3)
    (match,) = [e for e in ours_examples if np.array_equal(e["class_mask"][..., 0], mask)]
    difference = np.abs(match["image"].astype(int) - image)
    worst, mean = max(worst, int(difference.max())), mean + [difference.mean()]
  assert np.mean(mean) < 2, f"images differ by {np.mean(mean):.2f} on average"

  workers = multiprocessing.cpu_count()
  print(f"{'converter':40s} {'pairs/s':>8s} {'output bytes':>14s} {'bytes/pair':>11s}")
  print(f"{f'ours, tfds build, {workers} processes':40s} {len(ids) / ours_time:8.1f} "
        f"{ours_size:14,d} {ours_size / len(ids):11,.0f}")
  print(f"{'ours, per-pair work only, 1 process':40s} {len(ids) / ours_one_time:8.1f}")
  print(f"{'seed, 1 process (decode + tostring)':40s} {len(ids) / seed_time:8.1f} "
        f"{seed_size:14,d} {seed_size / len(ids):11,.0f}")
  print("(ours stores the JPEG + class mask + object mask, the seed raw image + class mask)")
  print(f"images, TF decode of ours vs PIL decode in the seed: mean |difference| "
        f"{np.mean(mean):.3f}, max {worst} (decoder differences; masks identical)")
  print(f"speed ours/seed: build {seed_time / ours_time:.2f}x, per-pair work on 1 process "
        f"{seed_time / ours_one_time:.2f}x; size ours/seed {ours_size / seed_size:.3f} "
        f"(best of {args.repeats})")


if __name__ == "__main__":
  main()
