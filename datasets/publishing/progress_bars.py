"""Byte progress bars for uploads and downloads (on stderr)."""

import sys

from imagesets.progress_lines import for_bars


def byte_bar(total: int, desc: str, enabled: bool):
  """A tqdm bar on stderr; in a log (stderr not a terminal), a line every few seconds."""
  from tqdm import tqdm
  return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
              disable=not enabled, file=for_bars(sys.stderr),
              dynamic_ncols=True)
