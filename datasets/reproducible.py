"""Byte-identical shards: serialize every tf.train.Example deterministically.

TFDS calls `Example.SerializeToString()`. Under protobuf's upb backend the order of the
feature map is randomised per process, so two builds of the same data differ byte-wise
(and their checksums, and any "is this publish identical?" check). With
`deterministic=True` map entries are written in key order. Importing `imagesets`
installs this once; it changes bytes, never content, so it is safe for every builder.
"""

from tensorflow_datasets.core import example_serializer


def _serialize_example_deterministically(self, example):
  return self.get_tf_example(example).SerializeToString(deterministic=True)


def install() -> None:
  """Makes TFDS's ExampleSerializer write map fields in a fixed order (idempotent)."""
  example_serializer.ExampleSerializer.serialize_example = (
      _serialize_example_deterministically
  )
