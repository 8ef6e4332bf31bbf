"""Image-level labels as a table: CSV with a header row, or JSONL (one JSON object a line).

A row names its image (column or key `file_name`; also `filename` or `image`) and either
`label` (classification: exactly one class per image) or `labels` (multi-label: CSV
names separated by ';', JSONL a list of strings; none is a negative). CSV cells are
stripped of surrounding spaces. Class ids: the sorted unique label names. Each image is
in one row; images of the folder in no row are `unlisted`. Both files are streamed a
line at a time (`objects.lines`).
"""

import csv
import json
import os
from typing import Iterable

from imagesets.annotations import objects

NAME_KEYS = ("file_name", "filename", "image")
LABEL_KEYS = {"label": "classification", "labels": "multi_label"}
SEPARATOR = ";"


def _one_of(keys: Iterable[str], wanted: Iterable[str]) -> list[str]:
  return [key for key in wanted if key in keys]


def _json_cell(cell: str) -> str | None:
  """Why a label cell that is JSON (Label Studio's CSV export writes several choices as
  {"choices": [...]}) is not read as a class name, else None."""
  if cell[:1] not in "[{":
    return None
  try:
    value = json.loads(cell)
  except (ValueError, RecursionError):
    return None
  if isinstance(value, list) and not any(isinstance(v, (str, dict)) for v in value):
    return None   # (a class may be named "[1]")
  return (f"label cell {objects.shown(cell)} is JSON, not class names (an export's choices):"
          f" write them in a labels column separated by '{SEPARATOR}' (cat{SEPARATOR}dog), or "
          "as a list in JSONL")


def _row(reader: objects.Reader, where: str, file_name: object, labels: list,
         task: str, refused: str | None = None) -> tuple[str, list[str]] | None:
  """(file name, label names) of a valid row of an image not seen before, else None.
  `refused`: why its labels cell was not read."""
  reasons = [reason for reason in map(objects.class_name_problem, labels) if reason]
  if refused:
    reasons.append(refused)
  elif task == "classification" and len(labels) != 1:
    reasons.append("no label: classification needs exactly one per image")
  for reason in reasons:
    reader.problem(where, reason)
  name = reader.name(where, file_name)
  if name is None or not reader.claim(where, name) or reasons:
    return None
  return name, labels


def _annotations(reader: objects.Reader, format: str, task: str,
                 rows: list[tuple[str, list[str]]]) -> objects.Annotations:
  class_names = sorted({label for _, labels in rows for label in labels})
  ids = {name: i for i, name in enumerate(class_names)}
  entries = [objects.Entry(name, labels=tuple(sorted({ids[label] for label in labels})))
             for name, labels in rows]
  return reader.annotations(task=task, format=format, class_names=class_names,
                            entries=entries, unmentioned="unlisted")


def _header(path: str, header: list[str] | None) -> tuple[int, int, str]:
  """(file name column, label column, task) of a CSV header."""
  if header is None:
    raise objects.AnnotationError(f"{path}: empty: a CSV of labels starts with a header row "
                                  "such as file_name,label")
  names, labels = _one_of(header, NAME_KEYS), _one_of(header, LABEL_KEYS)
  repeated = sorted({cell for cell in header if header.count(cell) > 1})
  if len(names) != 1 or len(labels) != 1 or repeated:
    raise objects.AnnotationError(
        f"{path} line 1: header {objects.shown(header)} needs one image column "
        f"({' or '.join(NAME_KEYS)}) and one of label (one class an image) or labels "
        f"('{SEPARATOR}'-separated classes), each once")
  return header.index(names[0]), header.index(labels[0]), LABEL_KEYS[labels[0]]


def _where(src: str, first: int, last: int) -> str:
  """How a problem names a CSV row: its line, or its lines when a quoted cell spans several."""
  return f"{src} line {first}" if first == last else f"{src} lines {first}-{last}"


def read_csv(path: str, images: Iterable[str], *, on_bad_box: str = "error",
             images_root: str = "", unread: Iterable[str] = ()) -> objects.Annotations:
  """The labels of the CSV file `path` for the image files `images` (no boxes: on_bad_box
  is accepted for a uniform call and unused)."""
  reader = objects.Reader(path, images, on_bad_box, images_root, unread)
  src = os.path.basename(path)
  # strict: a stray quote is an error, not a field that swallows the rows after it.
  table = csv.reader((text for _, text in objects.lines(path)), strict=True)
  rows = []
  try:
    header = next(table, None)
    name_column, label_column, task = _header(path, header and [c.strip() for c in header])
    end = table.line_num   # each row starts on the line after the one the last ended on
    for row in table:
      where, end = _where(src, end + 1, table.line_num), table.line_num
      if not any(cell.strip() for cell in row):
        continue
      if len(row) != len(header):
        reader.problem(where, f"{len(row)} fields, the header has {len(header)}")
        continue
      cell = row[label_column].strip()
      refused = _json_cell(cell)
      labels = [] if refused else ([cell] if cell else []) if task == "classification" else [
          label.strip() for label in cell.split(SEPARATOR) if label.strip()]
      rows.append(_row(reader, where, row[name_column].strip(), labels, task, refused))
  except csv.Error as e:
    raise objects.AnnotationError(f"{path} line {table.line_num}: not readable as CSV ({e}): "
                                  "fix the file") from None
  return _annotations(reader, "csv", task, [row for row in rows if row is not None])


def read_jsonl(path: str, images: Iterable[str], *, on_bad_box: str = "error",
               images_root: str = "", unread: Iterable[str] = ()) -> objects.Annotations:
  """The labels of the JSON Lines file `path` for the image files `images` (the task is
  the first record's: `label` or `labels`; on_bad_box is unused)."""
  reader = objects.Reader(path, images, on_bad_box, images_root, unread)
  src = os.path.basename(path)
  task, rows = None, []
  for number, text in objects.lines(path):
    where = f"{src} line {number}"
    if not text.strip():
      continue
    try:
      record = json.loads(text, object_pairs_hook=objects.unique_keys)
    except objects.DuplicateKeyError as e:
      reader.problem(where, f"{e}: keep one")
      continue
    except (ValueError, RecursionError) as e:
      reader.problem(where, f"not a JSON object ({type(e).__name__}: {str(e)[:80]})")
      continue
    names = _one_of(record, NAME_KEYS) if isinstance(record, dict) else []
    labels = _one_of(record, LABEL_KEYS) if isinstance(record, dict) else []
    if len(names) > 1 or len(labels) > 1:
      twice = names if len(names) > 1 else labels
      reader.problem(where, f"{objects.shown(record)} has the keys {', '.join(twice)}, which "
                            "say the same: keep one")
      continue
    if len(names) != 1 or len(labels) != 1:
      reader.problem(where, f"{objects.shown(record)} needs one of the keys "
                            f"{', '.join(NAME_KEYS)} and one of label, labels")
      continue
    task = task or LABEL_KEYS[labels[0]]
    value = record[labels[0]]
    if LABEL_KEYS[labels[0]] != task:
      reader.problem(where, f"{labels[0]!r}, but earlier lines have "
                            f"{'label' if task == 'classification' else 'labels'!r}: use one")
    elif task == "multi_label" and not isinstance(value, list):
      reader.problem(where, f"labels {objects.shown(value)} is not a list of strings")
    else:
      rows.append(_row(reader, where, record[names[0]],
                       value if task == "multi_label" else [value], task))
  if task is None:
    raise objects.AnnotationError(f"{path}: no line with an image and a label or labels: "
                                  'write one JSON object a line, e.g. {"file_name": "a.jpg", '
                                  '"label": "cat"}' + reader.problems_told())
  return _annotations(reader, "jsonl", task, [row for row in rows if row is not None])
