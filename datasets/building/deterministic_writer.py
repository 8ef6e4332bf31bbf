"""Byte-identical shards: our builders write each tf.train.Example in protobuf's canonical form.

TFDS serializes examples with `SerializeToString()`. Under protobuf's upb backend the
order of the feature map is randomised per process, so two builds of the same data
differ byte-wise (and so do their checksums, and any "is this publish identical?" check).
`SerializeToString(deterministic=True)` writes map entries in a fixed order.

TFDS's hook for this is `DatasetBuilder._example_writer()` ("inject a custom
ExampleWriter here"): `builder_base.ImageSetBuilder` returns a `DeterministicExampleWriter`,
which rewrites each record in deterministic form just before it goes into its shard,
on Beam workers and for builds that yield examples to TFDS themselves (synthetic_images).
Local builds through `generation` get records already made deterministically by the
workers (`prepared_records`), which TFDS's writer never sees. Only our builders use it; TFDS's serializer is never
touched, so every other dataset built in the same process is written by TFDS's own code.
Rewriting changes the order of map entries only, never their content or the record's
length, so TFDS's shard sizes and offsets stay valid.
"""

from typing import Iterable, Iterator

import tensorflow_datasets as tfds

import imagesets.tfds_internals as tfds_internals


def canonical(record: bytes) -> bytes:
  """`record` (a serialized tf.train.Example) with its map entries in a fixed order."""
  return tfds_internals.Example.FromString(record).SerializeToString(deterministic=True)


def _canonical_records(examples: Iterable) -> Iterator:
  for key, record in examples:
    yield key, canonical(record)


class DeterministicExampleWriter(tfds.core.ExampleWriter):
  """TFDS's ExampleWriter, writing every record in protobuf's deterministic form."""

  def write(self, path, examples):
    return super().write(path, _canonical_records(examples))
