"""Getting a source archive: the first URL that downloads and is the registered file, and a
fast, clear failure offline.

TFDS's download manager retries a failing URL with back-off (a VOC build without network
kept retrying for more than 6 minutes) and ends in a raw `requests` traceback. So before
asking it for a URL we send the URL's server (or the proxy that HTTP_PROXY / HTTPS_PROXY
name for it) one HEAD request with a 5 s timeout: any HTTP answer, even an error status,
means the server is there. A closed port, a host that does not resolve, or a server that
accepts the connection and never answers stops the build within seconds with one message
naming every URL tried, why, and the `--manual_dir` way.

Registered files (`checksums/<name>.txt`, TFDS's `url size sha256 filename` lines): a
size of 0 means "published sha256, size not yet known" (the SBD and Oxford-17 archives:
their projects publish hashes, not sizes). TFDS would refuse such a file (it compares
size and sha256), so it sees only the files whose size is known (`with_known_size`);
the others it downloads unchecked and `download_first` checks their sha256 itself. The
first networked `tfds build --register_checksums` writes the real size into the file.
"""

import pathlib
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable, Sequence

from imagesets.building import archives
from imagesets.building import problems

PROBE_TIMEOUT_S = 5
_DEFAULT_PORTS = {"http": 80, "https": 443}


class SourceNotFoundError(FileNotFoundError):
  """No manual copy and no URL gave the source; the message says what was tried."""


def manual_dir(dl_manager) -> pathlib.Path | None:
  """The build's --manual_dir, or None when none was given (or it is empty)."""
  try:
    return pathlib.Path(dl_manager.manual_dir)
  except AssertionError:  # TFDS's way of saying: no manual dir
    return None


def with_known_size(registered: dict) -> dict:
  """The registered files whose size is known: what TFDS's own check may be given."""
  return {url: info for url, info in registered.items() if int(info.size)}


def _probed_server(url: str) -> str:
  """host:port of the server a request for `url` goes to first: its proxy, if one is set."""
  parts = urllib.parse.urlsplit(url)
  proxy = urllib.request.getproxies().get(parts.scheme)
  if proxy and not urllib.request.proxy_bypass(parts.hostname or ""):
    parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
  return f"{parts.hostname}:{parts.port or _DEFAULT_PORTS.get(parts.scheme, 80)}"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
  def redirect_request(self, *args, **kwargs):
    return None  # a redirect is an answer: the server is there


def unreachable(url: str) -> str | None:
  """Why `url`'s server (or its proxy) does not answer right now; None if it does."""
  opener = urllib.request.build_opener(_NoRedirect)  # proxies from the environment, as TFDS
  try:
    opener.open(urllib.request.Request(url, method="HEAD"), timeout=PROBE_TIMEOUT_S).close()
  except urllib.error.HTTPError:
    return None  # an HTTP status, even 404 or 405: the server answers
  except TimeoutError:
    return f"no answer from {_probed_server(url)} within {PROBE_TIMEOUT_S} s"
  except OSError as error:  # URLError: refused, unresolvable host, reset, ...
    reason = getattr(error, "reason", None) or error
    if isinstance(reason, ssl.SSLError):
      # The server speaks TLS: it is there. Whether its certificate is trusted is for
      # TFDS's download to decide (requests trusts certifi's CAs, urllib the system's).
      return None
    if isinstance(reason, TimeoutError):
      return f"no answer from {_probed_server(url)} within {PROBE_TIMEOUT_S} s"
    return f"cannot connect to {_probed_server(url)} ({reason or type(reason).__name__})"
  return None


def _one_line(error: Exception) -> str:
  """An exception as one line; TFDS's checksum error without its debugging link."""
  lines = [line.strip() for line in str(error).splitlines()
           if line.strip() and not line.startswith("To debug")]
  return f"{type(error).__name__}: {' '.join(lines)}"


def download_first(dl_manager, urls: Sequence[str], *, what: str, instructions: str,
                   registered: dict,
                   check: Callable[[pathlib.Path], None] | None = None) -> pathlib.Path:
  """The path of the first of `urls` that downloads and is the registered file.

  `registered`: the builder's registered files (url -> UrlInfo, sizes 0 included). TFDS
  checks the size and sha256 of files whose size is known; we check the sha256 of the
  others. `check(path)` raises if a download is not the file (e.g. a published md5): it
  runs on every download, and lets a URL without a registered sha256 be downloaded;
  without it, a URL that is not registered is never downloaded.
  """
  failures = []
  for url in urls:
    info = registered.get(url)
    if info is None and check is None:
      reason = "not registered in the checksums file"
    else:
      reason = unreachable(url)
    if reason is None:
      try:
        path = pathlib.Path(dl_manager.download(url))
        if info is not None and not int(info.size):
          archives.check_file(path, info)
        if check is not None:
          check(path)
        return path
      except Exception as error:  # pylint: disable=broad-except  (network and checksum errors vary)
        reason = _one_line(error)
    failures.append(f"  {url}: {reason}")
  raise problems.one_line_if_uncaught(SourceNotFoundError(
      f"could not download {what}:\n" + "\n".join(failures) + "\n" + instructions))
