"""CPU per record of `prepared_records.RecordMaker.make` against protobuf's own serializer.

    python benchmarks/record_making.py [--records 2000] [--rounds 3]

The keras cache's records: 224x224x3 uint8 pixels (150 KB, stored as raw bytes), a label and a
file name. `make` (scalars of their feature's own type set in the proto in place) against
TFDS's own route (numpy conversion of every feature, a tf.train.Example,
`SerializeToString(deterministic=True)`); each round in a fresh process. Prints CPU ms per
record, one line per round.
"""

import argparse
import subprocess
import sys
import time


def one_round(records: int) -> None:
  import numpy as np
  import tensorflow_datasets as tfds
  from tensorflow_datasets.core import example_serializer
  from imagesets.building import prepared_records

  features = tfds.features.FeaturesDict({
      "image": tfds.features.Tensor(shape=(224, 224, 3), dtype=np.uint8,
                                    encoding=tfds.features.Encoding.BYTES),
      "label": tfds.features.ClassLabel(names=list("abcde")),
      "file_name": tfds.features.Text()})
  pixels = np.random.default_rng(0).integers(0, 256, (64, 224, 224, 3), dtype=np.uint8)
  examples = [{"image": pixels[i % 64], "label": i % 5, "file_name": f"daisy/{i:05d}.jpg"}
              for i in range(records)]
  maker = prepared_records.RecordMaker(features)
  serializer = example_serializer.ExampleSerializer(features.get_serialized_info())
  assert maker.make(examples[0]) == serializer.get_tf_example(
      features.encode_example(examples[0])).SerializeToString(deterministic=True)
  started = time.process_time()
  for example in examples:
    maker.make(example)
  direct = time.process_time() - started
  started = time.process_time()
  for example in examples:
    serializer.get_tf_example(features.encode_example(example)).SerializeToString(
        deterministic=True)
  proto = time.process_time() - started
  print(f"CPU ms a record: RecordMaker.make {direct / records * 1000:.3f}, "
        f"through protobuf {proto / records * 1000:.3f}")


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--records", type=int, default=2000)
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    one_round(args.records)
    return
  for _ in range(args.rounds):
    subprocess.run([sys.executable, __file__, "--child", "--records", str(args.records)],
                   check=True)


if __name__ == "__main__":
  main()
