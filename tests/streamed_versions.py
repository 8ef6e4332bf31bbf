"""synthetic_images/variable in 16 shards a split, built once a session in each file format
(`built`, registered in conftest.py), published to a bucket and read back, locally or
streamed: shared by the tests of sources, streaming, shard_cache and grain_pipeline.
imagesets is imported where it is used (conftest.py imports this module)."""

import hashlib
import re
import time
import uuid

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import bucket_servers as servers

SPEC = "synthetic_images/variable:1.0.0"
FOLDER = "synthetic_images/variable/1.0.0"
NUM_SHARDS = 16


@pytest.fixture(scope="session", params=["tfrecord", "array_record"])
def built(request, tmp_path_factory):
  """synthetic_images/variable (160 train / 40 test images of 48-160 px) in 16 shards a split."""
  import imagesets  # noqa: F401  (makes synthetic_images known to TFDS)
  data_dir = tmp_path_factory.mktemp(f"variable_{request.param}")
  tfds.builder("synthetic_images/variable", data_dir=data_dir,
               file_format=request.param).download_and_prepare(
                   download_config=tfds.download.DownloadConfig(num_shards=NUM_SHARDS))
  return data_dir


# The cache and its processes do not depend on the file format: one format is enough.
ONE_FORMAT = pytest.mark.parametrize("built", ["tfrecord"], indirect=True)


def published_to(data_dir, scheme, tmp_path) -> str:
  from imagesets.publishing import publish  # pylint: disable=import-outside-toplevel
  if scheme == "file":
    url = f"file://{tmp_path}/bucket-{uuid.uuid4().hex[:8]}"
  else:
    url = f"{scheme}://{servers.BUCKET}/{uuid.uuid4().hex[:12]}/tfds"
  publish.publish(SPEC, data_dir, url, progress=False)
  return url


def digest(example) -> tuple:
  return (hashlib.sha256(example["image"]).hexdigest(), int(example["label"]))


def local_examples(data_dir, split):
  builder = tfds.builder(SPEC, data_dir=data_dir)
  if builder.info.file_format == tfds.core.FileFormat.ARRAY_RECORD:
    source = tfds.data_source(SPEC, split=split, data_dir=data_dir,
                              decoders={"image": tfds.decode.SkipDecoding()})
    return [digest(source[i]) for i in range(len(source))]
  return [digest(e) for e in tfds.as_numpy(tfds.load(
      SPEC, split=split, data_dir=data_dir, decoders={"image": tfds.decode.SkipDecoding()}))]


def streamed_examples(url, split, cache_dir, **kwargs):
  import imagesets  # pylint: disable=import-outside-toplevel
  ds = imagesets.load(SPEC, split, url, cache_dir=cache_dir,
                      decoders={"image": tfds.decode.SkipDecoding()}, **kwargs)
  return [digest(e) for e in tfds.as_numpy(ds)]


def our_line(error: BaseException) -> str:
  """The message our code raised: as it is, or, through tf.data's numpy functions (whose
  errors carry the Python traceback), the line TensorFlow quotes it on."""
  if not isinstance(error, tf.errors.OpError):
    return str(error)
  (line,) = [line for line in str(error).splitlines()
             if re.match(r"\s*imagesets\.[\w.]+(Error|Exception): ", line)]
  return line.split(": ", 1)[1].strip()


def train_bytes(built) -> list[int]:
  return [p.stat().st_size for p in (built / FOLDER).glob("*-train.*-of-*")]


def wait_for_downloads(cache) -> None:
  """Until the downloads under way end (observed: the test's next step needs them done)."""
  deadline = time.monotonic() + 120
  while cache._in_flight:  # pylint: disable=protected-access
    assert time.monotonic() < deadline, "downloads still under way after 120 s"
    time.sleep(0.01)
