"""Where versions live in a TFDS data_dir or a bucket, and how they are named.

Layout (the bucket URL is a TFDS data_dir; docs/publishing.md has the whole design):

  URL/<name>/.config/metadata.json                default config, for tfds.load('<name>')
  URL/<name>/<config>/<version>/<shards, ...>     the files of the prepared version
  URL/<name>/<config>/<version>/imagesets-manifest.json   size, sha256, md5 of each file
  URL/<name>/<config>/<version>/dataset_info.json
  URL/<name>/<config>/<version>/features.json     written last: the commit marker

A version is published when its `features.json` exists — the file without which TFDS
itself finds no version — and it is written only after every other object was uploaded
and verified. A published version is never changed.
"""

import dataclasses
import difflib
import functools
import json
import pathlib
import re
import shlex
from typing import Iterator

from imagesets import constants
from imagesets import registry
from imagesets import startup
from imagesets.storage import bucket as bucket_lib

MANIFEST = "imagesets-manifest.json"
# TFDS lists versions by dataset_info.json but loads one only if features.json exists too
# (read_only_builder), so writing dataset_info.json, then features.json, last of all keeps
# every unfinished upload invisible to stock TFDS as well as to us.
MARKER = "features.json"
DATASET_INFO = "dataset_info.json"
COMMIT_FILES = (DATASET_INFO, MARKER)  # uploaded in this order, after everything else
CONFIG_METADATA = ".config/metadata.json"
# More than a CONFIG_METADATA ever holds (TFDS writes a few short fields): a larger one in a
# bucket is refused unread.
MAX_METADATA_BYTES = 1 << 20
# Written first, with the stores' conditional write, by the one publish of a version that
# may upload it: it names the content (`publish._claim`); another build is refused.
CLAIM = ".imagesets-claim.json"

_SPEC = re.compile(r"^(?P<name>[a-z0-9_]+)(?:/(?P<config>[\w.-]+))?(?::(?P<version>\d+\.\d+\.\d+))?$")
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
# One part of a path named by a bucket (or a user's folder): ordinary characters, not
# empty, ".", ".." nor hidden (the cache's own files start with a dot). Every name read
# from a bucket is checked with it before it is joined onto a local folder.
_PART = re.compile(r"[A-Za-z0-9_+=@,-][A-Za-z0-9_.+=@,-]*")


def is_plain_part(part) -> bool:
  return isinstance(part, str) and len(part) <= 255 and bool(_PART.fullmatch(part))


class PublishError(RuntimeError):
  """Publishing, listing or fetching was refused or failed; the message says why."""


class SpecError(PublishError, ValueError):
  """A text that is not NAME[/CONFIG][:VERSION] (a command line's usage error)."""


class DatasetNotPreparedError(PublishError, FileNotFoundError):
  """A name, config or version that is not in a data dir or bucket; the message
  (`not_found`) says what is there and the command that builds or publishes it."""


@dataclasses.dataclass(frozen=True)
class Ref:
  """A dataset version: `name[/config][:version]`; config and version may be unknown."""

  name: str
  config: str | None = None
  version: str | None = None

  @classmethod
  def parse(cls, spec: str) -> "Ref":
    match = _SPEC.match(spec.strip())
    if not match:
      raise SpecError(f"{spec!r} is not NAME[/CONFIG][:VERSION] (e.g. flowers:1.0.0, "
                      "synthetic_images/tiny:1.0.0)")
    ref = cls(**match.groupdict())
    if ref.config_like_a_version:
      raise SpecError(f"{spec!r}: a config named like a version is refused (its folder "
                      f"{ref.name}/{ref.config} is where version {ref.config} of {ref.name} "
                      f"without a config lives); did you mean {ref.name}:{ref.config}?")
    try:
      return ref.checked(repr(spec))
    except PublishError as error:
      raise SpecError(f"{spec!r} is not NAME[/CONFIG][:VERSION]: its parts must be plain "
                      "folder names (no '..', no hidden or empty parts)") from error

  def checked(self, where: str) -> "Ref":
    """self if its name, config and version are plain folder names and its config is not
    named like a version (NAME/X.Y.Z is version X.Y.Z's folder of NAME without a config:
    fetching one would replace the other); else PublishError naming `where` (a bucket's
    metadata names the config: it must not reach a path join)."""
    for what, part in (("name", self.name), ("config", self.config), ("version", self.version)):
      if part is not None and not (is_plain_part(part)
                                   and (what != "version" or _VERSION.match(part))):
        raise PublishError(
            f"{where}: the {what} {part!r} is not a plain folder name (absolute, '..', empty "
            "or hidden parts): refused, nothing was written; if it came from a bucket, its "
            "metadata is damaged or forged, tell the publisher")
    if self.config_like_a_version:
      raise PublishError(
          f"{where}: the config {self.config!r} is named like a version ({self.name}/"
          f"{self.config} is where version {self.config} of {self.name} without a config "
          "lives): refused, nothing was written; if it came from a bucket, its metadata is "
          "damaged or forged, tell the publisher")
    return self

  @property
  def config_like_a_version(self) -> bool:
    """Whether its config is named X.Y.Z: refused (`checked`)."""
    return self.config is not None and bool(_VERSION.match(self.config))

  @property
  def folder(self) -> str:
    """Path of the version folder relative to a data_dir."""
    return "/".join(p for p in (self.name, self.config, self.version) if p)

  def __str__(self):
    text = f"{self.name}/{self.config}" if self.config else self.name
    return f"{text}:{self.version}" if self.version else text


def versions_in(names) -> list[str]:
  return sorted((n for n in names if _VERSION.match(n)),
                key=lambda v: tuple(int(x) for x in v.split(".")))


def sort_key(ref: Ref) -> tuple:
  return (ref.name, ref.config or "", tuple(int(x) for x in (ref.version or "0.0.0").split(".")))


def local_refs(data_dir) -> list[Ref]:
  """The complete prepared versions (dataset_info.json and features.json) in a local TFDS
  data_dir, sorted by name, config and version."""
  root = pathlib.Path(data_dir).expanduser()
  found = []
  for info_path in [*root.glob(f"*/*/{DATASET_INFO}"), *root.glob(f"*/*/*/{DATASET_INFO}")]:
    parts = info_path.parent.relative_to(root).parts
    ref = Ref(parts[0], parts[1] if len(parts) == 3 else None, parts[-1])
    if _VERSION.match(ref.version) and _plain(ref) and (info_path.parent / MARKER).exists():
      found.append(ref)
  return sorted(found, key=sort_key)


def published_refs(bucket: bucket_lib.Bucket, prefix: str = "") -> list[Ref]:
  """The committed versions (features.json written) in a bucket, under `prefix`, sorted."""
  return sorted((ref for ref, names in remote_refs(bucket.list_files(prefix)).items()
                 if MARKER in names and _plain(ref)), key=sort_key)


def _plain(ref: "Ref") -> bool:
  """Whether every part of a ref read from a listing is a plain name (one that may be
  shown on a terminal and joined to a path), its config not named like a version
  (`Ref.checked`)."""
  return (all(is_plain_part(part) for part in (ref.name, ref.config or "x", ref.version or "x"))
          and not ref.config_like_a_version)


def build_command(ref: Ref, data_dir, source: str | None = None,
                  imports: str | None = None) -> str:
  """The command that prepares `ref` in a local `data_dir`: `tfds build` for this package's
  builders (or a builder class of module `imports`), `imagesets build` (from `source`, the
  folder an earlier version was built from) for a folder dataset."""
  if imports or ref.name in registry.NAMES or _builder_facts(ref.name) is not None:
    config = f" --config {ref.config}" if ref.config else ""
    ours = imports or ("imagesets" if ref.name in registry.NAMES else None)
    return (f"tfds build {ref.name}{f' --imports {ours}' if ours else ''}{config} "
            f"--data_dir {shlex.quote(str(data_dir))}")
  return (f"imagesets build {shlex.quote(source) if source else 'PATH'} --name {ref.name} "
          f"--version {ref.version or '1.0.0'} --data-dir {shlex.quote(str(data_dir))}")


@functools.cache  # (`_unbuildable` and `build_command` both ask, for one answer)
def _builder_facts(name: str) -> tuple[str, tuple[str, ...]] | None:
  """(the version it builds, its configs) of a builder class registered with TFDS under
  `name` (this package's or TFDS's own catalog), None for another name (a folder dataset).
  Loads TFDS (and so TensorFlow): only for an answer to a dataset that is not there."""
  if not is_plain_part(name):
    return None
  try:
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
    if name in registry.NAMES:
      if startup.in_our_command():   # (our builders' modules load TensorFlow: quietly)
        startup.load_tensorflow()
      import imagesets  # pylint: disable=import-outside-toplevel
      imagesets.register_with_tfds()   # (our command registers only when it needs to)
    cls = tfds.builder_cls(name)
  except Exception:  # pylint: disable=broad-except  (not a registered builder)
    return None
  configs = tuple(config.name for config in getattr(cls, "BUILDER_CONFIGS", None) or ())
  return str(cls.VERSION), configs


def _unbuildable(ref: "Ref", imports: str | None) -> str | None:
  """Why no command builds `ref` (a version out of the pattern, a config or version the
  builder class does not make), naming what it does make; None when one does."""
  if ref.version and not re.fullmatch(constants.VERSION_PATTERN, ref.version):
    return f"{ref.version} is not a version X.Y.Z (three numbers, no leading zeros)"
  facts = None if imports else _builder_facts(ref.name)
  if facts is None:
    return None
  version, configs = facts
  if ref.config and configs and ref.config not in configs:
    meant = difflib.get_close_matches(ref.config, configs, n=1, cutoff=0) or configs
    return (f"{ref.name} has no config {ref.config} (its configs: {', '.join(configs)}; "
            f"did you mean {ref.name}/{meant[0]}?)")
  if ref.version and ref.version != version:
    return (f"this code builds {ref.name} {version}, not {ref.version}: install the "
            f"release that built {ref.version}, or fetch it from the bucket it was "
            f"published to (imagesets fetch BUCKET {ref})")
  return None


def _built_from(data_dir: pathlib.Path, refs: list[Ref]) -> str | None:
  """The source folder the newest of `refs` was built from by `imagesets build`, if any."""
  for ref in reversed(refs):
    try:
      metadata = json.loads((data_dir / ref.folder / "metadata.json").read_text())
    except (OSError, ValueError):
      continue
    if "content_fingerprint" in metadata and isinstance(metadata.get("source"), str):
      return metadata["source"]
  return None


def not_found(ref: Ref, data_dir=None, bucket: bucket_lib.Bucket | None = None,
              imports: str | None = None) -> str:
  """The one-line answer to a name, config or version that is not in a local `data_dir`
  (or, given `bucket`, not published in it): what is there (its versions of that name, or
  the names there with the closest one), and the command that builds or publishes it
  (`imports`: the module of the builder class that builds it, see `build_command`)."""
  if bucket is not None:
    # (a prefix with nothing under it, or a folder not made yet: nothing is published there)
    where, verb, exists = bucket.url, "published", True
    present = published_refs(bucket)
    fix = f"publish it: imagesets publish {ref} --data-dir DATA_DIR --to {where}"
  else:
    root = pathlib.Path(data_dir).expanduser()
    where, verb = str(data_dir), "prepared"
    remote = "://" in where  # (a URL's existence is not this function's to claim)
    exists = remote or root.is_dir()
    present = local_refs(root) if exists and not remote else []
    source = _built_from(root, [r for r in present if r.name == ref.name])
    fix = _unbuildable(ref, imports) or f"build it: {build_command(ref, where, source, imports)}"
  if not exists:
    if " it: " not in fix:
      return f"{where} does not exist; {fix}"
    action, command = fix.split(" it: ", 1)
    return f"{where} does not exist: {action} {ref} into it with: {command}"
  head = (f"{ref} is not {verb} {'at' if bucket else 'in'} {where}" if ref.version
          else f"no {verb} version of {ref} in {where}")
  same = [str(r) for r in present if r.name == ref.name]
  names = sorted({r.name for r in present})
  if same:
    there = f"{verb} there: {', '.join(same)}"
  elif names:
    there = f"datasets there: {', '.join(names[:20])}{', ...' if len(names) > 20 else ''}"
  else:
    there = f"nothing is {verb} there"
  known = names + ([] if bucket else [n for n in registry.NAMES if n not in names])
  close = [] if same else difflib.get_close_matches(ref.name, known, n=1, cutoff=0.6)
  if close and close[0] != ref.name:   # (the command then makes a new dataset, not the typo's)
    action, _, command = fix.partition(" it: ")
    fix = (f"did you mean {close[0]}? (or {action} a new dataset {ref.name}: {command})"
           if command else f"did you mean {close[0]}? ({fix})")
  return f"{head} ({there}); {fix}"


def default_config(metadata: bytes | None):
  """The default config a CONFIG_METADATA names, None for none. Read from a bucket, it is
  untrusted: JSON that is not an object names none, and a name that is not a string is
  given as it is, for `Ref.checked` to refuse in one line before it is used."""
  try:
    loaded = json.loads(metadata) if metadata is not None else None
  except (ValueError, RecursionError):  # (RecursionError: nested deeper than the parser goes)
    return None
  return loaded.get("default_config_name") if isinstance(loaded, dict) else None


def split_files(info: dict) -> dict[str, list[str]]:
  """{split: shard file names} from a parsed dataset_info.json (read without TFDS, so
  that publish and list never load TensorFlow)."""
  return {split["name"]: list(_split_shard_names(info, split))
          for split in info.get("splits", [])}


PATH_MAX = 4096  # characters of a shard's path in a version (Linux's limit, in bytes)


def shard_names(info: dict) -> Iterator[tuple[str, str]]:
  """(split, shard file name) of each shard a parsed dataset_info.json names, one at a
  time: an untrusted file is checked without holding them all (a forged one naming
  millions). ValueError, before they are made, for names longer than PATH_MAX (a template
  repeating a long name), or a step of making them longer than that and the template (a
  name, split or format holding placeholders: TFDS's never do)."""
  for split in info.get("splits", []):
    for name in _split_shard_names(info, split):
      yield split["name"], name


def _split_shard_names(info: dict, split: dict) -> Iterator[str]:
  count = len(split.get("shardLengths", []))
  if not count:
    return
  # (an empty template is TFDS's default, as for TFDS itself)
  named = split.get("filepathTemplate") or "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
  too_long = ValueError(f"split {split['name']!r:.80} names shards longer than {PATH_MAX} "
                        "characters")
  # (each step's length first: none makes more than the template or PATH_MAX)
  for placeholder, value in (("{DATASET}", info["name"]), ("{SPLIT}", split["name"]),
                             ("{FILEFORMAT}", info.get("fileFormat", "tfrecord"))):
    if _replaced_length(named, placeholder, value) > max(PATH_MAX, len(named)):
      raise too_long
    named = named.replace(placeholder, value)
  # (the last shard's name is the longest)
  if _replaced_length(named, "{SHARD_X_OF_Y}", f"{count:05d}-of-{count:05d}") > PATH_MAX:
    raise too_long
  for index in range(count):
    yield named.replace("{SHARD_X_OF_Y}", f"{index:05d}-of-{count:05d}")


def _replaced_length(text: str, placeholder: str, value: str) -> int:
  """len(text.replace(placeholder, value)), without making it."""
  return len(text) + text.count(placeholder) * (len(value) - len(placeholder))


def split_counts(info: dict) -> dict[str, int]:
  """{split: number of examples} from a parsed dataset_info.json."""
  return {split["name"]: sum(int(n) for n in split.get("shardLengths", []))
          for split in info.get("splits", [])}


def resolve_local(ref: Ref, data_dir: pathlib.Path) -> Ref:
  """Fills in the default config and the latest prepared version from a local data_dir."""
  dataset_dir = data_dir / ref.name
  if not dataset_dir.is_dir():
    raise DatasetNotPreparedError(not_found(ref, data_dir))
  config = ref.config
  if config is None:
    metadata = dataset_dir / CONFIG_METADATA
    config = default_config(metadata.read_bytes() if metadata.exists() else None)
    Ref(ref.name, config).checked(str(metadata))
  config_dir = dataset_dir / config if config else dataset_dir
  version = ref.version
  if version is None:
    prepared = [p.parent.name for p in config_dir.glob(f"*/{DATASET_INFO}")]
    if not versions_in(prepared):
      raise DatasetNotPreparedError(not_found(Ref(ref.name, config), data_dir))
    version = versions_in(prepared)[-1]
  elif not (config_dir / version / DATASET_INFO).is_file():
    raise DatasetNotPreparedError(not_found(Ref(ref.name, config, version), data_dir))
  return Ref(ref.name, config, version)


def remote_refs(files: dict[str, int]) -> dict[Ref, set[str]]:
  """{version: names of the files in its folder} for every version folder in a listing."""
  found: dict[Ref, set[str]] = {}
  for path in files:
    parts = path.split("/")
    if any(p.startswith(".") for p in parts[:-1]) or len(parts) not in (3, 4):
      continue
    *head, version, file_name = parts
    if not _VERSION.match(version):
      continue
    ref = Ref(head[0], head[1] if len(head) == 2 else None, version)
    found.setdefault(ref, set()).add(file_name)
  return found


def files_in(bucket: bucket_lib.Bucket, folder: str) -> dict[str, int]:
  """{file name: size} of the objects directly in a folder of the bucket."""
  return {name: size for name, size in files_under(bucket, folder).items() if "/" not in name}


def files_under(bucket: bucket_lib.Bucket, folder: str) -> dict[str, int]:
  """{path below the folder: size} of every object under a folder of the bucket, nested
  ones too (a version's `record_index/...`), as a manifest names them."""
  return {path[len(folder) + 1:]: size for path, size in bucket.list_files(folder).items()
          if path.startswith(folder + "/")}


def config_metadata(bucket: bucket_lib.Bucket, name: str) -> bytes | None:
  """A name's CONFIG_METADATA in `bucket` (bounded: MAX_METADATA_BYTES), None if none."""
  return read_or_none(bucket, f"{name}/{CONFIG_METADATA}", MAX_METADATA_BYTES)


def read_or_none(bucket: bucket_lib.Bucket, rel: str,
                 max_bytes: int | None = None) -> bytes | None:
  """The object's bytes (`Bucket.read_bytes`), None if it does not exist."""
  try:
    return bucket.read_bytes(rel, max_bytes)
  except FileNotFoundError:
    return None


def resolve_remote(ref: Ref, bucket: bucket_lib.Bucket) -> Ref:
  """Fills in the default config and the latest published version from a bucket."""
  if ref.config is not None and ref.version is not None:
    return ref
  config = ref.config
  if config is None:
    config = default_config(config_metadata(bucket, ref.name))
    Ref(ref.name, config).checked(bucket.url_of(f"{ref.name}/{CONFIG_METADATA}"))
  if ref.version is not None:
    return Ref(ref.name, config, ref.version)
  prefix = "/".join(p for p in (ref.name, config) if p)
  committed = [r.version for r, names in remote_refs(bucket.list_files(prefix)).items()
               if MARKER in names and MANIFEST in names and r.name == ref.name
               and r.config == config]
  if not committed:
    raise DatasetNotPreparedError(not_found(Ref(ref.name, config), bucket=bucket))
  return Ref(ref.name, config, versions_in(committed)[-1]).checked(bucket.url_of(prefix))
