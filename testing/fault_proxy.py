"""A TCP proxy on 127.0.0.1 between a client and a test server that injects network faults:
connections cut after some bytes, a server gone for a few seconds, a bandwidth cap."""

import contextlib
import socket
import threading
import time


class FaultProxy:
  """Relays 127.0.0.1:port -> upstream (host, port).

  cut_after: the first `cut_connections` connections are closed after relaying this many
  bytes from the server (a dropped connection mid-transfer).
  down_until: new connections are refused (reset at once) until this monotonic time.
  bytes_per_second: a bandwidth cap on the server's answers (None: none).
  """

  def __init__(self, upstream: tuple[str, int], *, bytes_per_second: float | None = None):
    self.upstream = upstream
    self.bytes_per_second = bytes_per_second
    self.cut_after: int | None = None
    self.cut_connections = 0
    self.down_until = 0.0
    self.connections = 0
    self.refused = 0
    self.cut = 0
    self.served = 0   # bytes relayed from the server to the clients
    self._server = socket.create_server(("127.0.0.1", 0))
    self.port = self._server.getsockname()[1]
    self._closed = False
    self._open: set[socket.socket] = set()
    threading.Thread(target=self._serve, daemon=True).start()

  @property
  def url(self) -> str:
    return f"http://127.0.0.1:{self.port}"

  def refuse_next(self, connections: int) -> None:
    """Refuses the next `connections` connections and cuts the open ones: an outage that
    starts and ends on requests counted, not on a clock."""
    self.refuse_left = connections
    for sock in list(self._open):
      with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)

  def go_down_for(self, seconds: float) -> None:
    """Refuses new connections for `seconds` and cuts the open ones (kept-alive clients)."""
    self.down_until = time.monotonic() + seconds
    for sock in list(self._open):
      with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)

  def _serve(self):
    while not self._closed:
      try:
        client, _ = self._server.accept()
      except OSError:
        return
      self.connections += 1
      refuse = getattr(self, "refuse_left", 0) > 0
      if refuse:
        self.refuse_left -= 1
      if refuse or time.monotonic() < self.down_until:
        self.refused += 1
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        client.close()  # a reset: the server is gone
        continue
      limit = None
      if self.cut_after is not None and self.cut_connections > 0:
        self.cut_connections -= 1
        limit = self.cut_after
      threading.Thread(target=self._relay, args=(client, limit), daemon=True).start()

  def _relay(self, client: socket.socket, limit: int | None):
    try:
      upstream = socket.create_connection(self.upstream, timeout=30)
    except OSError:
      client.close()
      return
    self._open.update((client, upstream))
    threading.Thread(target=_pump, args=(client, upstream, None, None), daemon=True).start()
    sent = _pump(upstream, client, limit, self.bytes_per_second, self)
    self._open.difference_update((client, upstream))
    if limit is not None and sent >= limit:
      self.cut += 1
    for sock in (client, upstream):
      with contextlib.suppress(OSError):
        sock.close()

  def close(self):
    self._closed = True
    self._server.close()


def _pump(source: socket.socket, target: socket.socket, limit: int | None,
          bytes_per_second: float | None, counter: "FaultProxy | None" = None) -> int:
  sent, start = 0, time.monotonic()
  try:
    while True:
      data = source.recv(65536)
      if not data:
        break
      if limit is not None and sent + len(data) >= limit:
        target.sendall(data[:max(limit - sent, 0)])
        return limit
      target.sendall(data)
      sent += len(data)
      if counter is not None:
        counter.served += len(data)
      if bytes_per_second:
        ahead = sent / bytes_per_second - (time.monotonic() - start)
        if ahead > 0:
          time.sleep(ahead)
  except OSError:
    pass
  finally:
    with contextlib.suppress(OSError):
      target.shutdown(socket.SHUT_WR)
  return sent
