"""How to store keras' output in image_dataset_from_directory's cache: read cost, size and
pixel error of each encoding, and the cost of TFDS's ArrayRecord compression.

    python benchmarks/keras_cache_encoding.py [--files 300]

`--files` photo-like 500x375 JPEGs (imagesets_testing.sample_images, quality 90), turned
into keras' output (tf.io.decode_image + bilinear tf.image.resize to 224x224, float32),
rounded to uint8 and stored as: raw bytes, PNG (zlib level 6 and 1), JPEG quality 95
(4:2:0 and 4:4:4) and 90. For each: KB an image, CPU ms an image to get float32 pixels back
(tf.data map in parallel, 5 passes, after a warm-up pass), and |difference| to keras'
float32 output (mean, 99th percentile, max). Then writing and reading the raw pixels
through ArrayRecord with TFDS's options ('group_size:1': array_record's default
compression) and uncompressed.
"""

import argparse
import os
import resource
import tempfile

import numpy as np
import tensorflow as tf
from array_record.python import array_record_module

from imagesets_testing import sample_images

SIZE = (224, 224)


def _cpu() -> float:
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return usage.ru_utime + usage.ru_stime


def _raw(data):
  return tf.reshape(tf.io.decode_raw(data, tf.uint8), (*SIZE, 3))


ENCODINGS = {  # name: (encode uint8 tensor, decode bytes)
    "raw uint8": (lambda u: u.numpy().tobytes(), _raw),
    "PNG": (lambda u: tf.io.encode_png(u).numpy(), lambda d: tf.io.decode_png(d, 3)),
    "PNG level 1": (lambda u: tf.io.encode_png(u, compression=1).numpy(),
                    lambda d: tf.io.decode_png(d, 3)),
    "JPEG 95": (lambda u: tf.io.encode_jpeg(u, quality=95).numpy(),
                lambda d: tf.io.decode_jpeg(d, 3)),
    "JPEG 95 4:4:4": (lambda u: tf.io.encode_jpeg(u, quality=95,
                                                  chroma_downsampling=False).numpy(),
                      lambda d: tf.io.decode_jpeg(d, 3)),
    "JPEG 90": (lambda u: tf.io.encode_jpeg(u, quality=90).numpy(),
                lambda d: tf.io.decode_jpeg(d, 3)),
}


def _read_cost(datas, decode) -> float:
  """CPU ms an image of a parallel tf.data map from stored bytes to float32 pixels."""
  fn = tf.autograph.experimental.do_not_convert(lambda d: tf.cast(decode(d), tf.float32))
  ds = tf.data.Dataset.from_tensor_slices(datas * 5).map(
      fn, num_parallel_calls=tf.data.AUTOTUNE).batch(64)
  for _ in ds:
    pass
  before = _cpu()
  for _ in ds:
    pass
  return (_cpu() - before) / (5 * len(datas)) * 1000


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--files", type=int, default=300)
  args = parser.parse_args()
  sources = [sample_images.jpeg(375, 500, seed=i) for i in range(args.files)]
  keras = [tf.image.resize(tf.io.decode_image(s, channels=3, expand_animations=False), SIZE)
           for s in sources]
  rounded = [tf.cast(tf.round(tf.clip_by_value(k, 0, 255)), tf.uint8) for k in keras]
  reference = np.stack([k.numpy() for k in keras])
  print(f"{args.files} photos of 500x375, {np.mean([len(s) for s in sources]) / 1e3:.1f} KB "
        f"each; keras' decode + resize: {_read_cost(sources, lambda d: tf.image.resize(tf.io.decode_image(d, channels=3, expand_animations=False), SIZE)):.3f} CPU ms an image")  # noqa: E501
  print("| encoding | KB an image | CPU ms to read back | mean | p99 | max |")
  print("|---|---:|---:|---:|---:|---:|")
  for name, (encode, decode) in ENCODINGS.items():
    datas = [encode(u) for u in rounded]
    back = np.stack([decode(d).numpy() for d in datas]).astype(np.float32)
    difference = np.abs(back - reference)
    print(f"| {name} | {np.mean([len(d) for d in datas]) / 1e3:.1f} | "
          f"{_read_cost(datas, decode):.3f} | {difference.mean():.2f} | "
          f"{np.percentile(difference, 99):.2f} | {difference.max():.2f} |")
  raws = [u.numpy().tobytes() for u in rounded]
  with tempfile.TemporaryDirectory() as folder:
    path = os.path.join(folder, "x.array_record")
    for options in ("group_size:1", "group_size:1,uncompressed"):
      before = _cpu()
      writer = array_record_module.ArrayRecordWriter(path, options)
      for record in raws:
        writer.write(record)
      writer.close()
      written = (_cpu() - before) / len(raws) * 1000
      before = _cpu()
      array_record_module.ArrayRecordReader(path).read_all()
      read = (_cpu() - before) / len(raws) * 1000
      print(f"ArrayRecord '{options}': write {written:.3f} ms, read {read:.3f} ms, "
            f"{os.path.getsize(path) / len(raws) / 1e3:.1f} KB an image")


if __name__ == "__main__":
  main()
