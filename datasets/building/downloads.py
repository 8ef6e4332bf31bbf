"""Getting a source archive: the first URL that downloads, and a fast, clear failure offline.

TFDS's download manager retries a failing URL with back-off (a VOC build without network
kept retrying for more than 6 minutes) and ends in a raw `requests` traceback. So before
asking it for a URL we open one TCP connection to the URL's host (or to the proxy that
HTTP_PROXY / HTTPS_PROXY name for it) with a 5 s timeout. A build without network stops
within seconds with one message naming every URL tried, why, and the `--manual_dir` way.
"""

import pathlib
import socket
import urllib.parse
import urllib.request
from typing import Sequence

from imagesets.building import problems

PROBE_TIMEOUT_S = 5
_DEFAULT_PORTS = {"http": 80, "https": 443}


class SourceNotFoundError(FileNotFoundError):
  """No manual copy and no URL gave the source; the message says what was tried."""


def unreachable(url: str) -> str | None:
  """Why `url`'s server (or its proxy) cannot be reached right now; None if it can."""
  parts = urllib.parse.urlsplit(url)
  proxy = urllib.request.getproxies().get(parts.scheme)
  if proxy and not urllib.request.proxy_bypass(parts.hostname or ""):
    parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
  host, port = parts.hostname, parts.port or _DEFAULT_PORTS.get(parts.scheme, 80)
  try:
    socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
  except OSError as error:
    return f"cannot connect to {host}:{port} ({error or type(error).__name__})"
  return None


def download_first(dl_manager, urls: Sequence[str], *, what: str,
                   instructions: str) -> pathlib.Path:
  """The path of the first of `urls` that downloads (TFDS checks its registered checksum)."""
  failures = []
  for url in urls:
    reason = unreachable(url)
    if reason is None:
      try:
        return pathlib.Path(dl_manager.download(url))
      except Exception as error:  # pylint: disable=broad-except  (network and checksum errors vary)
        reason = f"{type(error).__name__}: {error}"
    failures.append(f"  {url}: {reason}")
  raise problems.one_line_if_uncaught(SourceNotFoundError(
      f"could not download {what}:\n" + "\n".join(failures) + "\n" + instructions))
