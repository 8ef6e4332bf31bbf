"""`imagesets` command: build your own folder as a dataset, publish prepared datasets to a
team bucket, list and fetch them.

  imagesets build PATH --name NAME [--version X.Y.Z] [--data-dir D] [options]
  imagesets verify NAME[/CONFIG][:VERSION] --data-dir D [--source PATH_OR_ARCHIVE]
  imagesets publish NAME[/CONFIG][:VERSION] --data-dir D --to URL
  imagesets list [URL] [--data-dir D]
  imagesets fetch URL NAME[/CONFIG][:VERSION] [--cache-dir C] [--verify]

Flags take either spelling, `--data-dir` or TFDS's `--data_dir`. Errors print one line
(`imagesets: error: ...`), never a traceback (`-v` shows it), and exit with the status of
their kind, the same in every subcommand (`exit_status`): 1 the answer is no, 2 usage,
3 not there, 4 refused or failed. Only `build` loads TensorFlow; every other command, and
every error the command line can find, answers without it (but a missing version of one
of our own builders, whose answer names the versions its code builds).
"""

import argparse
import datetime
import difflib
import json
import logging
import os
import pathlib
import re
import sys
import time

from imagesets import constants
from imagesets.annotations import formats  # (no TensorFlow)
from imagesets import startup
from imagesets.cli import exit_status


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


def _examples(splits: dict[str, int]) -> str:
  return " ".join(f"{split}={count}" for split, count in splits.items())


UsageError = exit_status.UsageError


class NotThereError(FileNotFoundError):
  """A folder or file the command line names that is not there: the message is all the
  user needs (one line, exit_status.NOT_FOUND)."""


def _proportions(text: str) -> dict[str, float]:
  from imagesets.building import splits  # no TensorFlow

  try:
    pairs = [item.split("=") for item in text.split(",")]
    return splits.validate({name.strip(): float(value) for name, value in pairs})
  except ValueError as exc:
    detail = "" if "must" not in str(exc) else f" ({exc})"
    raise argparse.ArgumentTypeError(
        f"{text!r}: expected SPLIT=FRACTION,... summing to 1, e.g. "
        f"train=0.8,validation=0.1,test=0.1{detail}") from None


def _positive(text: str) -> int:
  value = int(text)
  if value < 0:
    raise argparse.ArgumentTypeError(f"{text}: must be 0 (off) or a positive number of pixels")
  return value


def _version(text: str) -> str:
  if not re.fullmatch(constants.VERSION_PATTERN, text):
    raise argparse.ArgumentTypeError(f"{text!r}: a version is X.Y.Z, e.g. 1.0.0")
  return text


def _check_name_and_version(name: str, version: str) -> None:
  """`build`'s --name and --version as the build would refuse them, before TensorFlow loads
  (a name taken by a registered TFDS builder is refused by the build)."""
  if not re.fullmatch(constants.DATASET_NAME_PATTERN, name):
    fixed = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_")
    fix = (f"did you mean --name {fixed}?"
           if re.fullmatch(constants.DATASET_NAME_PATTERN, fixed)
           else "e.g. --name pets or --name factory_parts")
    raise UsageError(f"dataset name {name!r}: use lower case letters, digits and _, starting "
                     f"with a letter ({fix})")
  if not re.fullmatch(constants.VERSION_PATTERN, version):
    parts = version.strip().lstrip("vV").split(".")
    fix = "e.g. --version 1.0.0"
    if 1 <= len(parts) <= 3 and all(part.isdigit() for part in parts):
      fix = "did you mean --version " + ".".join(
          str(int(part)) for part in parts + ["0"] * (3 - len(parts))) + "?"
    raise UsageError(f"version {version!r}: expected X.Y.Z, three numbers ({fix})")


def _beam_options(text: str | None):
  if not text:
    return None
  from apache_beam.options import pipeline_options  # only Beam builds need Beam
  return pipeline_options.PipelineOptions([f"--{flag}" for flag in text.split(",")])


def _start_tensorflow(load: bool = True) -> None:
  """Loads TensorFlow and probes the devices quietly (unless not `load`), and makes our
  dataset names known to TFDS, for the commands that need them (see imagesets/__init__)."""
  if load:
    startup.load_tensorflow()
    startup.probe_devices()
  import imagesets  # pylint: disable=import-outside-toplevel
  imagesets.register_with_tfds()


def _build_loads_tensorflow(args) -> bool:
  """Whether a build uses TensorFlow: one that reads or writes a bucket (its file system)
  or runs on Beam (TFDS's writer). A local build writes its shards without it
  (`prepared_records.write_examples`): 1-2 s less, and no device probe."""
  return bool(args.beam_pipeline_options) or any(
      "://" in str(path) for path in (args.path, constants.data_dir(args.data_dir)))


def _load_hint(name: str, version: str, data_dir: str, file_format: str) -> list[str]:
  spec = f"{name}:{version}"
  if file_format == "array_record":
    # tfds.load / as_dataset raise NotImplementedError on ArrayRecord builds.
    return [f"read it with: tfds.data_source(\"{spec}\", split=\"train\", data_dir=\"{data_dir}\")",
            f"or train with: imagesets.classification_train(\"{spec}\", data_dir=\"{data_dir}\", "
            "batch_size=64)"]
  return [f"load it with: tfds.load(\"{spec}\", split=\"train\", data_dir=\"{data_dir}\")"]


def cmd_build(args) -> int:
  # Everything the command line can check is checked before TensorFlow loads or
  # anything is printed or written (argparse has checked the split proportions).
  _check_name_and_version(args.name, args.version)
  if args.annotations is not None:
    return _build_annotated(args)
  if args.format or args.on_bad_box:
    raise UsageError("--format and --on-bad-box are options of a build from annotations: "
                     "give the annotation file with --annotations FILE")
  if "://" not in str(args.path) and not os.path.exists(os.path.expanduser(args.path)):
    raise NotThereError(f"{args.path}: no such folder (expected PATH/<class>/<image files>)")
  if "://" not in str(args.path) and not os.path.isdir(os.path.expanduser(args.path)):
    raise UsageError(f"{args.path}: not a folder (give the folder that holds one folder of "
                     "images per class: PATH/<class>/<image files>)")
  _start_tensorflow(load=_build_loads_tensorflow(args))
  from imagesets.building import class_folders_builder
  from imagesets.class_folders import named_build

  options = class_folders_builder.ClassFoldersConfig(
      name=args.name, split_proportions=args.splits, seed=args.seed,
      skip_bad_files=args.skip_bad_files, image_size=args.image_size,
      leakage=args.leakage or "", shorter_side=args.shorter_side,
      split_key=args.split_key or "")
  data_dir = constants.data_dir(args.data_dir)
  about = named_build.read_about(args.path, description=args.description,
                                 citation=args.citation, homepage=args.homepage)
  builder = named_build.build(
      args.path, args.name, version=args.version, data_dir=data_dir, options=options,
      about=about, file_format=args.file_format,
      beam_options=_beam_options(args.beam_pipeline_options), log=print, versioned=True,
      from_version=_from_version(args))
  _say_built(builder, data_dir, args.file_format)
  return exit_status.OK


def _from_version(args) -> str | None:
  """What a build builds on (`incremental.base_for`): none (--full), --from's version, or the
  latest below its own."""
  from imagesets.building import incremental
  return incremental.FULL if args.full else args.from_version or incremental.LATEST


# Options of a class-folder build that a build from annotations does not take (yet).
_CLASS_FOLDER_ONLY = {"leakage": "--leakage", "split_key": "--split-key"}


def _build_annotated(args) -> int:
  given = [flag for field, flag in _CLASS_FOLDER_ONLY.items() if getattr(args, field)]
  if given or args.shorter_side:
    raise UsageError(f"{', '.join(given) or '--shorter-side'}: not an option of a build from "
                     "annotations (its splits are by content; duplicates and leakage are "
                     "named, never dropped)")
  for path, what in ((args.path, "images folder"), (args.annotations, "annotations")):
    if "://" in str(path):
      raise UsageError(f"{path}: a build from annotations reads local folders (copy the "
                       "images and annotations here first)")
    if not os.path.exists(os.path.expanduser(path)):
      thing = "folder" if what == "images folder" else "file or folder"
      raise NotThereError(f"{path}: no such {thing} (the {what})")
  if not os.path.isdir(os.path.expanduser(args.path)):
    raise UsageError(f"{args.path}: not a folder (give the folder that holds the images)")
  _start_tensorflow(load=_build_loads_tensorflow(args))
  from imagesets.annotated import annotated_build
  from imagesets.building import annotated_builder
  from imagesets.class_folders import named_build

  options = annotated_builder.AnnotatedConfig(
      name=args.name, format=args.format or "", on_bad_box=args.on_bad_box or "error",
      split_proportions=args.splits, seed=args.seed, skip_bad_files=args.skip_bad_files,
      image_size=args.image_size)
  data_dir = constants.data_dir(args.data_dir)
  about = named_build.read_about(args.path, description=args.description,
                                 citation=args.citation, homepage=args.homepage)
  builder = annotated_build.build(
      args.path, args.annotations, args.name, version=args.version, data_dir=data_dir,
      options=options, about=about, file_format=args.file_format,
      beam_options=_beam_options(args.beam_pipeline_options), log=print,
      from_version=_from_version(args))
  metadata, lines = builder.info.metadata, []
  if metadata.get("task") == "detection":
    lines.append(f"  {sum(metadata['num_objects_per_class'].values())} boxes, "
                 f"{metadata['num_negatives']} image(s) without any, at most "
                 f"{metadata['max_objects_per_image']} in one image")
  for what, key in (("clipped or left out (--on-bad-box)", "fixed_boxes"),
                    ("not in the annotations, not built", "unlisted_images")):
    named = metadata.get(key) or []
    if named:
      lines.append(f"  {len(named)} {'box(es)' if key == 'fixed_boxes' else 'image(s)'} "
                   f"{what}: {named_build.first_ten(named)}")
  _say_built(builder, data_dir, args.file_format, lines)
  return exit_status.OK


def _say_built(builder, data_dir: str, file_format: str, lines: list[str] = ()) -> None:
  """The closing lines of a build: counts, skipped and re-encoded files, duplicates,
  quality findings, the builder's own `lines`, how to load it."""
  from imagesets.class_folders import named_build
  from imagesets.analysis import duplicates, image_quality
  from imagesets.reports import report_page

  info = builder.info
  examples = {split: s.num_examples for split, s in info.splits.items()}
  counts = _examples(examples)
  converted = info.metadata.get("num_converted_files", 0)
  skipped = info.metadata.get("skipped_files", {})
  version_dir = pathlib.Path(data_dir) / info.name / str(info.version)
  found = duplicates.stored_summary(version_dir, examples)
  found = f"; {found} ({duplicates.REPORT_FILE})" if found else ""  # (none: --leakage off)
  findings = image_quality.read_stored(version_dir)
  if findings is not None:
    found += f"; {image_quality.summary(findings)} ({image_quality.QUALITY_FILE})"
  print(f"{info.name}:{info.version} in {data_dir}: {counts} "
        f"({len(skipped)} skipped, {converted} re-encoded: see its metadata.json){found}")
  for line in [*named_build.skipped_lines(skipped), *lines]:
    print(line)
  page = version_dir / report_page.PAGE_FILE   # (none with --leakage off)
  if page.exists():
    print(f"its page: {page} (open it in a browser)")
  for line in _load_hint(info.name, str(info.version), data_dir, file_format):
    print(line)


def cmd_verify(args) -> int:
  from imagesets.storage import versions as versions_lib

  data_dir = pathlib.Path(constants.data_dir(args.data_dir))
  ref = versions_lib.resolve_local(versions_lib.Ref.parse(args.spec), data_dir)
  source = args.source or _recorded_source(data_dir / ref.folder)
  for path, what in ((args.source, "--source"), (args.annotations, "--annotations")):
    if path is not None and not os.path.exists(os.path.expanduser(path)):
      raise NotThereError(f"{what} {path}: no such file or folder")
  from imagesets.analysis import duplicates  # (no TensorFlow)
  from imagesets.verifying import round_trip

  report = round_trip.verify(data_dir / ref.folder, source, args.annotations)
  print(f"{ref}:")
  print(duplicates.printable(f"  source: {source}")
        + ("" if args.source else " (the folder its build recorded)"))
  print("\n".join(report.lines()))
  print("OK: everything matches" if report.ok else "FAILED: see the mismatches above")
  return exit_status.OK if report.ok else exit_status.ANSWER_NO


def _recorded_source(version_dir: pathlib.Path) -> str:
  """The folder a version was built from, as its metadata records it (`verify` without
  --source)."""
  try:
    recorded = json.loads((version_dir / "metadata.json").read_text()).get("source")
  except (OSError, ValueError, AttributeError):
    recorded = None
  if not isinstance(recorded, str) or not recorded:
    raise UsageError(f"{version_dir} records no source folder in its metadata.json: give "
                     "--source PATH_OR_ARCHIVE (the folder or archive it was built from)")
  from imagesets.analysis import duplicates  # (no TensorFlow)
  shown = duplicates.printable(recorded)   # (what a metadata.json says is shown escaped)
  if "://" in recorded:
    raise UsageError(f"{shown}: its build recorded where it downloaded from, not a folder "
                     "here: give --source PATH_OR_ARCHIVE (the archive it was built from)")
  if not os.path.exists(recorded):
    raise NotThereError(f"{shown}: the folder its build recorded is not there (moved or "
                        "deleted?): give --source PATH_OR_ARCHIVE")
  return recorded


def cmd_duplicates(args) -> int:
  from imagesets.reading import sources
  from imagesets.analysis import duplicates
  from imagesets.reports import version_examples

  data_dir = constants.data_dir(args.data_dir)
  version = sources.open_version(args.spec, data_dir)
  counts = {name: split.num_examples for name, split in version.builder.info.splits.items()}
  remote = sources.is_bucket_url(data_dir)  # (read through the local cache: name the bucket)
  path = version_examples.folder(version) / duplicates.REPORT_FILE
  stored = None if args.recompute else duplicates.read_stored(
      path, counts, source=f"{data_dir} {args.spec} {duplicates.REPORT_FILE}" if remote else None,
      spec=duplicates.printable(args.spec) + (f" --data-dir {data_dir}" if remote else ""))
  origin = " (report stored by the publisher)" if stored is not None and remote else ""
  if stored is None:  # built before duplicates were recorded, or by another tool
    images = version_examples.fingerprints(version)
    stored = (duplicates.find([m for m, _ in images], [f for _, f in images]), [], len(images))
  groups, dropped, num_images = stored
  failed = exit_status.ANSWER_NO if any(
      {"leakage": g.cross_split, "conflict": g.label_conflict, "any": True}.get(
          args.fail_on, False) for g in groups) else exit_status.OK
  if args.json:
    print(json.dumps(duplicates.to_json(groups, num_images, dropped), indent=1))
    return failed
  print(f"{version.builder.info.full_name}: "
        + duplicates.summary(groups, num_images, dropped) + origin)
  for group in groups:
    flags = [f for f, on in (("LEAK", group.cross_split),
                             ("LABEL CONFLICT", group.label_conflict)) if on]
    print(f"{group.kind}{' (' + ', '.join(flags) + ')' if flags else ''}:")
    for member in group.members:
      print(duplicates.printable(f"  {member.split}/{member.file_name} [{member.label}]"))
    for same in group.same_pixels():
      print(f"  same pixels: {same}")
  for member in dropped:
    print(duplicates.printable(
        f"dropped by the build: {member.split}/{member.file_name} [{member.label}]"))
  return failed


def cmd_diff(args) -> int:
  try:
    from imagesets.reading import sources
    from imagesets.reports import version_diff, version_examples

    data_dir = constants.data_dir(args.data_dir)
    sides = []
    opened = [sources.open_named(text, data_dir) for text in (args.old, args.new)]  # (then read)
    for source in opened:
      sides.append((source.builder.info.full_name, [
          version_diff.Entry.of(e.split, e.file_name, e.label, e.image)
          for e in version_examples.every_example(source, "reading")]))
    result = version_diff.diff(sides[0][1], sides[1][1])
  except Exception as exc:  # pylint: disable=broad-except
    if args.verbose or startup.verbose():
      raise
    print(f"imagesets: error: {str(exc).strip() or type(exc).__name__}", file=sys.stderr)
    return _status(exc)
  if args.json:
    print(json.dumps(result.to_json(), indent=1))
  else:
    print("\n".join(version_diff.summary(result, sides[0][0], sides[1][0], show=args.show)))
  return exit_status.OK if result.same else exit_status.ANSWER_NO


def cmd_report(args) -> int:
  from imagesets.reading import sources
  from imagesets.reports import version_report

  data_dir = constants.data_dir(args.data_dir)
  opened = sources.open_named(args.spec, data_dir)
  against = sources.open_named(args.against, data_dir) if args.against else None
  info = opened.builder.info
  out = args.out or (f"{info.name}-{info.version}"
                     + (f"-vs-{against.builder.info.version}" if against else "") + ".html")
  if os.path.isdir(out):
    out = os.path.join(out, f"{info.name}-{info.version}.html")
  if not os.path.isdir(os.path.dirname(os.path.abspath(out))):
    raise NotThereError(f"--out {out}: no such folder {os.path.dirname(os.path.abspath(out))}")
  started = time.perf_counter()
  size = version_report.write(
      version_report.content(opened, against=against, recompute=args.recompute), out)
  print(f"{out}: {size / 2**20:.1f} MiB, made in {time.perf_counter() - started:.1f} s "
        f"(open it in a browser: file://{os.path.abspath(out)})")
  return exit_status.OK


def cmd_publish(args) -> int:
  from imagesets.publishing import publish as publish_lib

  publish_lib.publish(args.spec, constants.data_dir(args.data_dir), args.to,
                      progress=not args.quiet, log=print)
  return exit_status.OK


def _list_local(data_dir: str) -> int:
  from imagesets.publishing import listing as listing_lib

  built = listing_lib.list_local(data_dir)
  if not built:
    print(f"no prepared datasets in {data_dir}")
    return exit_status.OK
  rows = [["DATASET", "CONFIG", "VERSION", "SIZE", "EXAMPLES", "BUILT", "BY"]]
  for item in built:
    rows.append([item.ref.name, item.ref.config or "-", item.ref.version, _size(item.num_bytes),
                 _examples(item.splits), _when(item.built_at),
                 "imagesets" if item.ours else "other tool"])
  print(_table(rows))
  return exit_status.OK


def _missing_place(message: str) -> int:
  """A folder or bucket prefix that does not exist: one line."""
  print(f"imagesets: error: {message}", file=sys.stderr)
  return exit_status.NOT_FOUND


def cmd_list(args) -> int:
  from imagesets.publishing import listing as listing_lib

  if args.url is None:
    data_dir = constants.data_dir(args.data_dir)
    # (The default data dir before a first build is no error: nothing is prepared yet.)
    gone = constants.data_dir(args.data_dir) != constants.data_dir(None) and listing_lib.missing(
        data_dir, f"build into it: imagesets build PATH --name NAME --data-dir {data_dir}")
    return _missing_place(gone) if gone else _list_local(data_dir)
  if listing_lib.is_local_data_dir(args.url):  # a folder of local builds, not a bucket
    return _list_local(args.url)
  published, unfinished = listing_lib.list_published(args.url)
  gone = not published and not unfinished and listing_lib.missing(
      args.url, f"publish into it: imagesets publish NAME:VERSION --data-dir DATA_DIR "
      f"--to {args.url}")
  if gone:
    return _missing_place(gone)
  from imagesets.analysis.terminal_text import printable

  # (names, times and reasons are the bucket's: shown escaped, never driving the terminal)
  if not published:
    print(f"no published datasets in {args.url}")
  else:
    print(_table([[printable(cell) for cell in row] for row in _published_rows(published)]))
  for line in _published_notes(published, unfinished):
    print(printable(line))
  return exit_status.OK


def _published_rows(published) -> list[list[str]]:
  rows = [["DATASET", "CONFIG", "VERSION", "SIZE", "EXAMPLES", "PUBLISHED"]]
  for item in published:
    manifest = item.manifest
    rows.append([item.ref.name, item.ref.config or "-", item.ref.version,
                 _size(manifest.num_bytes) if manifest else "-",
                 _examples(manifest.splits) if manifest else "-",
                 _when(manifest.published_at) if manifest
                 else "damaged (see below)" if item.damage else "not by imagesets"])
  return rows


def _published_notes(published, unfinished) -> list[str]:
  """The lines below the table of `list BUCKET`: the versions it cannot use, and why."""
  return [*(f"(damaged, not usable: {item.ref}: {item.damage}; to repair it, delete its "
            "folder and publish it again)" for item in published if item.damage),
          *(f"(unfinished upload, not published: {ref}; re-run publish to complete it)"
            for ref in unfinished)]


def cmd_fetch(args) -> int:
  from imagesets.storage import fetch as fetch_lib

  data_dir = fetch_lib.fetch(args.url, args.spec, cache_dir=args.cache_dir, verify=args.verify,
                             progress=not args.quiet,
                             log=lambda line: print(line, file=sys.stderr))
  print(data_dir)
  return exit_status.OK


# ----------------------------------------------------------------- argument parsing

class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
  """Shows each flag in one spelling (`--data-dir`; `--data_dir` is accepted too)."""

  def _format_action_invocation(self, action):
    shown = {}
    for name in action.option_strings:
      shown.setdefault(name.replace("_", "-"), name)
    if len(shown) < len(action.option_strings):
      action = argparse.Action(list(shown.values()), action.dest, nargs=action.nargs,
                               metavar=action.metavar, choices=action.choices)
    return super()._format_action_invocation(action)


class _Deprecated(argparse.Action):
  """An old option kept with its old meaning (its builds stay re-runnable), with one line
  naming the new one."""

  def __init__(self, *args, new: str, **kwargs):
    super().__init__(*args, **kwargs)
    self.new = new

  def __call__(self, parser, namespace, values, option_string=None):
    print(f"imagesets: {option_string} {values} is deprecated (a shorter side of at least "
          f"{values}, in libjpeg's fast steps); {self.new} {values} stores exactly {values}, "
          "which is another dataset", file=sys.stderr)
    setattr(namespace, self.dest, values)


class Parser(argparse.ArgumentParser):
  """argparse with both flag spellings (--data-dir / --data_dir), "did you mean" for
  unknown flags, and the failing subcommand's usage only."""

  def __init__(self, *args, **kwargs):
    kwargs.setdefault("formatter_class", _HelpFormatter)
    super().__init__(*args, allow_abbrev=False, **kwargs)

  def add_argument(self, *names, **kwargs):
    spellings = list(names)
    for name in names:
      if name.startswith("--") and len(name) > 3:
        other = "--" + (name[2:].replace("-", "_") if "-" in name[2:]
                        else name[2:].replace("_", "-"))
        if other not in spellings:
          spellings.append(other)
    return super().add_argument(*spellings, **kwargs)

  def _closest(self, word: str) -> tuple[str, argparse.Action] | None:
    """The shown flag (documented spelling, `--data-dir`) closest to a mistyped one."""
    shown = {}
    for action in self._actions:
      if action.help != argparse.SUPPRESS:
        for name in action.option_strings:
          shown.setdefault(name.replace("_", "-") if name.startswith("--") else name, action)
    word = word.split("=")[0]
    close = difflib.get_close_matches(word.replace("_", "-") if word.startswith("--") else word,
                                      list(shown), n=1, cutoff=0.6)
    return (close[0], shown[close[0]]) if close else None

  def suggest(self, word: str) -> str:
    """' (did you mean --x?)' for a mistyped flag, or ''."""
    close = self._closest(word)
    return f" (did you mean {close[0]}?)" if close else ""

  def check_flags(self, argv: list[str]) -> None:
    """A usage error naming the first flag this command does not know, and the flag meant,
    before argparse would report something else first (`--too URL`: a missing --to)."""
    known = {name: action for action in self._actions for name in action.option_strings}
    value_next = False
    for i, word in enumerate(argv):
      if word == "--":
        return
      if value_next or " " in word:  # (a flag's value, such as a description "-- a --")
        value_next = False
        continue
      if word in known:
        value_next = known[word].nargs != 0
      elif word.startswith("--") and word.split("=")[0] not in known:
        close = self._closest(word)
        shown = [word]
        if (close and close[1].nargs != 0 and "=" not in word and i + 1 < len(argv)
            and not argv[i + 1].startswith("-")):
          shown.append(argv[i + 1])  # the value meant for the flag meant
        self.error(f"unrecognized argument(s): {' '.join(shown)}{self.suggest(word)}")


def _subparsers(top: argparse.ArgumentParser) -> dict[str, Parser]:
  return next(action.choices for action in top._actions  # pylint: disable=protected-access
              if isinstance(action, argparse._SubParsersAction))  # pylint: disable=protected-access


def parser() -> argparse.ArgumentParser:
  top = Parser(
      prog="imagesets", description="Build image folders as TFDS datasets, publish them to a "
      "team bucket and train from it. URLs: s3://BUCKET/PREFIX, gs://BUCKET/PREFIX or a "
      "local path. Credentials come from each cloud's standard environment and config files. "
      "Every flag also takes TFDS's spelling (--data_dir for --data-dir).",
      epilog="exit status, the same in every command: 0 done (yes), 1 the answer is no "
      "(verify: a mismatch; diff: a difference; duplicates --fail-on: a group), 2 usage "
      "error, 3 not there (a dataset, version, folder, file or bucket prefix), 4 refused "
      "or failed, 130 interrupted")
  top.add_argument("-v", "--verbose", action="store_true",
                   help="show TensorFlow's start-up and device logs, and tracebacks")
  commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=Parser)

  p = commands.add_parser(
      "build", help="build a class-per-folder tree, or images with their annotations, as "
      "dataset NAME:VERSION",
      description="Builds PATH/<class>/**/<image> (local or gs://, s3://), or the images of "
      "PATH with a labeling tool's annotations (--annotations), as a TFDS dataset of its own "
      "name: validated, split by a seeded hash of each photo's content, byte-reproducible.",
      epilog="example:\n  imagesets build ~/photos/pets --name pets --version 1.0.0\n"
      "  imagesets build ~/parts/images --name parts --annotations ~/parts/instances.json\n"
      "  python -c 'import os, tensorflow_datasets as tfds; print(tfds.load(\"pets:1.0.0\", "
      "split=\"train\", data_dir=os.path.expanduser(\"~/tensorflow_datasets\")))'\n\n"
      "Card fields may also come from PATH/imagesets.toml (description, citation, "
      "homepage).\nRebuilding NAME:VERSION from the same content is a no-op; from other "
      "content it is refused, saying what changed.\nA new version is built on the latest "
      "version below it in the data dir: photos unchanged since then keep their records and "
      "shards; --full builds every photo again.")
  p.add_argument("path", metavar="PATH", help="folder with one sub-folder of images per "
                 "class; with --annotations, the folder of the images")
  p.add_argument("--annotations", metavar="FILE_OR_FOLDER",
                 help="build from a labeling tool's export instead of class folders: a COCO "
                 "JSON, a folder of VOC XML, a YOLO labels folder (class names in data.yaml, "
                 "classes.txt or obj.names), or a CSV/JSONL of file_name and label(s); see "
                 "docs/annotations.md")
  p.add_argument("--format", choices=formats.FORMATS,
                 help="the annotations' format (default: detected)")
  p.add_argument("--on-bad-box", choices=["error", "clip", "skip"], default=None,
                 help="boxes outside their image, empty or not numbers: error (default: "
                 "stop, naming each), clip (clip the ones reaching outside, stop on the "
                 "rest), skip (clip, and leave out the rest); clipped and left-out boxes "
                 "are listed in the metadata")
  p.add_argument("--name", required=True, help="dataset name: lower case, digits, _")
  p.add_argument("--version", default="1.0.0", help="X.Y.Z (default: %(default)s)")
  p.add_argument("--data-dir", default=constants.DEFAULT_DATA_DIR,
                 help="TFDS data dir to build into (default: %(default)s)")
  p.add_argument("--splits", type=_proportions, default="train=0.8,validation=0.1,test=0.1",
                 metavar="SPLIT=FRACTION,...", help="split proportions (default: %(default)s)")
  p.add_argument("--seed", type=int, default=0, help="seed of the split hash (default: 0)")
  p.add_argument("--skip-bad-files", action="store_true",
                 help="leave bad files out (listed in the metadata) instead of stopping")
  p.add_argument("--image-size", type=_positive, default=constants.ORIGINAL_SIZE, metavar="S",
                 help="store images whose shorter side is larger than S resized to a shorter "
                 "side of exactly S (aspect ratio kept, JPEG quality 90), for training at "
                 "S x S; smaller images keep their bytes (default: 0, original bytes)")
  p.add_argument("--shorter-side", type=_positive, metavar="N", action=_Deprecated,
                 new="--image-size", default=constants.ORIGINAL_SIZE, help=argparse.SUPPRESS)
  p.add_argument("--file-format", default="tfrecord", choices=["tfrecord", "array_record"])
  p.add_argument("--leakage", choices=["warn", "error", "drop", "off"], default=None,
                 help="the same picture in two splits: warn (default: named in the closing "
                 "summary, the card and duplicates.json), error (stop), drop (keep the "
                 "earliest split's copy: train, validation, test), off (no duplicate check)")
  p.add_argument("--from", dest="from_version", metavar="X.Y.Z", type=_version,
                 help="build on this version in the data dir (default: the latest version "
                 "below --version)")
  p.add_argument("--full", action="store_true",
                 help="build every photo again instead of building on an earlier version")
  p.add_argument("--split-key", choices=["content", "path"], default=None,
                 help="what a photo's split is a hash of: content (default for new datasets:"
                 " renaming or relabelling a photo never moves it between splits) or path "
                 "(versions built before; a version built on one keeps its recipe)")
  p.add_argument("--description")
  p.add_argument("--citation", help="BibTeX")
  p.add_argument("--homepage")
  p.add_argument("--beam-pipeline-options", metavar="FLAG=VALUE,...",
                 help="run the per-file work on Apache Beam, e.g. "
                 "runner=DataflowRunner,project=P,region=R,temp_location=gs://B/tmp")
  p.set_defaults(run=cmd_build)

  p = commands.add_parser(
      "verify", help="check a prepared version against its source, file by file; exit 0 "
      "only when everything matches, 1 when something differs")
  p.add_argument("spec", metavar="NAME[/CONFIG][:VERSION]",
                 help="default config and latest prepared version if omitted")
  p.add_argument("--data-dir", default=constants.DEFAULT_DATA_DIR,
                 help="TFDS data dir holding the version (default: %(default)s)")
  p.add_argument("--source", metavar="PATH_OR_ARCHIVE",
                 help="the folder or archive (.tgz, .tar) it was built from (default: the "
                 "folder its build recorded in its metadata)")
  p.add_argument("--annotations", metavar="FILE_OR_FOLDER",
                 help="a build from annotations: the annotation file to check against "
                 "(default: the one it was built from, as its metadata records)")
  p.set_defaults(run=cmd_verify)

  p = commands.add_parser(
      "duplicates", help="exact and near-duplicate images of a version, across splits "
      "(leakage) and with other labels (label conflicts)",
      description="Reports the groups of duplicate images of a prepared or published version: "
      "exact (same size and pixels at a small decode) and near (re-encoded, resized, converted, "
      "cropped by a few "
      "percent). Reads the report stored by the build, or computes it from the records.")
  p.add_argument("spec", metavar="NAME[/CONFIG][:VERSION]")
  p.add_argument("--data-dir", default=constants.DEFAULT_DATA_DIR,
                 help="local TFDS data dir or bucket URL (default: %(default)s)")
  p.add_argument("--json", action="store_true", help="print the report as JSON")
  p.add_argument("--recompute", action="store_true",
                 help="recompute from the records even if the build stored a report")
  p.add_argument("--fail-on", choices=("leakage", "conflict", "any"),
                 help="exit 1 when a group crosses splits (leakage), carries two labels "
                 "(conflict) or exists at all (any): for a CI step")
  p.set_defaults(run=cmd_duplicates)

  p = commands.add_parser(
      "diff", help="what changed between two versions: added, removed, changed, relabelled, "
      "renamed, moved examples per split and class; exit 0 same, 1 different",
      description="Compares two versions example by example, matching by source file name "
      "(where the builder keeps one) and by content.",
      epilog="example:\n  imagesets diff pets:1.0.0 pets:1.1.0 --show 5\n"
      "  imagesets diff s3://team/tfds/pets:1.0.0 pets:1.1.0 --json")
  p.add_argument("old", metavar="OLD", help="NAME[/CONFIG]:VERSION, or DATA_DIR_OR_URL/NAME[/CONFIG]:VERSION")
  p.add_argument("new", metavar="NEW", help="as OLD")
  p.add_argument("--data-dir", default=constants.DEFAULT_DATA_DIR,
                 help="where OLD and NEW are, unless given as full paths or URLs "
                 "(default: %(default)s)")
  p.add_argument("--show", type=int, default=0, metavar="N",
                 help="list up to N file names per kind and split")
  p.add_argument("--json", action="store_true", help="print the differences as JSON")
  p.set_defaults(run=cmd_diff)

  p = commands.add_parser(
      "report", help="one self-contained HTML page of a version: counts, examples per class, "
      "duplicate groups, quality findings, and the changes since another version",
      description="Writes one HTML file (thumbnails inlined, no network) for a prepared or "
      "published version; builds write one beside their card (report.html).",
      epilog="example:\n  imagesets report pets:1.1.0 --against pets:1.0.0\n"
      "  imagesets report s3://team/tfds/pets:1.1.0 --out pets.html")
  p.add_argument("spec", metavar="NAME[/CONFIG]:VERSION",
                 help="as diff's OLD: in --data-dir, or DATA_DIR_OR_URL/NAME[/CONFIG]:VERSION")
  p.add_argument("--against", metavar="OLD", help="show what changed since this version")
  p.add_argument("--data-dir", default=constants.DEFAULT_DATA_DIR,
                 help="local TFDS data dir or bucket URL (default: %(default)s)")
  p.add_argument("--out", metavar="FILE",
                 help="where to write the page (default: NAME-VERSION[-vs-OLD].html here)")
  p.add_argument("--recompute", action="store_true",
                 help="fingerprint the images even if the build stored its reports")
  p.set_defaults(run=cmd_report)

  p = commands.add_parser("publish", help="upload a prepared version, verified, committed last")
  p.add_argument("spec", metavar="NAME[/CONFIG][:VERSION]",
                 help="default config and latest prepared version if omitted")
  p.add_argument("--data-dir", default=constants.DEFAULT_DATA_DIR,
                 help="local TFDS data_dir the version was built into (default: %(default)s)")
  p.add_argument("--to", required=True, metavar="URL", help="bucket data_dir to publish into")
  p.add_argument("--quiet", action="store_true", help="no progress bar")
  p.set_defaults(run=cmd_publish)

  p = commands.add_parser(
      "list", help="show the datasets published in a bucket, or prepared in a local data dir")
  p.add_argument("url", metavar="URL", nargs="?",
                 help="bucket (or folder) to list published versions of; without it, the "
                 "versions prepared in --data-dir")
  p.add_argument("--data-dir", default=constants.DEFAULT_DATA_DIR,
                 help="local TFDS data dir to list when no URL is given (default: %(default)s)")
  p.set_defaults(run=cmd_list)

  p = commands.add_parser("fetch", help="verified sync of a version into the local cache; "
                          "prints the data_dir to pass to tfds.load")
  p.add_argument("url", metavar="URL")
  p.add_argument("spec", metavar="NAME[/CONFIG][:VERSION]",
                 help="default config and latest published version if omitted (named on stderr)")
  p.add_argument("--cache-dir", default=None,
                 help=f"cache root (default: ${constants.CACHE_ENV} or "
                 f"{constants.DEFAULT_CACHE_DIR})")
  p.add_argument("--verify", action="store_true",
                 help="re-hash a cached copy and repair it if damaged")
  p.add_argument("--quiet", action="store_true", help="no progress bar")
  p.set_defaults(run=cmd_fetch)
  return top


def parse(argv=None) -> argparse.Namespace:
  """Parses the command line; usage errors exit 2 with the subcommand's usage only."""
  argv = sys.argv[1:] if argv is None else list(argv)
  verbose = any(a in ("-v", "--verbose") for a in argv)  # accepted after the command too
  argv = [a for a in argv if a not in ("-v", "--verbose")]
  top = parser()
  commands = _subparsers(top)
  word = next((a for a in argv if not a.startswith("-")), None)
  if word is not None and word not in commands:
    close = difflib.get_close_matches(word, list(commands), n=1, cutoff=0.5)
    top.error(f"unknown command {word!r}" + (f" (did you mean {close[0]!r}?)" if close else
                                             f"; commands: {', '.join(commands)}"))
  if word is not None:
    commands[word].check_flags(argv)
  args, extra = top.parse_known_args(argv)
  if extra:
    sub = commands[args.command]
    unknown = [a for a in extra if a.startswith("-")]
    hint = sub.suggest(unknown[0]) if unknown else ""
    sub.error(f"unrecognized argument(s): {' '.join(extra)}{hint}")
  args.verbose = verbose
  return args


def _status(exc: BaseException) -> int:
  """The exit status of a command stopped by `exc` (`exit_status`). The modules that
  define the error types are read from `sys.modules`, not imported: an error of theirs was
  raised by them, loaded (and nothing can fail to import here, in the error path)."""
  usage, not_there = [], [NotThereError]
  for module, usage_types, missing_types in (
      ("imagesets.storage.versions", ["SpecError"], ["DatasetNotPreparedError"]),
      ("imagesets.storage.bucket", ["URLError"], ["MissingBucketError"]),
      ("imagesets.building.incremental", [], ["BaseNotBuiltError"])):
    loaded = sys.modules.get(module)
    if loaded is not None:
      usage += [getattr(loaded, name) for name in usage_types]
      not_there += [getattr(loaded, name) for name in missing_types]
  return exit_status.of(exc, usage=tuple(usage), not_there=tuple(not_there))


def _one_line(exc: BaseException) -> str:
  return " ".join(str(exc).split()) or type(exc).__name__


def main(argv=None) -> int:
  args = parse(argv)
  # The clients log every retry with a traceback; our one-line error says it all.
  for name in ("gcsfs", "s3fs", "aiobotocore", "botocore", "google", "absl"):
    logging.getLogger(name).setLevel(logging.CRITICAL)
  try:
    status = args.run(args)
    sys.stdout.flush()  # here, not at exit: a reader that left is handled below
    return status
  except BrokenPipeError:
    # The reader of our output left (`imagesets diff OLD NEW | head`): stop quietly with
    # the status a writer killed by SIGPIPE has (coreutils'); stdout goes to /dev/null so
    # that flushing it at exit raises nothing more.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return exit_status.READER_LEFT
  except KeyboardInterrupt:
    print("imagesets: interrupted; nothing half-done is visible: re-run to resume",
          file=sys.stderr)
    return exit_status.INTERRUPTED
  except Exception as exc:  # pylint: disable=broad-except
    # Our errors (bad folder, files, version, bucket faults) carry the whole message (a
    # bad-file report lists one file a line); anything else is one line naming its type.
    # `-v` shows the traceback.
    if args.verbose or startup.verbose():
      raise
    if isinstance(exc, (UsageError, ValueError, FileNotFoundError, FileExistsError)) or (
        type(exc).__module__.startswith("imagesets.")):
      print(f"imagesets: error: {str(exc).strip() or type(exc).__name__}", file=sys.stderr)
    else:
      print(f"imagesets: error: {type(exc).__name__}: {_one_line(exc)} "
            "(run with -v for the traceback)", file=sys.stderr)
    return _status(exc)


if __name__ == "__main__":
  sys.exit(main())
