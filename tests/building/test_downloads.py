"""downloads: a URL's server is probed before TFDS's retrying download; offline is fast."""

import socket
import time

import pytest

from imagesets.building import downloads


@pytest.fixture
def listening():
  server = socket.socket()
  server.bind(("127.0.0.1", 0))
  server.listen()
  yield server.getsockname()[1]
  server.close()


def _closed_port() -> int:
  with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    return probe.getsockname()[1]  # free once closed: nothing listens there


def test_a_listening_server_is_reachable_a_closed_port_is_not(listening, monkeypatch):
  for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
    monkeypatch.delenv(name, raising=False)
  assert downloads.unreachable(f"http://127.0.0.1:{listening}/a.tgz") is None
  port = _closed_port()
  assert f"127.0.0.1:{port}" in downloads.unreachable(f"http://127.0.0.1:{port}/a.tgz")


def test_the_proxy_is_probed_when_one_is_set(listening, monkeypatch):
  monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{listening}")
  monkeypatch.setenv("NO_PROXY", "")
  assert downloads.unreachable("https://data.example.invalid/a.tar") is None
  monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{_closed_port()}")
  assert "cannot connect to 127.0.0.1" in downloads.unreachable("https://data.example.invalid/a.tar")


class _Manager:
  def __init__(self):
    self.asked = []

  def download(self, url):
    self.asked.append(url)
    raise OSError("checksum mismatch")


def test_unreachable_urls_are_never_handed_to_tfds_and_all_are_named(monkeypatch):
  port = _closed_port()
  urls = [f"http://127.0.0.1:{port}/a.tar", "http://also.invalid/a.tar"]
  reachable = {urls[1]}
  monkeypatch.setattr(downloads, "unreachable",
                      lambda url: None if url in reachable else "cannot connect")
  manager = _Manager()
  started = time.monotonic()
  with pytest.raises(downloads.SourceNotFoundError) as caught:
    downloads.download_first(manager, urls, what="a.tar", instructions="use --manual_dir DIR")
  assert time.monotonic() - started < 5
  assert manager.asked == [urls[1]]  # only the reachable one went to the download manager
  message = str(caught.value)
  assert f"{urls[0]}: cannot connect" in message and f"{urls[1]}: OSError: checksum" in message
  assert message.endswith("use --manual_dir DIR")
