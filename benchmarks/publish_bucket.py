"""Cost of verified, committed publishing and of fetching, against the test bucket servers.

Builds synthetic_images/default (1,000 PNG images, ~150 MB in 8 shards), then for the S3
server (SeaweedFS) and the GCS server (fake-gcs-server) on 127.0.0.1 measures:

  raw put     the same files uploaded with plain fsspec `put_file` (no hashing, checks, commit)
  publish     `imagesets publish`: hash, upload, verify every object, manifest, commit
  no-op       publishing the identical version again
  fetch       download + SHA-256 check into an empty cache
  fetch again the cached version, reused

Run by hand (not a test): .venv/bin/python benchmarks/publish_bucket.py
"""

import contextlib
import pathlib
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import bucket_servers  # noqa: E402
from imagesets.storage import bucket as bucket_lib  # noqa: E402
from imagesets.storage import fetch
from imagesets.publishing import publish  # noqa: E402

SPEC = "synthetic_images/default:1.0.0"


def timed(fn):
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def main():
  import tensorflow_datasets as tfds
  with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
    tmp = pathlib.Path(tmp)
    data_dir = tmp / "tfds"
    tfds.builder("synthetic_images/default", data_dir=data_dir).download_and_prepare()
    version_dir = data_dir / "synthetic_images/default/1.0.0"
    files = sorted(p for p in version_dir.iterdir() if p.is_file())
    size = sum(p.stat().st_size for p in files)
    (tmp / "weed").mkdir()
    (tmp / "gcs").mkdir()
    s3 = stack.enter_context(bucket_servers.seaweedfs_s3(tmp / "weed"))
    gcs = stack.enter_context(bucket_servers.fake_gcs(tmp / "gcs"))
    stack.enter_context(bucket_servers.environment({
        **bucket_servers.STATIC_ENV, "AWS_ENDPOINT_URL": s3, "STORAGE_EMULATOR_HOST": gcs}))
    print(f"{SPEC}: {len(files)} files, {size / 2**20:.1f} MiB")
    for scheme in ("s3", "gs"):
      url = f"{scheme}://{bucket_servers.BUCKET}/bench/tfds"
      raw = bucket_lib.Bucket(f"{scheme}://{bucket_servers.BUCKET}/raw")
      raw.check()
      for p in files:  # warm-up: the servers allocate their volumes on first writes
        raw.fs.put_file(str(p), f"{raw.root}-warmup/{p.name}")
      put = timed(lambda: [raw.fs.put_file(str(p), f"{raw.root}/{p.name}") for p in files])
      pub = timed(lambda: publish.publish(SPEC, data_dir, url, progress=False))
      noop = timed(lambda: publish.publish(SPEC, data_dir, url, progress=False))
      cache = tmp / f"cache-{scheme}"
      cold = timed(lambda: fetch.fetch(url, SPEC, cache_dir=cache, progress=False))
      warm = timed(lambda: fetch.fetch(url, SPEC, cache_dir=cache, progress=False))
      mib = size / 2**20
      print(f"{scheme}: raw put {put:.2f} s ({mib / put:.0f} MiB/s) | publish {pub:.2f} s "
            f"({mib / pub:.0f} MiB/s, {pub / put:.2f}x raw) | no-op {noop:.2f} s | "
            f"fetch {cold:.2f} s ({mib / cold:.0f} MiB/s) | fetch again {warm * 1000:.0f} ms")


if __name__ == "__main__":
  main()
