"""The examples of a prepared or published version, as what duplicates and diffs compare:
split, source file name (where the builder keeps one), label name and the stored image bytes
(not decoded).

A version is a `sources.Source` (`sources.open_version`: a spec in a local TFDS data dir, or
in a bucket whose shards stream through the bounded shard cache, one window at a time, never
copied whole) or a `Folder` read in place (a build's own, just written).
"""

import collections
import contextlib
import dataclasses
import pathlib
from typing import Callable, Iterator

import tensorflow_datasets as tfds

from imagesets.console import progress_lines
from imagesets.annotations import schema
from imagesets.analysis import duplicates
from imagesets.analysis import image_hashes

FILE_NAME_FEATURES = ("file_name", "image_id")  # class folders and flowers; VOC


def has_file_names(features) -> bool:
  """The examples of a version with these features carry a source file name (reports name
  them by it; else by `position_name`)."""
  return any(key in features for key in FILE_NAME_FEATURES)


@dataclasses.dataclass(frozen=True)
class Example:
  split: str
  file_name: str | None  # None: the builder keeps no source name (synthetic_images)
  label: str | None
  image: bytes
  boxes: tuple = ()      # `report_page.Box`es of a detection example, drawn on its picture
  classes: tuple | None = None  # the classes it shows (`schema.Schema.classes`); None: label
  mask: bytes | None = None  # its stored class-id mask (`schema.MASK`), tinted on its picture


@dataclasses.dataclass(frozen=True)
class Located:
  """An example whose image bytes are read only when asked for (`image`): a build that
  knows where each of its records is (`record_index`) lists its examples without reading
  them, and its page reads the few it pictures."""

  split: str
  file_name: str
  label: str | None
  read: Callable[[], bytes]
  # (its `report_page.Box`es, its class-id mask or None), read when asked
  read_marks: Callable[[], tuple[tuple, bytes | None]] | None = None
  classes: tuple | None = None  # as `Example.classes`
  # Its record's place, when known (the SHA-256 of its shard, where it is read there, and
  # what its index row says of it: key, size, label id): its page picture is found by it
  # without reading the record (`page_pictures`). None for examples with boxes or a mask,
  # drawn with the version's class names.
  record: str | None = None

  @property
  def image(self) -> bytes:
    return self.read()

  @property
  def boxes(self) -> tuple:
    return self.read_marks()[0] if self.read_marks is not None else ()

  @property
  def mask(self) -> bytes | None:
    return self.read_marks()[1] if self.read_marks is not None else None


@dataclasses.dataclass(frozen=True)
class Catalog:
  """Every example of one split, in stored order, as a build lists them: their names,
  labels and classes (as `Located`'s) held, each `Located` made when asked (`locate`, or
  iterating): a page counts and samples a version's examples by name and class, and reads
  the records of the few it pictures."""

  names: list[str]
  labels: list[str | None]
  classes: list[tuple | None]
  locate: Callable[[int], Located]   # position -> its `Located`

  def __len__(self) -> int:
    return len(self.names)

  def __iter__(self) -> Iterator[Located]:
    return map(self.locate, range(len(self.names)))


@dataclasses.dataclass(frozen=True)
class Folder:
  """A prepared version read in place: what `examples` needs of a `sources.Source`
  (`sources.open_version` opens one from a spec, local or in a bucket). `catalog`: every
  example of each split (`Catalog`), when the caller knows them."""

  builder: tfds.core.DatasetBuilder
  folder: pathlib.Path
  streamed: bool = False
  catalog: dict[str, Catalog] | None = None

  @classmethod
  def at(cls, path) -> "Folder":
    return cls(tfds.builder_from_directory(str(path)), pathlib.Path(path))


def folder(source) -> pathlib.Path:
  """Where the version's small files (dataset_info.json, duplicates.json, ...) are."""
  return source.folder


_BATCH = 256  # rows taken from tf.data at a time: its per-element cost is paid per batch


def _rows(dataset, keys: list[str], ragged: bool = False) -> Iterator[dict]:
  """The rows of a tf.data dataset (batched, then split here, unless a key's length varies
  from row to row: `ragged`) or of a data source."""
  if not hasattr(dataset, "as_numpy_iterator"):  # an ArrayRecord data source: rows already
    yield from iter(dataset)
    return
  dataset = dataset.map(lambda row: {key: row[key] for key in keys})
  if ragged:
    yield from dataset.as_numpy_iterator()
    return
  for batch in dataset.batch(_BATCH).as_numpy_iterator():
    for i in range(len(batch[keys[0]])):
      yield {key: batch[key][i] for key in keys}


def examples(source, split: str) -> Iterator[Example | Located]:
  """Every example of `split`, in stored order."""
  catalog = getattr(source, "catalog", None)
  if catalog is not None:
    yield from catalog[split]
    return
  builder = source.builder
  features = builder.info.features
  # no image of the example is decoded (VOC's masks neither): the bytes are what we compare
  decoders = {key: tfds.decode.SkipDecoding() for key, feature in features.items()
              if isinstance(feature, tfds.features.Image)}
  decoders.setdefault("image", tfds.decode.SkipDecoding())
  if not isinstance(source, Folder):   # a `sources.Source`: its records, without TensorFlow
    dataset = source.stored_examples(split, decoders)
  elif builder.info.file_format == tfds.core.FileFormat.ARRAY_RECORD:
    dataset = builder.as_data_source(split, decoders=decoders)
  else:   # a build's own folder (TensorFlow is loaded there), file by file as stored
    dataset = builder.as_dataset(split, decoders=decoders, shuffle_files=False,
                                 read_config=tfds.ReadConfig(interleave_cycle_length=1))
  held = schema.of(features)  # what an example's label is: its annotations, described
  name_key = next((key for key in FILE_NAME_FEATURES if key in features), None)
  keys = ["image"] + [key for key in (held.key, name_key, held.mask) if key]
  for row in _rows(dataset, keys, ragged=held.task in (schema.MULTI_LABEL, schema.DETECTION)):
    annotation = schema.annotation(row)
    yield Example(
        split,
        row[name_key].decode("utf-8", "surrogateescape") if name_key else None,
        held.describe(annotation), bytes(row["image"]),
        boxes(held, row["objects"]) if held.task == schema.DETECTION else (),
        held.classes(annotation), bytes(row[held.mask]) if held.mask else None)


def boxes(held: "schema.Schema", objects: dict) -> tuple:
  """The `report_page.Box`es of a detection example's `objects` (bbox, label)."""
  return tuple((*map(float, bbox), held.name(label))
               for bbox, label in zip(objects["bbox"], objects["label"]))


def splits(source) -> list[str]:
  return list(source.builder.info.splits)


def every_example(source, what: str) -> Iterator[Example]:
  """The examples of every split, with a progress bar on stderr (a line every few seconds
  in a log) saying `what` is done with them."""
  with progress(source, what) as bar:
    for split in splits(source):
      for example in examples(source, split):
        yield example
        bar.update()


@contextlib.contextmanager
def progress(source, what: str):
  """A progress bar over the examples of every split of `source`, saying `what` is done
  with them (`every_example`'s; updated by the caller)."""
  import tqdm  # pylint: disable=import-outside-toplevel

  info = source.builder.info
  total = sum(split.num_examples for split in info.splits.values())
  with progress_lines.log_friendly_stderr(), tqdm.tqdm(
      total=total, desc=f"{what} {info.full_name}", unit=" images",
      leave=False) as bar:
    yield bar
    # tqdm shows the last count only if it came a display interval after the one before,
    # and a bar that is not left shows nothing more at its close: a log would end on the
    # last count shown (e.g. 91 %), not on the total.
    bar.refresh()


def name_of(example: Example, position: int) -> str:
  """The example's name on reports: its source file name, else `split[position]` (its
  position in the split's stored order)."""
  return example.file_name if example.file_name is not None else position_name(example.split,
                                                                                position)


def position_name(split: str, position: int) -> str:
  """The report name of the example without a file name at `position` of `split`'s stored
  order."""
  return f"{split}[{position}]"


def numbered(source, what: str) -> Iterator[tuple[str, Example]]:
  """(`name_of`, example) of every example of every split (`every_example`)."""
  count = collections.Counter()
  for example in every_example(source, what):
    count[example.split] += 1
    yield name_of(example, count[example.split] - 1), example


def fingerprints(source) -> list:
  """(duplicates.Member, fingerprint) of every example of a version (one small decode each)."""
  return [(duplicates.Member(example.split, name, example.label),
           image_hashes.of_bytes(example.image))
          for name, example in numbered(source, "fingerprinting")]
