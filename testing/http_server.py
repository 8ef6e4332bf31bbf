"""Local HTTP servers (127.0.0.1 only) for download tests, and the checksum files naming
what they serve.

`FileServer({"/a.tgz": data})` serves files to TFDS's real download manager and to the
reachability probe, and counts the requests per path (404 for anything else);
`silent_server()` accepts connections and never answers (a hung server, or with
`hang_up` one that resets every request), counting them;
`write_checksums(path, {url: file})` writes a TFDS checksum file (`url size sha256 name`,
size 0 for "not yet known") registering test archives under the URLs they are served at.
"""

import contextlib
import collections
import hashlib
import http.server
import os
import pathlib
import socket
import ssl
import threading


class _Handler(http.server.BaseHTTPRequestHandler):
  server: "FileServer._Server"

  def _answer(self, with_body: bool) -> None:
    self.server.requests[(self.command, self.path)] += 1
    data = self.server.files.get(self.path)
    if data is None:
      self.send_error(404)
      return
    self.send_response(200)
    self.send_header("Content-Length", str(len(data)))
    self.send_header("Content-Type", "application/octet-stream")
    self.end_headers()
    if with_body:
      self.wfile.write(data)

  def do_GET(self):  # noqa: N802  (http.server's naming)
    self._answer(with_body=True)

  def do_HEAD(self):  # noqa: N802
    self._answer(with_body=False)

  def log_message(self, *args):
    del args  # quiet


class FileServer:
  """Serves {path: bytes} at http://127.0.0.1:<port>; use as a context manager."""

  class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
      del request, client_address  # a client that hangs up (e.g. refusing our certificate)

  def __init__(self, files: dict[str, bytes] | None = None, tls: ssl.SSLContext | None = None):
    """`tls`: a server context; the server then speaks HTTPS."""
    self._server = self._Server(("127.0.0.1", 0), _Handler)
    self._scheme = "https" if tls else "http"
    if tls:
      self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
    self._server.files = dict(files or {})
    self._server.requests = collections.Counter()
    self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

  @property
  def files(self) -> dict[str, bytes]:
    return self._server.files

  def url(self, path: str) -> str:
    return f"{self._scheme}://127.0.0.1:{self._server.server_address[1]}{path}"

  def downloads(self, path: str) -> int:
    """How many times `path` was fetched (GET; the probe's HEADs are not counted)."""
    return self._server.requests[("GET", path)]

  def __enter__(self) -> "FileServer":
    self._thread.start()
    return self

  def __exit__(self, *exc):
    self._server.shutdown()
    self._server.server_close()


class Listener:
  """The port of a local server that never sends a byte, and how many connections it took."""

  def __init__(self, port: int):
    self.port = port
    self.connections = 0


@contextlib.contextmanager
def silent_server(hang_up: bool = False):
  """A server that accepts every connection and never sends a byte; yields a `Listener`.

  It holds each connection open (a hung server), or with `hang_up` closes it at once (a
  proxy or server that resets every request). `connections` counts the attempts, so a test
  can tell one probe from a retry loop without timing it.
  """
  listener = socket.socket()
  listener.bind(("127.0.0.1", 0))
  listener.listen()
  held, stop = [], threading.Event()
  server = Listener(listener.getsockname()[1])

  def accept():
    listener.settimeout(0.2)
    while not stop.is_set():
      try:
        connection = listener.accept()[0]
      except OSError:
        continue
      server.connections += 1
      if hang_up:
        connection.close()
      else:
        held.append(connection)

  thread = threading.Thread(target=accept, daemon=True)
  thread.start()
  try:
    yield server
  finally:
    stop.set()
    thread.join()
    for connection in held:
      connection.close()
    listener.close()


def closed_port() -> int:
  """A local port nothing listens on (bound, then released)."""
  with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    return probe.getsockname()[1]


def write_checksums(path: os.PathLike, files: dict[str, os.PathLike | tuple[os.PathLike, bool]],
                    ) -> pathlib.Path:
  """A TFDS checksum file registering `files` ({url: file}) by size and sha256, as the
  builders' `checksums/<name>.txt`; `{url: (file, False)}` registers its sha256 with size
  0 ("size not yet known"). The registered name is the file's name."""
  lines = []
  for url, entry in files.items():
    file, size_known = entry if isinstance(entry, tuple) else (entry, True)
    file = pathlib.Path(file)
    sha256 = hashlib.sha256(file.read_bytes()).hexdigest()
    size = file.stat().st_size if size_known else 0
    lines.append(f"{url}\t{size}\t{sha256}\t{file.name}\n")
  path = pathlib.Path(path)
  path.write_text("".join(lines))
  return path
