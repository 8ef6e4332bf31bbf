"""`imagesets` command: build your own folder as a dataset, publish prepared datasets to a
team bucket, list and fetch them.

  imagesets build PATH --name NAME [--version X.Y.Z] [--data-dir D] [options]
  imagesets verify NAME[/CONFIG][:VERSION] --data-dir D --source PATH_OR_ARCHIVE
  imagesets publish NAME[/CONFIG][:VERSION] --data-dir D --to URL
  imagesets list URL
  imagesets fetch URL NAME[/CONFIG][:VERSION] [--cache-dir C] [--verify]

Errors print one line and exit 1; usage errors exit 2. No traceback for storage faults.
"""

import argparse
import datetime
import logging
import os
import pathlib
import sys

from imagesets import startup
from imagesets.building import class_folders_builder
from imagesets.class_folders import named_build
from imagesets.verifying import round_trip
from imagesets.publishing import bucket as bucket_lib
from imagesets.publishing import fetch as fetch_lib
from imagesets.publishing import listing as listing_lib
from imagesets.publishing import publish as publish_lib
from imagesets.publishing import versions as versions_lib


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


def _proportions(text: str) -> dict[str, float]:
  try:
    pairs = [item.split("=") for item in text.split(",")]
    return {name.strip(): float(value) for name, value in pairs}
  except ValueError:
    raise argparse.ArgumentTypeError(
        f"{text!r}: expected SPLIT=FRACTION,... e.g. train=0.8,validation=0.1,test=0.1") from None


def _beam_options(text: str | None):
  if not text:
    return None
  from apache_beam.options import pipeline_options  # only Beam builds need Beam
  return pipeline_options.PipelineOptions([f"--{flag}" for flag in text.split(",")])


def cmd_build(args) -> int:
  options = class_folders_builder.ClassFoldersConfig(
      name=args.name, split_proportions=args.splits, seed=args.seed,
      skip_bad_files=args.skip_bad_files, shorter_side=args.shorter_side,
      image_size=args.image_size)
  try:
    about = named_build.read_about(args.path, description=args.description,
                                   citation=args.citation, homepage=args.homepage)
    builder = named_build.build(
        args.path, args.name, version=args.version, data_dir=args.data_dir, options=options,
        about=about, file_format=args.file_format,
        beam_options=_beam_options(args.beam_pipeline_options), log=print)
  except (ValueError, FileNotFoundError) as exc:  # bad folder, name, files or version
    print(f"imagesets: error: {exc}", file=sys.stderr)
    return 1
  info = builder.info
  # The data dir given, not builder.data_dir_root: a reused build is opened from its
  # version folder, whose "root" is that folder.
  data_dir = os.path.expanduser(args.data_dir)
  counts = " ".join(f"{split}={s.num_examples}" for split, s in info.splits.items())
  skipped = info.metadata.get("num_skipped_files", 0)
  converted = info.metadata.get("num_converted_files", 0)
  print(f"{info.name}:{info.version} in {data_dir}: {counts} "
        f"({skipped} skipped, {converted} re-encoded: see its metadata.json)")
  print(f"load it with: tfds.load(\"{info.name}:{info.version}\", data_dir=\"{data_dir}\")")
  return 0


def cmd_verify(args) -> int:
  data_dir = pathlib.Path(os.path.expanduser(args.data_dir))
  ref = versions_lib.resolve_local(versions_lib.Ref.parse(args.spec), data_dir)
  try:
    report = round_trip.verify(data_dir / ref.folder, args.source)
  except (ValueError, FileNotFoundError) as exc:
    print(f"imagesets: error: {exc}", file=sys.stderr)
    return 1
  print(f"{ref}:")
  print("\n".join(report.lines()))
  print("OK: everything matches" if report.ok else "FAILED: see the mismatches above")
  return 0 if report.ok else 1


def cmd_publish(args) -> int:
  publish_lib.publish(args.spec, args.data_dir, args.to, progress=not args.quiet, log=print)
  return 0


def cmd_list(args) -> int:
  published, unfinished = listing_lib.list_published(args.url)
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
  data_dir = fetch_lib.fetch(args.url, args.spec, cache_dir=args.cache_dir,
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

  p = commands.add_parser(
      "build", help="build a class-per-folder tree as dataset NAME:VERSION",
      formatter_class=argparse.RawDescriptionHelpFormatter,
      description="Builds PATH/<class>/**/<image> (local or gs://, s3://) as a TFDS dataset "
      "of its own name: validated, split by a seeded hash of each path, byte-reproducible.",
      epilog="example:\n  imagesets build ~/photos/pets --name pets --version 1.0.0\n"
      "  python -c 'import tensorflow_datasets as tfds; "
      "print(tfds.load(\"pets:1.0.0\", split=\"train\"))'\n\n"
      f"Card fields may also come from PATH/{named_build.ABOUT_FILE} (description, citation, "
      "homepage).\nRebuilding NAME:VERSION from the same content is a no-op; from other "
      "content it is refused.")
  p.add_argument("path", metavar="PATH", help="folder with one sub-folder of images per class")
  p.add_argument("--name", required=True, help="dataset name: lower case, digits, _")
  p.add_argument("--version", default="1.0.0", help="X.Y.Z (default: %(default)s)")
  p.add_argument("--data-dir", default=named_build.DEFAULT_DATA_DIR,
                 help="TFDS data dir to build into (default: %(default)s)")
  p.add_argument("--splits", type=_proportions, default="train=0.8,validation=0.1,test=0.1",
                 metavar="SPLIT=FRACTION,...", help="split proportions (default: %(default)s)")
  p.add_argument("--seed", type=int, default=0, help="seed of the split hash (default: 0)")
  p.add_argument("--skip-bad-files", action="store_true",
                 help="leave bad files out (listed in the metadata) instead of stopping")
  p.add_argument("--shorter-side", type=int, default=0, metavar="N",
                 help="store larger images downscaled to a shorter side of at least N "
                 "(default: original bytes)")
  p.add_argument("--image-size", type=int, default=0, metavar="S",
                 help="store larger images resized to a shorter side of exactly S, JPEG "
                 "quality 90, for training at S (default: original bytes)")
  p.add_argument("--file-format", default="tfrecord", choices=["tfrecord", "array_record"])
  p.add_argument("--description")
  p.add_argument("--citation", help="BibTeX")
  p.add_argument("--homepage")
  p.add_argument("--beam_pipeline_options", metavar="FLAG=VALUE,...",
                 help="run the per-file work on Apache Beam, e.g. "
                 "runner=DataflowRunner,project=P,region=R,temp_location=gs://B/tmp")
  p.set_defaults(run=cmd_build)

  p = commands.add_parser(
      "verify", help="check a prepared version against its source, file by file; exit 0 "
      "only when everything matches")
  p.add_argument("spec", metavar="NAME[/CONFIG][:VERSION]",
                 help="default config and latest prepared version if omitted")
  p.add_argument("--data-dir", default=named_build.DEFAULT_DATA_DIR,
                 help="TFDS data dir holding the version (default: %(default)s)")
  p.add_argument("--source", required=True, metavar="PATH_OR_ARCHIVE",
                 help="the folder or archive (.tgz, .tar) it was built from")
  p.set_defaults(run=cmd_verify)

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
                 help=f"cache root (default: ${fetch_lib.CACHE_ENV} or ~/.cache/imagesets)")
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
  except (bucket_lib.BucketError, versions_lib.PublishError) as exc:
    print(f"imagesets: error: {exc}", file=sys.stderr)
    return 1
  except KeyboardInterrupt:
    print("imagesets: interrupted; nothing half-done is visible: re-run to resume",
          file=sys.stderr)
    return 130


if __name__ == "__main__":
  sys.exit(main())
