"""How long each `imagesets` command takes to say its first line, and to finish (issue 50).

    python benchmarks/first_line.py [--images 120] [--rounds 3] [--work /tmp/first_line]

Builds a class-folder tree of real-photo crops (imagesets_testing.photo_crops, 500x333
JPEGs, 4 classes) as pets:1.0.0 and, with 10 photos changed, pets:1.1.0, publishes 1.0.0
to a folder bucket, then runs every subcommand as a user runs it (the installed console
script, a fresh process each) and times its first byte of output (stdout or stderr) and its
exit. Lookups and typos are in the table too: they are answered before TensorFlow could
load. Each row also says whether the process loaded TensorFlow (`python -X importtime`
would cost the timing: a second run per row, not timed, reads `sys.modules` at exit).
Medians of `--rounds`, commands alternated within a round.
"""

import argparse
import os
import pathlib
import selectors
import shutil
import statistics
import subprocess
import sys
import time

from imagesets_testing import photo_crops
from imagesets_testing.trees import write_tree

BIN = pathlib.Path(sys.executable).parent
CLASSES = ("cat", "dog", "bird", "fish")

# Runs the command line as the console script does, then says whether TensorFlow loaded.
_PROBE = """
import sys
sys.argv[0] = "imagesets"
from imagesets.cli import main
try:
  code = main.main(sys.argv[1:])
except SystemExit as exit_:
  code = exit_.code
print("TF" if "tensorflow" in sys.modules else "NO_TF", file=sys.stderr)
"""


def make_versions(work: pathlib.Path, count: int) -> tuple[pathlib.Path, pathlib.Path]:
  """(data dir with pets 1.0.0 and 1.1.0, bucket with 1.0.0); made once per count."""
  data_dir, bucket = work / "tfds", work / "bucket"
  marker = work / f".complete-{count}"
  if marker.exists():
    return data_dir, bucket
  shutil.rmtree(work, ignore_errors=True)
  photos = list(photo_crops.jpegs(count + 10, seed=7))
  tree = work / "photos"
  write_tree(tree, {f"{CLASSES[i % len(CLASSES)]}/IMG_{i:04d}.jpg": data
                    for i, (_, data) in enumerate(photos[:count])})
  run("build", tree, "--name", "pets", "--version", "1.0.0", "--data-dir", data_dir)
  run("publish", "pets:1.0.0", "--data-dir", data_dir, "--to", bucket, "--quiet")
  for i, (_, data) in enumerate(photos[count:]):   # 10 photos replaced: a new version
    (tree / CLASSES[i % len(CLASSES)] / f"IMG_{i:04d}.jpg").write_bytes(data)
  run("build", tree, "--name", "pets", "--version", "1.1.0", "--data-dir", data_dir)
  marker.touch()
  return data_dir, bucket


def run(*args) -> None:
  subprocess.run([str(BIN / "imagesets"), *map(str, args)], check=True,
                 stdout=subprocess.DEVNULL)


def timed(args: list[str]) -> tuple[float, float, int]:
  """(seconds to the first byte of output, seconds to exit, exit status)."""
  start = time.perf_counter()
  process = subprocess.Popen([str(BIN / "imagesets"), *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
  first = None
  selector = selectors.DefaultSelector()
  for stream in (process.stdout, process.stderr):
    selector.register(stream, selectors.EVENT_READ)
  while selector.get_map():
    for key, _ in selector.select():
      data = os.read(key.fileobj.fileno(), 65536)
      if not data:
        selector.unregister(key.fileobj)
      elif first is None:
        first = time.perf_counter() - start
  status = process.wait()
  end = time.perf_counter() - start
  return (end if first is None else first), end, status


def loads_tensorflow(args: list[str]) -> bool:
  result = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True,
                          text=True)
  return result.stderr.strip().splitlines()[-1] == "TF"


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--images", type=int, default=120)
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--work", default="/tmp/first_line")
  args = parser.parse_args()
  work = pathlib.Path(args.work)
  data_dir, bucket = make_versions(work, args.images)
  tree = work / "photos"
  page, cache = work / "page.html", work / "cache"
  d = ["--data-dir", str(data_dir)]
  rows = {
      "--help": ["--help"],
      "list": ["list", *d],
      "list BUCKET": ["list", str(bucket)],
      "verify": ["verify", "pets:1.1.0", *d, "--source", str(tree)],
      "duplicates": ["duplicates", "pets:1.1.0", *d, "--recompute"],
      "report": ["report", "pets:1.1.0", "--against", "pets:1.0.0", *d, "--out", str(page)],
      "diff": ["diff", "pets:1.0.0", "pets:1.1.0", *d],
      "publish (already there)": ["publish", "pets:1.0.0", *d, "--to", str(bucket), "--quiet"],
      "fetch": ["fetch", str(bucket), "pets:1.0.0", "--cache-dir", str(cache), "--quiet"],
      "duplicates mnie (typo)": ["duplicates", "mnie:1.0.0", *d],
      "diff pets:9.9.9 (missing)": ["diff", "pets:1.0.0", "pets:9.9.9", *d],
      "build --name Pets (usage)": ["build", str(tree), "--name", "Pets", *d],
      "build 1.1.0 again (no-op)": ["build", str(tree), "--name", "pets", "--version",
                                    "1.1.0", *d],
  }
  times = {name: [] for name in rows}
  for _ in range(args.rounds):
    shutil.rmtree(cache, ignore_errors=True)
    for name, command in rows.items():
      first, end, status = timed(command)
      times[name].append((first, end, status))
  print(f"{args.images} photos, {args.rounds} rounds, medians; "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
  print("| command | first line (s) | done (s) | exit | loads TensorFlow |")
  print("|---|---:|---:|---:|---|")
  for name, command in rows.items():
    first = statistics.median(t[0] for t in times[name])
    end = statistics.median(t[1] for t in times[name])
    statuses = sorted({t[2] for t in times[name]})
    tf = "yes" if loads_tensorflow(command) else "no"
    print(f"| `imagesets {name}` | {first:.2f} | {end:.2f} | "
          f"{'/'.join(map(str, statuses))} | {tf} |")


if __name__ == "__main__":
  main()
