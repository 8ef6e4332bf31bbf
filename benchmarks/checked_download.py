"""Where a checked shard download spends its CPU, against the S3 test server.

Uploads one shard-sized object (7.2 MiB, the largest shard of stream_from_bucket's
version) to SeaweedFS on 127.0.0.1 and downloads it `--repeats` times each way, printing
the client's CPU (this process, all threads), the server's CPU (ms per MiB moved) and the
wall rate:

  fetch       the object into memory with fsspec (`cat_file`): what s3fs costs
  fetch only  `Bucket.copy_to` into a sink that drops the bytes: the cache's reads, unchecked
  checked     `transfer.checked_download`: part file, SHA-256, size check, rename (the cache)
  raw GET     one presigned plain-HTTP GET read into a preallocated buffer, then SHA-256:
              what the HTTP client alone would cost without s3fs/aiohttp

On this machine the S3 server shares the cores with training, so every MiB a cold or
limited epoch downloads costs training the client's and the server's CPU together.

Run by hand (not a test): .venv/bin/python benchmarks/checked_download.py [--repeats 20]
"""

import argparse
import contextlib
import hashlib
import http.client
import os
import pathlib
import sys
import tempfile
import time
import urllib.parse

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import bucket_servers  # noqa: E402
from imagesets.storage import bucket as bucket_lib  # noqa: E402
from imagesets.storage import transfer  # noqa: E402

SIZE = int(7.2 * 2**20)


def server_cpu(pid: int) -> float:
  fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
  return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


class _Sink:
  def write(self, chunk: bytes) -> None:
    pass


def _raw_get(url: str, expected_sha: str) -> None:
  parts = urllib.parse.urlsplit(url)
  buffer = memoryview(bytearray(SIZE))
  connection = http.client.HTTPConnection(parts.hostname, parts.port)
  try:
    connection.request("GET", f"{parts.path}?{parts.query}")
    response = connection.getresponse()
    assert response.status == 200, response.status
    got = 0
    while got < SIZE and (n := response.readinto(buffer[got:])):
      got += n
  finally:
    connection.close()
  assert hashlib.sha256(buffer[:got]).hexdigest() == expected_sha


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--repeats", type=int, default=20)
  args = parser.parse_args()
  with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
    tmp = pathlib.Path(tmp)
    (tmp / "weed").mkdir()
    s3 = stack.enter_context(bucket_servers.seaweedfs_s3(tmp / "weed"))
    pid = next(int(p.name) for p in pathlib.Path("/proc").iterdir() if p.name.isdigit()
               and f"-dir={tmp / 'weed'}".encode() in (p / "cmdline").read_bytes())
    stack.enter_context(bucket_servers.environment(
        {**bucket_servers.STATIC_ENV, "AWS_ENDPOINT_URL": s3}))
    bucket = bucket_lib.Bucket(f"s3://{bucket_servers.BUCKET}/bench")
    data = os.urandom(SIZE)
    (tmp / "object").write_bytes(data)
    bucket.upload(str(tmp / "object"), "object")
    entry = {"size": SIZE, "sha256": hashlib.sha256(data).hexdigest()}
    signed = bucket.fs.sign(bucket._path("object"), expiration=3600)

    def checked():
      transfer.checked_download(bucket, "object", tmp / "shard", entry)
      (tmp / "shard").unlink()

    ways = {
        "fetch": lambda: bucket.fs.cat_file(bucket._path("object")),
        "fetch only": lambda: bucket.copy_to("object", _Sink(), size=SIZE),
        "checked": checked,
        "raw GET": lambda: _raw_get(signed, entry["sha256"]),
    }
    mib = args.repeats * SIZE / 2**20
    print(f"{args.repeats} downloads of {SIZE / 2**20:.1f} MiB each way, one at a time:")
    for name, way in ways.items():
      way()  # (connections and first-use costs out of the figures)
      cpu, server, wall = time.process_time(), server_cpu(pid), time.perf_counter()
      for _ in range(args.repeats):
        way()
      cpu, server = time.process_time() - cpu, server_cpu(pid) - server
      wall = time.perf_counter() - wall
      print(f"  {name:10s}  client {1000 * cpu / mib:.2f} ms/MiB  server "
            f"{1000 * server / mib:.2f} ms/MiB  {mib / wall:.0f} MiB/s")


if __name__ == "__main__":
  main()
