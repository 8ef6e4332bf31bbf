"""Where a class-folder build's milliseconds per image go: each stage timed alone, in one process.

    python benchmarks/build_stages.py [--images 600] [--rounds 5] [--work /tmp/flowers_bench]

Uses the photo tree of benchmarks/flowers_build.py (500x375 photo-like JPEGs, made once).
Every stage runs over all images, `--rounds` interleaved rounds, median CPU time per image
(process CPU time: one thread here, so it is also the wall time of that stage). The stages
are what a build does per image, in the process where it does it:

* worker: read the file, `image_checks.check` (header, marker walk, libjpeg on the
  headers and the scan's first bytes), the 1/8-scale decode it ran before on every JPEG,
  `process_file` (both plus the feature dict), pickling the result to send it;
* writer (TFDS's single thread): unpickling, `features.encode_example`, TFDS's
  dict-to-Example + serialization, our canonical re-serialization, md5 of the key,
  the shuffle (add + sorted read-back, spilling past 16 MB as our builds do), writing
  the TFRecord shard;
* the same record made in one step, as the workers now do (`prepared_records.RecordMaker`);
* the converter's per-image work: a full `tf.io.decode_jpeg` (what it calls to learn
  the size), building and serializing its tf.train.Example.
"""

import argparse
import os
import pathlib
import pickle
import statistics
import tempfile
import time

import flowers_build


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--images", type=int, default=600)
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--work", default="/tmp/flowers_bench")
  args = parser.parse_args()
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  import tensorflow as tf
  from tensorflow_datasets.core import example_serializer, hashing, file_adapters
  from imagesets.building import (class_folders_builder, class_folders_examples,
                                  class_folders_tree, deterministic_writer, image_checks,
                                  prepared_records)

  root = pathlib.Path(args.work) / f"photos_{args.images}"
  flowers_build.make_tree(root, args.images)
  paths = class_folders_tree.scan(str(root)).images
  features = class_folders_builder.features(flowers_build.CLASSES)
  serializer = example_serializer.ExampleSerializer(features.get_serialized_info())
  maker = prepared_records.RecordMaker(features)
  datas = [class_folders_tree.read(str(root), p) for p in paths]
  examples = [class_folders_examples.process_file(class_folders_examples.work_item(str(root), p))[0] for p in paths]
  pickled = [pickle.dumps(e) for e in examples]
  encoded = [features.encode_example(e) for e in examples]
  records = [serializer.serialize_example(e) for e in encoded]
  hasher = hashing.Hasher("train")
  tmp = tempfile.mkdtemp()

  def shuffle_all():
    # (our bounded sort of records a builder yields to TFDS itself: prepared_records)
    pending = prepared_records._Sorted(tmp, prepared_records.MEMORY_LIMIT)  # pylint: disable=protected-access
    for path, record in zip(paths, records):
      pending.add(hasher.hash_key(path), record)
    for _ in pending:
      pass
    pending.discard()

  def write_all():
    adapter = file_adapters.ADAPTER_FOR_FORMAT[file_adapters.FileFormat.TFRECORD]
    adapter.write_examples(os.path.join(tmp, "shard.tfrecord"), enumerate(records))

  def converter_all():
    for data in datas:
      image = tf.io.decode_jpeg(data, channels=3)
      tf.train.Example(features=tf.train.Features(feature={
          "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
          "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"jpg"])),
          "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[1])),
          "image/height": tf.train.Feature(int64_list=tf.train.Int64List(value=[image.shape[0]])),
          "image/width": tf.train.Feature(int64_list=tf.train.Int64List(value=[image.shape[1]])),
      })).SerializeToString()

  stages = {
      "worker: read file": lambda: [class_folders_tree.read(str(root), p) for p in paths],
      "worker: image_checks.check": lambda: [image_checks.check(d) for d in datas],
      "worker: the 1/8-scale decode (what check ran on every JPEG before)": lambda: [
          image_checks._decode_jpeg_at_one_eighth(d) for d in datas],  # pylint: disable=protected-access
      "worker: process_file (read + check + dict)": lambda: [
          class_folders_examples.process_file(class_folders_examples.work_item(str(root), p)) for p in paths],
      "worker: pickle the example dict": lambda: [pickle.dumps(e) for e in examples],
      "writer: unpickle the example dict": lambda: [pickle.loads(b) for b in pickled],
      "writer: features.encode_example": lambda: [features.encode_example(e) for e in examples],
      "writer: TFDS dict-to-Example + serialize": lambda: [
          serializer.serialize_example(e) for e in encoded],
      "writer: canonical re-serialization": lambda: [
          deterministic_writer.canonical(r) for r in records],
      "writer: md5 of the key": lambda: [hasher.hash_key(p) for p in paths],
      "writer: shuffle (add, spill, sorted read-back)": shuffle_all,
      "writer: write TFRecord shard": write_all,
      "worker (new): RecordMaker.make (encode + deterministic Example)": lambda: [
          maker.make(e) for e in examples],
      "converter: tf.io.decode_jpeg (full)": lambda: [tf.io.decode_jpeg(d, channels=3)
                                                     for d in datas],
      "converter: all per-image work but the write": converter_all,
  }
  times = {name: [] for name in stages}
  for _ in range(args.rounds):
    for name, stage in stages.items():
      started = time.process_time()
      stage()
      times[name].append((time.process_time() - started) / len(paths) * 1000)
  print(f"{len(paths)} photos, {sum(map(len, datas)) / len(datas) / 1024:.1f} KiB each; "
        f"median of {args.rounds} rounds, CPU ms per image; load {os.getloadavg()}")
  decode = statistics.median(times["converter: tf.io.decode_jpeg (full)"])
  print("| stage | ms / image | / full decode |")
  print("|---|---:|---:|")
  for name, values in times.items():
    median = statistics.median(values)
    print(f"| {name} | {median:.3f} | {median / decode:.2f} |")


if __name__ == "__main__":
  main()
