"""TFRecord files written without TensorFlow are TensorFlow's bytes, and read back."""

import tensorflow as tf

from imagesets.storage import tfrecord_files


def test_the_bytes_are_tensorflows(tmp_path):
  records = [b"", b"x", bytes(range(256)) * 17, b"\xff" * (1 << 20) + b"tail"]
  assert tfrecord_files.write(tmp_path / "ours", records) == len(records)
  with tf.io.TFRecordWriter(str(tmp_path / "theirs")) as writer:
    for record in records:
      writer.write(record)
  ours = (tmp_path / "ours").read_bytes()
  assert ours == (tmp_path / "theirs").read_bytes()
  assert len(ours) == sum(len(r) + tfrecord_files.FRAMING for r in records)
  read = [r.numpy() for r in tf.data.TFRecordDataset(str(tmp_path / "ours"))]
  assert read == records


def test_no_records_is_an_empty_file(tmp_path):
  assert tfrecord_files.write(tmp_path / "empty", iter([])) == 0
  assert (tmp_path / "empty").read_bytes() == b""
