"""What changed between two versions of a dataset, example by example.

Examples are matched by content first (the digest of the decoded pixels,
`image_hashes.pixel_digest`: an EXIF-only edit is no change): the same content under the
same source file name (where the builder keeps one: class folders, flowers, VOC ids), then
the same content under another name, label or split (a renamed or moved file, or every
example of a builder without names, e.g. synthetic_images), and only then by name: other
content under the same name in the same split, then in another split (a name each side
holds once). So every photo that leaves a version has a
line naming it: one moved over another's name is matched to itself, and the one it
replaced is `removed`. A matched pair in the same split is `unchanged`, `relabelled` (same
content, other label), `renamed` (same content and label under another file name, with
`old_file_name`) or `changed` (same name, other content: replaced; with `old_label` when
its label differs too, not also `relabelled`). A
pair in another split is `moved` (`moved_out` of the old split, `moved_in`
to the new one, with `old_label` when its label differs). An
item of the new side names the old file (`old_file_name`) whenever both
sides have a file name and it changed, whatever its kind, and `moved_out` the new one
(`new_file_name`); a moved relabel is listed in the new split's `relabelled` as well (with
`from`), since a relabel in class folders is a new path and so often lands in another
split, and a moved replacement in its `changed` (with `from`; `moved_out` says
`"changed": true`), since under content split keys new bytes pick the split anew. Each
split's old count = unchanged + removed + renamed + moved_out + its changed and
relabelled that did not move. What is left is `removed` (old side) or `added`.
"""

import collections
import dataclasses
from typing import Iterable

from imagesets.analysis import duplicates
from imagesets.analysis import image_hashes

KINDS = ("added", "removed", "changed", "relabelled", "renamed", "moved_in", "moved_out")


@dataclasses.dataclass(frozen=True)
class Entry:
  """One example as the diff sees it."""

  split: str
  file_name: str | None
  label: str | None
  content: str  # digest of the decoded pixels (`image_hashes.pixel_digest`)

  @classmethod
  def of(cls, split: str, file_name: str | None, label: str | None, image: bytes) -> "Entry":
    return cls(split, file_name, label, image_hashes.pixel_digest(image))

  @property
  def name(self) -> str:
    return self.file_name if self.file_name is not None else f"sha256:{self.content[:16]}"


@dataclasses.dataclass
class Diff:
  splits: dict[str, dict]  # split -> {kind: [dict], "unchanged": int}

  @property
  def same(self) -> bool:
    return not any(changes[kind] for changes in self.splits.values() for kind in KINDS)

  def to_json(self) -> dict:
    return {"splits": self.splits}


def _renamed(a: Entry, b: Entry) -> bool:
  """Both have a source file name, and they differ (relabelled in class folders = a new path)."""
  return None not in (a.file_name, b.file_name) and a.file_name != b.file_name


def _item(entry: Entry, old: Entry | None = None) -> dict:
  item = {"file_name": entry.name, "label": entry.label}
  if old is not None and old.label != entry.label:
    item["old_label"] = old.label
  if old is not None and _renamed(old, entry):
    item["old_file_name"] = old.file_name
  return item


def _match(old: list[Entry], new: list[Entry], key, pair) -> tuple[list, list]:
  """Pairs the named entries whose `key` is the same on both sides and unique on each;
  returns the entries left (old, new), in their order."""
  def counts(entries):
    return collections.Counter(key(e) for e in entries if e.file_name is not None)
  old_keys, new_keys = counts(old), counts(new)
  unique = {k for k, n in old_keys.items() if n == 1 and new_keys.get(k) == 1}
  new_by_key = {key(e): e for e in new if e.file_name is not None and key(e) in unique}
  left_old = []
  for entry in old:
    if entry.file_name is not None and key(entry) in unique:
      pair(entry, new_by_key[key(entry)])
    else:
      left_old.append(entry)
  paired = {id(e) for e in new_by_key.values()}
  return left_old, [e for e in new if id(e) not in paired]


def _held_once(entries: list[Entry]) -> set[str]:
  """The file names that one example of the whole side has."""
  counts = collections.Counter(e.file_name for e in entries if e.file_name is not None)
  return {name for name, n in counts.items() if n == 1}


def diff(old: Iterable[Entry], new: Iterable[Entry]) -> Diff:
  old, new = list(old), list(new)
  splits = {}
  for split in list(dict.fromkeys([e.split for e in old] + [e.split for e in new])):
    splits[split] = {kind: [] for kind in KINDS} | {"unchanged": 0}

  def pair(a: Entry, b: Entry) -> None:
    if a.split != b.split:  # (the old split must account for it)
      renamed = {"new_file_name": b.file_name} if _renamed(a, b) else {}
      changed = {"changed": True} if a.content != b.content else {}
      splits[a.split]["moved_out"].append(_item(a) | {"to": b.split} | renamed | changed)
      splits[b.split]["moved_in"].append(_item(b, a) | {"from": a.split})
      if changed:  # (a replacement keeps its `old_label`, as in place: changed, not relabelled)
        splits[b.split]["changed"].append(_item(b, a) | {"from": a.split})
      elif a.label != b.label:
        splits[b.split]["relabelled"].append(_item(b, a) | {"from": a.split})
    elif a.content != b.content:
      splits[b.split]["changed"].append(_item(b, a))
    elif a.label != b.label:
      splits[b.split]["relabelled"].append(_item(b, a))
    elif a.file_name != b.file_name:  # (matched by content: a name-matched pair has one name)
      splits[b.split]["renamed"].append(_item(b, a))
    else:
      splits[b.split]["unchanged"] += 1

  # Content first, so that every photo keeps its line: one moved over another's name is
  # matched to itself, and the one it replaced is removed, never taken for its new content.
  # 1. the same content under the same name
  left_old, left_new = _match(old, new, lambda e: (e.content, e.file_name), pair)
  # 2. the same content under another name or label, in another split, or without names:
  # within a split before across splits; of several old copies, one whose name the new
  # side no longer holds is the one renamed (the other keeps its name for step 3).
  key = lambda e: (e.content, e.split, e.name)  # noqa: E731
  by_content = collections.defaultdict(list)
  for entry in sorted(left_new, key=key):
    by_content[entry.content].append(entry)
  new_names = {e.file_name for e in new if e.file_name is not None}
  waiting = sorted(left_old, key=lambda e: (e.file_name in new_names, key(e)))
  for same_split in (True, False):
    still_old = []
    for entry in waiting:
      matches = [m for m in by_content.get(entry.content, ())
                 if (m.split == entry.split) == same_split]
      if matches:
        by_content[entry.content].remove(matches[0])
        pair(entry, matches[0])
      else:
        still_old.append(entry)
    waiting = still_old
  still_new = [entry for entries in by_content.values() for entry in entries]
  # 3. other content under the same name in the same split: changed in place; then in
  # another split (a name each side holds once: builders whose splits share names, e.g.
  # oxford17's, keep to the same split): changed and moved.
  still_old, still_new = _match(still_old, still_new, lambda e: (e.split, e.file_name), pair)
  once = _held_once(old) & _held_once(new)
  cross_old, cross_new = _match([e for e in still_old if e.file_name in once],
                                [e for e in still_new if e.file_name in once],
                                lambda e: e.file_name, pair)
  still_old = [e for e in still_old if e.file_name not in once] + cross_old
  still_new = [e for e in still_new if e.file_name not in once] + cross_new
  for entry in still_old:
    splits[entry.split]["removed"].append(_item(entry))
  for entry in still_new:
    splits[entry.split]["added"].append(_item(entry))
  for changes in splits.values():
    for kind in KINDS:
      changes[kind].sort(key=lambda item: (str(item["label"]), item["file_name"]))
  return Diff(splits)


def _per_class(changes: dict) -> dict[str, collections.Counter]:
  table = collections.defaultdict(collections.Counter)
  for kind in KINDS:
    for item in changes[kind]:
      table[str(item["label"])][kind] += 1
  return table


def summary(result: Diff, old_name: str, new_name: str, show: int = 0) -> list[str]:
  """A few lines and a table per split (rows: classes with changes); `show` file names per
  kind."""
  totals = collections.Counter()
  for changes in result.splits.values():
    totals.update({kind: len(changes[kind]) for kind in KINDS})
    totals["unchanged"] += changes["unchanged"]
  moved = totals["moved_in"]

  def also_moved(kind):
    count = sum("from" in item for changes in result.splits.values() for item in changes[kind])
    return f" ({count} of them also moved)" if count else ""
  lines = [f"{old_name} -> {new_name}: " + (
      "same examples" if result.same else
      f"{totals['added']} added, {totals['removed']} removed, "
      f"{totals['changed']} changed{also_moved('changed')}, "
      f"{totals['relabelled']} relabelled{also_moved('relabelled')}, {totals['renamed']} renamed, "
      f"{moved} moved between splits") +
      f"; {totals['unchanged']} unchanged"]
  header = ["class", "added", "removed", "changed", "relabelled", "renamed", "moved in",
            "moved out"]
  for split, changes in result.splits.items():
    table = _per_class(changes)
    counts = ", ".join(f"{len(changes[k])} {k.replace('_', ' ')}" for k in KINDS if changes[k])
    lines.append(f"{split}: {counts or 'no changes'}; {changes['unchanged']} unchanged")
    if not table:
      continue
    rows = [header] + [[duplicates.printable(label)] + [str(table[label][k]) for k in KINDS]
                       for label in sorted(table)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines += ["  " + "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                               for i, (cell, w) in enumerate(zip(row, widths))) for row in rows]
    for kind in KINDS if show else ():
      for item in changes[kind][:show]:
        was = []  # as the line's own "name [label]" (a label may be None)
        if "old_file_name" in item:
          was.append(item["old_file_name"])
        if "old_label" in item:
          was.append(f"[{item['old_label']}]")
        old = f" (was {' '.join(was)})" if was else ""
        lines.append(duplicates.printable(
            f"    {kind}: {item['file_name']} [{item['label']}]{old}"))
      if len(changes[kind]) > show:
        lines.append(f"    {kind}: ... and {len(changes[kind]) - show} more")
  return lines
