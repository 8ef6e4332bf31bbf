"""A version built on an earlier version of the same dataset: only what changed is made.

The base is a prepared version in the same data dir, built locally with the same options
(its `record_index` says what each shard holds; its metadata, each photo's SHA-256 prefix).
For each split of the new tree (the split recipe is the base's, so nothing moves):

* a record is kept when its photo is still in the tree with the same bytes, in the same
  split, and what the record says of it is unchanged (the builder's `Rule`): for class
  folders, its label keeps its id (class ids come from the sorted class folders: a new
  class sorting before an old one renumbers it, and its records are made again); for
  annotations, its entry says the same (`annotated_build.entry_digests`: class ids, boxes,
  flags, mask bytes);
* a base shard whose records are all kept becomes a shard of the new version byte for
  byte (a hard link, a copy where the file system has none); a shard with some kept records
  is rewritten in its place with exactly those records, their bytes copied, in their order;
  a shard with none is left out;
* every other photo (added, edited, relabelled) is made by the workers as in a full build,
  fingerprinted, and written in TFDS's hashed-key order into new shards after the kept
  ones, each about as large as the base split's average shard.

The result is an ordinary TFDS version folder, the same bytes for the same base and tree.
Its example order differs from a full build's of the same tree (kept shards first, in the
base's order, then the new ones): docs/incremental_versions.md.
"""

import dataclasses
import itertools
import json
import pathlib
from typing import Callable, Iterable, Iterator

from etils import epath
import tensorflow_datasets as tfds

import imagesets.tfds_internals as tfds_internals
from imagesets.building import class_folders_tree
from imagesets.storage import atomic_files
from imagesets.building import parallel_map
from imagesets.building import prepared_records
from imagesets.building import record_index
from imagesets.building import shard_hashes
from imagesets.analysis import duplicates
from imagesets.analysis import image_hashes

# The formats whose shards can be rewritten from their records (`_read_records`).
FORMATS = ("tfrecord", "array_record")
# A stored photo hash is a prefix of its SHA-256 (named_build's `content_files`).
HASH_CHARS = 16


LATEST, FULL = "latest", None  # `base_for(from_version=)`: the latest version below, or none

# How this imagesets makes a record of a photo and its options, recorded in each version's
# metadata (`RECORDS_KEY`): a base whose records were made otherwise is built on in full.
# Raise it when the same photo and options give another record. 2: a PNG with an EXIF
# orientation made upright before its conversion to RGB (1, or none recorded: kept sideways).
RECORDS, RECORDS_KEY = 2, "records_made_by"


class NotABase(ValueError):
  """A version that cannot be built on; the message says why and what to do."""


# What its record holds where `Rule.label_id` cannot say (the record is checked by name only).
UNCHECKED = object()


@dataclasses.dataclass(frozen=True)
class Rule:
  """How a builder's records say what they hold, for a version built on a base: `kept(key)`,
  a base record whose photo has the same bytes is this build's record of it; `label_id(key)`,
  the "label" each base record holds (a record read at a wrong place is an error; UNCHECKED:
  its name alone is checked); `label(key)`, its label as duplicates compare them."""

  kept: Callable[[str], bool]
  label_id: Callable[[str], object]
  label: Callable[[str], str | None]


def folder_rule(base: "Base", class_names: list[str]) -> Rule:
  """Class folders: a record is kept while its class folder keeps its id."""
  old_ids, new_ids = base.label_ids, {name: i for i, name in enumerate(class_names)}
  label_of = class_folders_tree.label_of
  return Rule(kept=lambda key: old_ids.get(label_of(key)) == new_ids.get(label_of(key)),
              label_id=lambda key: old_ids.get(label_of(key)), label=label_of)


@dataclasses.dataclass(frozen=True)
class Shard:
  name: str                                  # its file name in the base version
  records: list[tuple[str, int, image_hashes.Fingerprint | None]]  # (key, size, fingerprint)
  sha256: str                                # of its bytes, as its index says
  index_sha256: str = ""                     # of its index file's bytes, as read


@dataclasses.dataclass(frozen=True)
class Base:
  """What a new version needs of the version it is built on."""

  version_dir: pathlib.Path
  version: str
  class_names: list[str]
  files: dict[str, str]          # relative path -> SHA-256 prefix (every file of its tree)
  options: dict                  # the options that change the bytes (`content_options`)
  converted: dict[str, str]      # relative path -> why it was re-encoded
  splits: dict[str, list[Shard]]
  file_format: str = "tfrecord"   # one of FORMATS
  metadata: dict = dataclasses.field(default_factory=dict)  # its metadata.json (untrusted)

  @property
  def label_ids(self) -> dict[str, int]:
    return {name: i for i, name in enumerate(self.class_names)}

  @property
  def spec(self) -> str:
    return f"{self.version_dir.parent.name}:{self.version}"


class BaseNotBuiltError(FileNotFoundError):
  """The version a build was told to build on (`--from`) is not in the data dir."""


def versions_in(dataset_dir: pathlib.Path) -> list[str]:
  """The prepared versions in a dataset's folder, lowest first."""
  if not dataset_dir.is_dir():
    return []
  found = []
  for child in dataset_dir.iterdir():
    try:
      version = tfds.core.Version(child.name)
    except ValueError:
      continue
    if (child / "dataset_info.json").is_file():
      found.append(version)
  return [str(v) for v in sorted(found)]


def latest_before(dataset_dir: pathlib.Path, version: str) -> str | None:
  """The highest prepared version below `version`, or None."""
  lower = [v for v in versions_in(dataset_dir)
           if tfds.core.Version(v) < tfds.core.Version(version)]
  return lower[-1] if lower else None


def base_for(data_dir, name: str, version: str, from_version: str | None, why_full: str,
             log: Callable[[str], None]) -> Base | None:
  """The version NAME:VERSION is built on, or None for a full build: `from_version` FULL,
  the first version, a version already built (a rebuild), or a base that cannot be one
  (logged, saying why; `why_full`: the build's own reason for a full build, "" for none).
  `from_version`: LATEST (the highest version below) or an "X.Y.Z" in `data_dir`."""
  if from_version is FULL or (pathlib.Path(data_dir) / name / version / "dataset_info.json"
                              ).exists():
    return None
  dataset_dir = pathlib.Path(data_dir) / name
  if from_version == LATEST:
    from_version = latest_before(dataset_dir, version)
    if from_version is None:
      return None  # the first version
  elif from_version not in versions_in(dataset_dir):
    raise BaseNotBuiltError(f"{name}:{from_version} is not built in {data_dir} (built: "
                            f"{', '.join(versions_in(dataset_dir)) or 'none'}): name one "
                            "of those to build on, or build in full")
  why = why_full
  if not why:
    try:
      return load(dataset_dir / from_version)
    except NotABase as error:
      why = str(error)
  log(f"building {name}:{version} in full, not on {name}:{from_version}: {why}")
  return None


def load(version_dir: pathlib.Path) -> Base:
  """The base at `version_dir`; NotABase saying why it cannot be one. Its files are read
  like untrusted input: anything not as a build writes it makes it no base."""
  spec = f"{version_dir.parent.name}:{version_dir.name}"
  try:
    info = json.loads((version_dir / "dataset_info.json").read_text())
    metadata = json.loads((version_dir / "metadata.json").read_text())
  except (OSError, ValueError, RecursionError) as why:
    raise NotABase(f"{spec} is not a prepared version here ({why})") from None
  try:
    return _parsed(version_dir, spec, info, metadata)
  except (ValueError, TypeError, KeyError, AttributeError) as why:
    if isinstance(why, NotABase):
      raise
    raise NotABase(f"{spec}: its dataset_info.json or metadata.json is not as a build "
                   f"writes it ({type(why).__name__}: {why})") from None


def _parsed(version_dir, spec, info, metadata) -> Base:
  files, options = metadata.get("content_files"), metadata.get("content_options")
  if not (isinstance(files, dict) and isinstance(options, dict)):
    raise NotABase(f"{spec} records no file list (built before imagesets recorded one)")
  made_by = metadata.get(RECORDS_KEY, 1)
  if made_by != RECORDS:
    raise NotABase(f"{spec}'s records were made by an imagesets that makes some otherwise "
                   f"(records {made_by!r}, this one's {RECORDS}): its photos are made again")
  file_format = info.get("fileFormat", "tfrecord")
  if file_format not in FORMATS:
    raise NotABase(f"{spec} is stored as {file_format}; versions are built on "
                   f"{' or '.join(FORMATS)} only")
  class_names = metadata.get("class_names")
  converted = metadata.get("converted_files") or {}
  if not (isinstance(class_names, list) and all(isinstance(n, str) for n in class_names)
          and isinstance(converted, dict)):
    raise NotABase(f"{spec}: its metadata.json lists no class names")
  splits, listed = {}, {}   # listed: key -> the shard whose index lists it
  for split in info["splits"]:
    name = split["name"]
    lengths = [int(n) for n in split.get("shardLengths", [])]
    template = tfds.core.ShardedFileTemplate(
        data_dir=version_dir, template=split.get("filepathTemplate") or None,
        dataset_name=info["name"], split=name, filetype_suffix=file_format)
    shards = []
    for shard_name, length in zip(sorted(template.sharded_filenames(len(lengths))), lengths):
      try:
        index = record_index.read(version_dir, shard_name, name)
      except record_index.RecordIndexError as why:
        raise NotABase(f"{spec} has no usable record index ({why}); versions built before "
                       "imagesets wrote one (on Beam: before 2026-11-30), or into a bucket, "
                       "have none") from None
      if len(index.records) != length:
        raise NotABase(f"{spec}: the record index of {shard_name} lists "
                       f"{len(index.records)} records, dataset_info.json {length}")
      _list_once(spec, shard_name, index.records, listed)
      shards.append(Shard(shard_name, index.records, index.sha256, index.digest))
    splits[name] = shards
  return Base(version_dir, version_dir.name, class_names,
              {str(k): str(v) for k, v in files.items()}, options,
              {str(k): str(v) for k, v in converted.items()}, splits, file_format, metadata)


def _list_once(spec: str, shard_name: str, records, listed: dict[str, str]) -> None:
  """Adds the keys of a shard's index to `listed`; NotABase for a key listed before. A
  build writes each photo once: a key twice is an index that does not describe its shards
  (a row of a shard kept whole is not read, so a row renamed to another photo's key would
  keep that photo's record twice and make the renamed one again)."""
  for key, _, _ in records:
    if key in listed:
      raise NotABase(f"{spec}: its record index lists {key} twice ({listed[key]}, "
                     f"{shard_name}): not as a build writes it")
    listed[key] = shard_name


@dataclasses.dataclass
class SplitPlan:
  """What one split of the new version keeps of the base and what it makes."""

  split: str
  shards: list[tuple[Shard, list[int]]]   # base shards kept in part or whole: kept positions
  new: list[str]                          # relative paths the workers make
  target_bytes: int                       # about the size of each new shard
  layout: list[list] = dataclasses.field(default_factory=list)  # rows per shard written

  @property
  def kept(self) -> int:
    return sum(len(positions) for _, positions in self.shards)

  @property
  def linked(self) -> int:
    return sum(len(positions) == len(shard.records) for shard, positions in self.shards)


@dataclasses.dataclass
class Plan:
  base: Base
  splits: dict[str, SplitPlan]
  rule: Rule
  kept_checked: shard_hashes.Checked | None = None   # the kept shards' check (`_check_bytes`)

  def kept_images(self) -> list[tuple[duplicates.Member, image_hashes.Fingerprint]]:
    """(member, fingerprint) of every kept record that has a fingerprint."""
    return [(member, fingerprint) for plan in self.splits.values()
            for shard, positions in plan.shards
            for _, member, fingerprint in _kept_of(plan.split, shard.records, positions,
                                                   self.rule.label)]

  def kept_shard(self, split: str, position: int) -> Shard | None:
    """The base shard that is the new version's shard `position` of `split`, when it is
    kept whole (linked or copied, its index too: `record_index.write(same_as=)`); else
    None (a new or rewritten shard)."""
    shards = self.splits[split].shards
    if position >= len(shards):
      return None  # a new shard
    shard, positions = shards[position]
    return shard if len(positions) == len(shard.records) else None

  def kept_notes(self) -> dict[str, str]:
    """The base's re-encoding notes of the photos whose records are kept."""
    kept = {shard.records[p][0] for plan in self.splits.values()
            for shard, positions in plan.shards for p in positions}
    return {path: note for path, note in self.base.converted.items() if path in kept}

  def summary(self) -> str:
    """'kept 19,800 of 20,000 photos (30 of 32 shards as they are, 1 rewritten); 200 to make'"""
    kept = sum(p.kept for p in self.splits.values())
    old = sum(len(s.records) for shards in self.base.splits.values() for s in shards)
    linked = sum(p.linked for p in self.splits.values())
    rewritten = sum(len(p.shards) for p in self.splits.values()) - linked
    shards = sum(len(shards) for shards in self.base.splits.values())
    new = sum(len(p.new) for p in self.splits.values())
    return (f"built on {self.base.spec}: kept {kept:,} of its {old:,} photos ({linked} of its "
            f"{shards} shards as they are, {rewritten} rewritten); {new:,} to make")


def differing_options(base: Base, options: dict) -> list[str]:
  """'seed 0 -> 1' for each option that differs from the base's."""
  options = json.loads(json.dumps(options))  # (as stored: tuples become lists)
  return [f"{key} {base.options.get(key)!r} -> {options.get(key)!r}"
          for key in sorted(options.keys() | base.options.keys())
          if options.get(key) != base.options.get(key)]


def plan(base: Base, by_split: dict[str, list[str]], hashes: dict[str, str], rule: Rule,
         options: dict, fingerprints_needed: bool) -> Plan:
  """What to keep and what to make; NotABase when the base's options differ, its splits
  are not the new tree's, it lacks fingerprints the new build needs, or a shard to keep
  is not the bytes its index was written with."""
  differ = differing_options(base, options)
  if differ:
    raise NotABase(f"{base.spec} was built with other options ({', '.join(differ)})")
  if set(base.splits) != set(by_split):
    raise NotABase(f"{base.spec} has splits {sorted(base.splits)}, this build "
                   f"{sorted(by_split)}")
  kept = {}  # split -> [(shard, positions kept)]
  for split, paths in by_split.items():
    wanted = set(paths)
    kept[split] = []
    for shard in base.splits[split]:
      positions = []
      for position, (key, _, fingerprint) in enumerate(shard.records):
        if (key in wanted and base.files.get(key) == hashes[key][:HASH_CHARS]
            and rule.kept(key)):
          if fingerprints_needed and fingerprint is None:
            raise NotABase(f"{base.spec} was built with --leakage off: its photos have no "
                           "fingerprints to check the new ones against")
          positions.append(position)
      if positions:
        kept[split].append((shard, positions))
  # (checked before any photo is made: a bad base gives a full build)
  checked = _check_bytes(base.version_dir,
                         [shard for shards in kept.values() for shard, _ in shards])
  plans = {}
  for split, paths in by_split.items():
    kept_keys = set()
    for shard, positions in kept[split]:
      if len(positions) < len(shard.records):  # to rewrite: every row read and checked
        for _ in _read_records(base, shard, positions, rule):
          pass
      kept_keys.update(shard.records[p][0] for p in positions)
    shards = kept[split]
    old = base.splits[split]
    size = sum(r[1] for shard in old for r in shard.records)
    plans[split] = SplitPlan(split, shards, [p for p in paths if p not in kept_keys],
                             max(1, size // max(1, len(old))))
  return Plan(base, plans, rule, checked)


def writer(planned: Plan, split: str, rows: Callable[[], list[list]]):
  """`prepared_records.LocalSplit.writer` of `split` planned on a base: writes the kept and
  rewritten shards and the new records' shards, and sets the split plan's `layout`. `rows`:
  the new records' index rows (the build's `Generation.written`), once all are taken."""
  plan = planned.splits[split]

  def write(records: Iterable[tuple[int, bytes]], filename_template, file_format):
    file_format = tfds.core.FileFormat(file_format).value
    new = prepared_records.spill(filename_template.data_dir)  # (memory bounded)
    try:
      for _, record in records:
        new.add(record)
      return _write_all(new, filename_template, file_format)
    finally:
      new.discard()

  def _write_all(new, filename_template, file_format):
    new_rows = rows()
    if len(new_rows) != new.count:
      raise AssertionError(f"{plan.split}: {new.count} records made, {len(new_rows)} listed")
    counts = _new_shard_counts(new.count, new.size, plan.target_bytes)
    total = len(plan.shards) + len(counts)
    if not total:
      raise AssertionError("No examples were yielded.")
    path_of = lambda i: filename_template.sharded_filepath(shard_index=i, num_shards=total)
    lengths, layout = _write_kept(planned, split, path_of, file_format)
    start, made = 0, iter(new)
    for offset, count in enumerate(counts):
      _write(path_of(len(plan.shards) + offset), itertools.islice(made, count), file_format)
      lengths.append(count)
      layout.append(new_rows[start:start + count])
      start += count
    plan.layout = layout
    return tfds.core.SplitInfo(name=plan.split, shard_lengths=lengths,
                               num_bytes=sum(row[1] for rows_ in layout for row in rows_),
                               filename_template=filename_template)

  return write


def _write_kept(planned: Plan, split: str, path_of: Callable[[int], object],
                file_format: str) -> tuple[list[int], list[list[list]]]:
  """Writes the split's kept shards, each base shard kept whole as a link (a copy where the
  file system has none) and each kept in part rewritten, as shard `i` at `path_of(i)`;
  returns their lengths and index rows."""
  base, plan = planned.base, planned.splits[split]
  lengths, layout = [], []
  for index, (shard, positions) in enumerate(plan.shards):
    source = base.version_dir / shard.name
    if len(positions) == len(shard.records):  # (its bytes were checked by `plan`)
      atomic_files.link(source, path_of(index), exclusive=True)
    else:
      _write(path_of(index), _read_records(base, shard, positions, planned.rule), file_format)
    lengths.append(len(positions))
    layout.append([shard.records[p] for p in positions])  # ((key, size, fingerprint): read only)
  return lengths, layout


@dataclasses.dataclass(frozen=True)
class NewShardsConfig(tfds_internals.ShardConfig):
  """TFDS's ShardConfig for the new records of a split built on a base on Beam: it asks
  TFDS's Beam writer for as many shards as the local writer makes of them
  (`_new_shard_counts`: about `target_bytes` each), not the floor of a whole split's. That
  writer fills them by ranges of hashed keys, not by count, and leaves out an empty one:
  their lengths, and at times their number, differ from the local build's, as a full Beam
  build's shards differ from a full local build's (the records are the same)."""

  target_bytes: int = 1

  def get_number_shards(self, total_size, num_examples, uses_precise_sharding=True):
    return max(1, len(_new_shard_counts(num_examples, total_size, self.target_bytes)))


def shard_config_on_beam(planned: Plan, split: str) -> NewShardsConfig:
  """The shard config of TFDS's Beam writer for `split`'s new records."""
  return NewShardsConfig(target_bytes=planned.splits[split].target_bytes)


def joined_on_beam(planned: Plan, split: str, filename_template,
                   made: tfds.core.SplitInfo | None, file_format: str) -> tfds.core.SplitInfo:
  """`split` of a version built on a base on Beam, once its pipeline ran: the kept and
  rewritten shards (as the local writer writes them) first, then the shards TFDS's Beam
  writer made of the new records (`made`; None: none new), renamed to follow them."""
  plan = planned.splits[split]
  new = list(made.shard_lengths) if made is not None else []
  total = len(plan.shards) + len(new)
  path_of = lambda i, n=total: filename_template.sharded_filepath(shard_index=i, num_shards=n)
  if plan.shards:  # (a name "of <total>" is no name of Beam's "of <len(new)>" shards)
    for index in range(len(new)):
      made_path = epath.Path(path_of(index, len(new)))
      if epath.Path(f"{made_path}_index.json").exists():
        raise NotImplementedError(f"{made_path}: shards with index files")
      made_path.rename(path_of(len(plan.shards) + index))
  lengths, layout = _write_kept(planned, split, path_of, file_format)
  plan.layout = layout  # (the kept shards' rows; the workers index the new shards)
  return tfds.core.SplitInfo(
      name=split, shard_lengths=lengths + new,
      num_bytes=sum(row[1] for rows in layout for row in rows) + (made.num_bytes if made else 0),
      filename_template=filename_template)


def kept_images_on_workers(planned: Plan) -> Callable:
  """A function of a Beam pipeline giving the (key, member, fingerprint) of every kept
  record that has a fingerprint (as `Plan.kept_images`), read from the base's record index
  by the workers: the driver gives them one element a kept shard."""
  beam = tfds.core.lazy_imports.apache_beam
  shards = [(split, shard.name, shard.index_sha256,
             None if len(positions) == len(shard.records) else positions)
            for split, plan in planned.splits.items() for shard, positions in plan.shards]
  version_dir, label = str(planned.base.version_dir), planned.rule.label
  return lambda pipeline: (pipeline
                           | "Kept shards" >> beam.Create(shards)
                           | "Kept images" >> beam.FlatMap(_kept_images, version_dir, label))


def _kept_images(shard, version_dir: str, label: Callable[[str], str | None]):
  split, name, digest, positions = shard
  index = record_index.read(version_dir, name, split)
  if index.digest != digest:
    raise NotABase(f"{record_index.path_of(version_dir, name)} changed during the build")
  yield from _kept_of(split, index.records,
                      range(len(index.records)) if positions is None else positions, label)


def _kept_of(split: str, records, positions, label: Callable[[str], str | None]):
  """(key, member, fingerprint) of the records at `positions` that have a fingerprint."""
  for position in positions:
    key, _, fingerprint = records[position]
    if fingerprint is not None:
      yield key, duplicates.Member(split, key, label(key)), fingerprint


def _new_shard_counts(count: int, size: int, target: int) -> list[int]:
  """Records per new shard: about `target` bytes each, split by count as TFDS splits."""
  if not count:
    return []
  shards = min(count, max(1, round(size / target)))
  return [count * (i + 1) // shards - count * i // shards for i in range(shards)]


def _check_bytes(version_dir: pathlib.Path, shards: list[Shard]) -> shard_hashes.Checked:
  """The base's shards still have the bytes their indexes were written with (a changed
  byte of a record, of any size: the base is no base, and the build is a full one). Those
  unchanged since their build by `shard_hashes` are not read again; the others are hashed
  on a thread a core (hashlib lets go of the GIL). Returns what the new version records of
  them (`shard_hashes.save`)."""
  checked = shard_hashes.hashes(version_dir, [shard.name for shard in shards], _sha256s)
  for shard in shards:
    digest = checked.digests[shard.name]
    if digest != shard.sha256:
      why = (f"unreadable: {digest.strerror or digest}" if isinstance(digest, OSError)
             else "other bytes")
      raise NotABase(f"{version_dir / shard.name} is not the shard its record index "
                     f"describes ({why}): it changed after its build")
  return checked


def _sha256s(paths: list[pathlib.Path]) -> list[shard_hashes.Digest]:
  with parallel_map.executor(threads=True) as pool:
    return list(parallel_map.ordered_map(_sha256_or_why, paths, pool, chunk_size=1))


def _sha256_or_why(path: pathlib.Path) -> str | OSError:
  try:
    return record_index.sha256_of(path)
  except OSError as why:  # (a shard removed or unreadable: the base is no base)
    return why


def shard_records(path, file_format: str) -> Iterable[bytes]:
  """Every record of a shard of one of `FORMATS`, in order."""
  return (prepared_records.tfrecords(path) if file_format == "tfrecord"
          else record_index.array_record_reader(path).read_all())


def _read_records(base: Base, shard: Shard, positions: list[int], rule: Rule
                  ) -> Iterator[bytes]:
  """The records at `positions` of a base shard, each record of it checked against its
  index row as it is read: its size, the file name the row names, and the label id the
  base gave it (`rule.label_id`)."""
  path, wanted = base.version_dir / shard.name, set(positions)
  count = 0
  for position, record in enumerate(shard_records(path, base.file_format)):
    if position >= len(shard.records) or len(record) != shard.records[position][1]:
      raise NotABase(f"{path} does not hold the records its index lists")
    count += 1
    key = shard.records[position][0]
    name, label = record_index.example_fields(record)[:2]
    expected = rule.label_id(key)
    if name != key or (expected is not UNCHECKED and label != expected):
      raise NotABase(f"{path}: record {position} is {(name, label)}, its record index says "
                     f"{key}: the index does not describe the shard")
    if position in wanted:
      yield record
  if count != len(shard.records):
    raise NotABase(f"{path} does not hold the records its index lists")


def _write(path, records: Iterable[bytes], file_format: str) -> None:
  record_keys = prepared_records.write_examples(path, ((None, record) for record in records),
                                                file_format)
  if record_keys:  # (formats with an index; not ours today)
    raise NotImplementedError(f"{file_format}: shards with index files")
