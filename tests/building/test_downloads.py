"""downloads: the real reachability probe (closed port, unresolvable host, a hung server),
and `download_first` through TFDS's real download manager and checksum check against a
local HTTP server."""

import ssl
import time
import urllib.error
import urllib.request

import pytest
import tensorflow_datasets as tfds
from tensorflow_datasets.core.download import checksums as tfds_checksums

import bucket_servers
from imagesets.building import downloads
from imagesets_testing import http_server

PROXIES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy")


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
  for name in PROXIES:
    monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server():
  with http_server.FileServer() as running:
    yield running


def test_a_server_that_answers_is_reachable_even_with_an_error_status(server):
  server.files["/a.tgz"] = b"x"
  assert downloads.unreachable(server.url("/a.tgz")) is None
  assert downloads.unreachable(server.url("/missing.tgz")) is None  # 404 is an answer


def test_a_tls_server_is_reachable_even_if_urllib_does_not_trust_its_certificate(tmp_path):
  # Trust is for TFDS's download to decide (requests uses certifi's CAs, urllib the system's).
  context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
  context.load_cert_chain(*bucket_servers._test_certificate(tmp_path))  # self-signed
  with http_server.FileServer({"/a.tgz": b"x"}, tls=context) as server:
    url = server.url("/a.tgz")
    assert url.startswith("https://")
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
      urllib.request.urlopen(url, timeout=5)
    assert downloads.unreachable(url) is None


def test_a_closed_port_is_unreachable_at_once():
  port = http_server.closed_port()
  started = time.monotonic()
  reason = downloads.unreachable(f"http://127.0.0.1:{port}/a.tgz")
  assert reason.startswith(f"cannot connect to 127.0.0.1:{port} (") and "refused" in reason
  assert time.monotonic() - started < downloads.PROBE_TIMEOUT_S


def test_an_unresolvable_host_is_unreachable():
  reason = downloads.unreachable("http://no-such-host.invalid/a.tgz")
  assert reason.startswith("cannot connect to no-such-host.invalid:80 ("), reason


def test_a_server_that_accepts_and_never_answers_is_unreachable_after_the_timeout(
    monkeypatch):
  monkeypatch.setattr(downloads, "PROBE_TIMEOUT_S", 1)  # the rule, not the default's wait
  with http_server.silent_server() as hung:
    started = time.monotonic()
    reason = downloads.unreachable(f"http://127.0.0.1:{hung.port}/a.tgz")
    took = time.monotonic() - started
  assert reason == f"no answer from 127.0.0.1:{hung.port} within {downloads.PROBE_TIMEOUT_S} s"
  assert hung.connections == 1
  assert downloads.PROBE_TIMEOUT_S <= took < 5  # (under the default's 5 s: this timeout)


def test_the_proxy_is_probed_when_one_is_set(server, monkeypatch):
  monkeypatch.setenv("HTTP_PROXY", server.url(""))
  assert downloads.unreachable("http://data.example.invalid/a.tar") is None  # proxy answers
  port = http_server.closed_port()
  monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
  assert downloads.unreachable("http://data.example.invalid/a.tar").startswith(
      f"cannot connect to 127.0.0.1:{port}")


def _manager(tmp_path, checksums_file):
  """TFDS's own download manager, checking against a test checksum file."""
  return tfds.download.DownloadManager(
      download_dir=tmp_path / "downloads",
      url_infos=downloads.with_known_size(tfds_checksums.load_url_infos(checksums_file)))


def _registered(checksums_file):
  return tfds_checksums.load_url_infos(checksums_file)


def _download(tmp_path, server, files, checksums, urls):
  checksums_file = http_server.write_checksums(tmp_path / "checksums.txt", checksums)
  server.files.update(files)
  return downloads.download_first(
      _manager(tmp_path, checksums_file), urls, what="a.tgz",
      instructions="use --manual_dir DIR", registered=_registered(checksums_file))


@pytest.fixture
def archives(tmp_path):
  right, wrong = tmp_path / "right" / "a.tgz", tmp_path / "wrong" / "a.tgz"
  for path, data in ((right, b"the registered archive"), (wrong, b"another archive!!!!!!")):
    path.parent.mkdir()
    path.write_bytes(data)
  return right, wrong


@pytest.mark.parametrize("size_known", [True, False])
def test_the_registered_archive_is_accepted(tmp_path, server, archives, size_known):
  right, _ = archives
  url = server.url("/a.tgz")
  path = _download(tmp_path, server, {"/a.tgz": right.read_bytes()},
                   {url: (right, size_known)}, [url])
  assert path.read_bytes() == right.read_bytes()
  assert path.is_relative_to(tmp_path / "downloads")
  assert server.downloads("/a.tgz") == 1


@pytest.mark.parametrize("size_known", [True, False])
def test_another_archive_is_refused_with_one_line_naming_the_url(tmp_path, server, archives,
                                                                 size_known):
  right, wrong = archives
  url = server.url("/a.tgz")
  with pytest.raises(downloads.SourceNotFoundError) as caught:
    _download(tmp_path, server, {"/a.tgz": wrong.read_bytes()}, {url: (right, size_known)}, [url])
  message = str(caught.value)
  first, line, instructions = message.split("\n")
  assert first == "could not download a.tgz:" and instructions == "use --manual_dir DIR"
  assert line.startswith(f"  {url}: ")
  registered = _registered(tmp_path / "checksums.txt")[url]
  assert registered.checksum in line  # what was expected, on the same line
  if size_known:  # TFDS's own check refused it
    assert "NonMatchingChecksumError" in line
  else:  # ours, on the sha256 alone
    assert "ArchiveMismatchError" in line and "(size not yet registered)" in line


def test_the_next_url_is_tried_when_one_fails_and_every_failure_is_named(tmp_path, server,
                                                                         archives):
  right, wrong = archives
  gone, bad, good = server.url("/gone.tgz"), server.url("/bad.tgz"), server.url("/good.tgz")
  closed = f"http://127.0.0.1:{http_server.closed_port()}/a.tgz"
  path = _download(tmp_path, server, {"/bad.tgz": wrong.read_bytes(),
                                      "/good.tgz": right.read_bytes()},
                   {closed: right, gone: right, bad: right, good: right},
                   [closed, gone, bad, good])
  assert path.read_bytes() == right.read_bytes()
  assert [server.downloads(p) for p in ("/gone.tgz", "/bad.tgz", "/good.tgz")] == [1, 1, 1]


def test_unreachable_and_unregistered_urls_are_never_downloaded(tmp_path, server, archives):
  right, _ = archives
  closed = f"http://127.0.0.1:{http_server.closed_port()}/a.tgz"
  unregistered = server.url("/a.tgz")
  started = time.monotonic()
  with pytest.raises(downloads.SourceNotFoundError) as caught:
    _download(tmp_path, server, {"/a.tgz": right.read_bytes()}, {closed: right},
              [closed, unregistered])
  assert time.monotonic() - started < downloads.PROBE_TIMEOUT_S
  assert server.downloads("/a.tgz") == 0
  message = str(caught.value)
  assert f"{closed}: cannot connect to 127.0.0.1:" in message
  assert f"{unregistered}: not registered in the checksums file" in message


def test_a_check_of_its_own_lets_an_unregistered_url_download(tmp_path, server, archives):
  right, _ = archives
  url = server.url("/splits.mat")
  checked = []
  checksums_file = http_server.write_checksums(tmp_path / "checksums.txt", {})
  server.files["/splits.mat"] = right.read_bytes()
  path = downloads.download_first(
      _manager(tmp_path, checksums_file), [url], what="splits.mat", instructions="",
      registered={}, check=checked.append)
  assert checked == [path] and path.read_bytes() == right.read_bytes()
