"""The examples of a prepared or published version, as what duplicates and diffs compare:
split, source file name (where the builder keeps one), label name and the stored image bytes
(not decoded).

A version is `name[/config]:x.y.z` in a data dir: a local TFDS data dir, or a bucket URL
(s3://, gs://, file://) whose shards stream through the bounded shard cache, one at a time
(`open_builder`, `_streamed_records`: the only code that knows how a bucket is read),
never copied whole.
"""

import dataclasses
import pathlib
from typing import Iterator

import tensorflow_datasets as tfds

from imagesets import progress_lines
from imagesets.publishing import versions
from imagesets.reading import streaming

FILE_NAME_FEATURES = ("file_name", "image_id")  # class folders and flowers; VOC


@dataclasses.dataclass(frozen=True)
class Example:
  split: str
  file_name: str | None  # None: the builder keeps no source name (synthetic_images)
  label: str | None
  image: bytes


def open_builder(spec: str, data_dir: str) -> tfds.core.DatasetBuilder:
  """A read-only builder of the version; a bucket's through the shard cache."""
  if streaming.is_bucket_url(data_dir):
    return streaming.open_builder(spec, str(data_dir))
  data_dir = pathlib.Path(data_dir).expanduser()
  ref = versions.resolve_local(versions.Ref.parse(spec), data_dir)
  return tfds.builder_from_directory(str(data_dir / ref.folder))


def folder(builder) -> pathlib.Path:
  """Where the version's small files (dataset_info.json, duplicates.json, ...) are."""
  return pathlib.Path(str(builder.data_dir))


def _streamed_records(builder, split: str):
  """The serialized examples of a bucket version's split, in stored order, shard by shard
  through the bounded cache; None for a local version.

  With `open_builder`, the one place that knows how a bucket is read (at the merge of the
  read path's redesign: `sources.open_source(spec, url)` and `source.records(split)`)."""
  if streaming.cache_of(builder) is None:
    return None
  return streaming.records(builder, split, shuffle=False, seed=0, num_epochs=1,
                           deterministic=True)


def examples(builder, split: str) -> Iterator[Example]:
  """Every example of `split`, in stored order."""
  features = builder.info.features
  decoders = {"image": tfds.decode.SkipDecoding()}
  records = _streamed_records(builder, split)
  if records is not None:
    dataset = records.map(lambda r: features.deserialize_example(r, decoders=decoders))
  elif builder.info.file_format == tfds.core.FileFormat.ARRAY_RECORD:
    dataset = builder.as_data_source(split, decoders=decoders)
  else:
    dataset = builder.as_dataset(split, decoders=decoders, shuffle_files=False)
  label = features["label"] if "label" in features else None
  name_key = next((key for key in FILE_NAME_FEATURES if key in features), None)
  rows = dataset.as_numpy_iterator() if hasattr(dataset, "as_numpy_iterator") else iter(dataset)
  for row in rows:
    value = row.get("label") if label is not None else None
    yield Example(
        split,
        row[name_key].decode("utf-8", "surrogateescape") if name_key else None,
        None if value is None else (label.int2str(int(value)) if hasattr(label, "int2str")
                                    else str(value)),
        bytes(row["image"]))


def splits(builder) -> list[str]:
  return list(builder.info.splits)


def every_example(builder, what: str) -> Iterator[Example]:
  """The examples of every split, with a progress bar on stderr (a line every few seconds
  in a log) saying `what` is done with them."""
  import tqdm  # pylint: disable=import-outside-toplevel

  total = sum(split.num_examples for split in builder.info.splits.values())
  with progress_lines.log_friendly_stderr(), tqdm.tqdm(
      total=total, desc=f"{what} {builder.info.full_name}", unit=" images",
      leave=False) as bar:
    for split in splits(builder):
      for example in examples(builder, split):
        yield example
        bar.update()
