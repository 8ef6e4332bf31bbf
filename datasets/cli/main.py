"""`imagesets` command: publish prepared datasets to a team bucket, list and fetch them.

  imagesets publish NAME[/CONFIG][:VERSION] --data-dir D --to URL
  imagesets list URL
  imagesets fetch URL NAME[/CONFIG][:VERSION] [--cache-dir C] [--verify]

Errors print one line and exit 1; usage errors exit 2. No traceback for storage faults.
"""

import argparse
import datetime
import logging
import os
import sys

from imagesets import startup
from imagesets.publishing import bucket as bucket_lib
from imagesets.publishing import publish as publish_lib


def _size(num_bytes: int) -> str:
  value = float(num_bytes)
  for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
    if value < 1024 or unit == "TiB":
      return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
    value /= 1024
  raise AssertionError


def _when(iso: str) -> str:
  try:
    moment = datetime.datetime.fromisoformat(iso).astimezone(datetime.timezone.utc)
  except ValueError:
    return iso or "-"
  return moment.strftime("%Y-%m-%d %H:%M UTC")


def _table(rows: list[list[str]]) -> str:
  widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
  return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
                   for row in rows)


def cmd_publish(args) -> int:
  publish_lib.publish(args.spec, args.data_dir, args.to, progress=not args.quiet, log=print)
  return 0


def cmd_list(args) -> int:
  published, unfinished = publish_lib.list_published(args.url)
  if not published:
    print(f"no published datasets in {args.url}")
  else:
    rows = [["DATASET", "CONFIG", "VERSION", "SIZE", "EXAMPLES", "PUBLISHED"]]
    for item in published:
      manifest = item.manifest
      examples = (" ".join(f"{split}={count}" for split, count in manifest.splits.items())
                  if manifest else "-")
      rows.append([item.ref.name, item.ref.config or "-", item.ref.version,
                   _size(manifest.num_bytes) if manifest else "-", examples,
                   _when(manifest.published_at) if manifest else "not by imagesets"])
    print(_table(rows))
  for ref in unfinished:
    print(f"(unfinished upload, not published: {ref}; re-run publish to complete it)")
  return 0


def cmd_fetch(args) -> int:
  data_dir = publish_lib.fetch(args.url, args.spec, cache_dir=args.cache_dir,
                               verify=args.verify, progress=not args.quiet)
  print(data_dir)
  return 0


def parser() -> argparse.ArgumentParser:
  top = argparse.ArgumentParser(
      prog="imagesets", description="Publish TFDS datasets to a team bucket and train from it. "
      "URLs: s3://BUCKET/PREFIX, gs://BUCKET/PREFIX or a local path. Credentials come from "
      "each cloud's standard environment and config files.")
  top.add_argument("-v", "--verbose", action="store_true",
                   help="show TensorFlow's start-up and device logs")
  commands = top.add_subparsers(dest="command", required=True)

  p = commands.add_parser("publish", help="upload a prepared version, verified, committed last")
  p.add_argument("spec", metavar="NAME[/CONFIG][:VERSION]",
                 help="default config and latest prepared version if omitted")
  p.add_argument("--data-dir", default=os.path.join("~", "tensorflow_datasets"),
                 help="local TFDS data_dir the version was built into (default: %(default)s)")
  p.add_argument("--to", required=True, metavar="URL", help="bucket data_dir to publish into")
  p.add_argument("--quiet", action="store_true", help="no progress bar")
  p.set_defaults(run=cmd_publish)

  p = commands.add_parser("list", help="show published datasets, configs and versions")
  p.add_argument("url", metavar="URL")
  p.set_defaults(run=cmd_list)

  p = commands.add_parser("fetch", help="verified sync of a version into the local cache; "
                          "prints the data_dir to pass to tfds.load")
  p.add_argument("url", metavar="URL")
  p.add_argument("spec", metavar="NAME[/CONFIG][:VERSION]")
  p.add_argument("--cache-dir", default=None,
                 help=f"cache root (default: ${publish_lib.CACHE_ENV} or ~/.cache/imagesets)")
  p.add_argument("--verify", action="store_true",
                 help="re-hash a cached copy and repair it if damaged")
  p.add_argument("--quiet", action="store_true", help="no progress bar")
  p.set_defaults(run=cmd_fetch)
  return top


def main(argv=None) -> int:
  args = parser().parse_args(argv)
  startup.probe_devices()
  # The clients log every retry with a traceback; our one-line error says it all.
  for name in ("gcsfs", "s3fs", "aiobotocore", "botocore", "google", "absl"):
    logging.getLogger(name).setLevel(logging.CRITICAL)
  try:
    return args.run(args)
  except (bucket_lib.BucketError, publish_lib.PublishError) as exc:
    print(f"imagesets: error: {exc}", file=sys.stderr)
    return 1
  except KeyboardInterrupt:
    print("imagesets: interrupted; nothing half-done is visible: re-run to resume",
          file=sys.stderr)
    return 130


if __name__ == "__main__":
  sys.exit(main())
