"""Byte progress bars for uploads and downloads (on stderr)."""

import sys


def byte_bar(total: int, desc: str, enabled: bool):
  from tqdm import tqdm
  return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
              disable=not enabled, file=sys.stderr, dynamic_ncols=True)
