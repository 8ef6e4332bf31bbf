"""A build killed with SIGKILL mid-way, and the next build of its version started at once.

    python benchmarks/kill_then_rebuild.py [--tries 20] [--at-once]

Each try starts tests/building/held_build.py (synthetic_images/tiny, held half-way through
its test split, its worker pool running), kills that process alone (`kill -9`, as the OOM
killer does), waits until it is reaped (or, with --at-once, not even that) and builds the
version here at once. Counts the builds refused as "in progress" (build_lock).
"""

import argparse
import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import tensorflow_datasets as tfds

import imagesets  # noqa: F401
from imagesets.building import build_lock

HELD_BUILD = pathlib.Path(__file__).parents[1] / "tests" / "building" / "held_build.py"


def one_try(work: pathlib.Path, at_once: bool) -> tuple[bool, float]:
  """(refused, seconds from the kill to the end of the next build's attempt)."""
  data_dir = pathlib.Path(tempfile.mkdtemp(prefix="kill-", dir=work))
  held = subprocess.Popen([sys.executable, str(HELD_BUILD), str(data_dir), str(data_dir / "never")],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                          start_new_session=True)
  try:
    while (line := held.stdout.readline()) and line.strip() != "generating":
      pass
    held.send_signal(signal.SIGKILL)
    start = time.monotonic()
    if not at_once:
      held.wait()
    try:
      tfds.builder("synthetic_images/tiny", data_dir=data_dir).download_and_prepare()
      return False, time.monotonic() - start
    except build_lock.BuildInProgressError:
      return True, time.monotonic() - start
  finally:
    held.wait()
    with contextlib.suppress(ProcessLookupError):
      os.killpg(held.pid, signal.SIGKILL)  # (orphaned workers, if any)
    shutil.rmtree(data_dir, ignore_errors=True)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--tries", type=int, default=20)
  parser.add_argument("--at-once", action="store_true",
                      help="do not wait until the killed build is reaped")
  parser.add_argument("--work", default=tempfile.gettempdir())
  args = parser.parse_args()
  work = pathlib.Path(args.work)
  work.mkdir(parents=True, exist_ok=True)
  refused = [one_try(work, args.at_once)[0] for _ in range(args.tries)]
  print(f"{'at once' if args.at_once else 'once reaped'}: {sum(refused)} of {args.tries} "
        "next builds refused as in progress")


if __name__ == "__main__":
  main()
