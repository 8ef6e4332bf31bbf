"""Byte progress bars for uploads and downloads (on stderr)."""

import contextlib
import sys

from imagesets.console.progress_lines import LineStream, for_bars


@contextlib.contextmanager
def byte_bar(total: int, desc: str, enabled: bool):
  """A tqdm bar on stderr; in a log (stderr not a terminal), a line every few seconds and,
  once the bar is closed, its last state."""
  from tqdm import tqdm
  stream = for_bars(sys.stderr)
  with tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
            disable=not enabled, file=stream, dynamic_ncols=True) as bar:
    yield bar
  if isinstance(stream, LineStream):
    stream.finish()
