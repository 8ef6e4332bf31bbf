"""The page of a version (`report_page`), local or from a bucket, optionally against an older one.

What it reads: the duplicate and quality reports the build stored beside the version
(`duplicates.json`, `quality.json`; checked as untrusted input), else, for a version built
without them or whose builder keeps no file names (its reports then name examples by build
keys, not by what a reader sees), every image's fingerprint (one small decode each). Then
one pass over the version's records makes the thumbnails: the sampled grid (per class, the
`GRID_PER_CLASS` examples with the smallest hash of split and name, kept in a heap as the
pass goes; a build's own listing of its records is counted split by split and only each
class's smallest of a split offered) and the pictures of the first groups, findings and
changes (`report_page`'s bounds). A diff (`version_diff`) reads both versions whole (a
full decode of each image, as `imagesets diff`), and the older one again for the pictures
of what left.
"""

import collections
import concurrent.futures
import dataclasses
import functools
import hashlib
import heapq
import itertools
from typing import Callable

import tensorflow_datasets as tfds

from imagesets.annotations import schema
from imagesets.storage import atomic_files
from imagesets.analysis import duplicates
from imagesets.analysis import image_quality
from imagesets.reports import report_page
from imagesets.reports import version_diff
from imagesets.reports import version_examples

Key = tuple[str, str]  # (split, name): `version_examples.name_of`
NO_LABEL = "(no label)"  # the class of examples without a label (VOC)


def _stored(source, recompute: bool):
  """(groups, findings, num_images) from the reports stored with the version, or None."""
  if recompute or not version_examples.has_file_names(source.builder.info.features):
    return None
  folder = version_examples.folder(source)
  if not (folder / duplicates.REPORT_FILE).is_file():
    return None
  findings = image_quality.read_stored(folder)
  if findings is None:
    return None
  counts = {name: split.num_examples for name, split in source.builder.info.splits.items()}
  groups, _, num_images = duplicates.read_stored(folder / duplicates.REPORT_FILE, counts,
                                                 command="report")
  # (a stored report is untrusted: its findings must fit the version they describe)
  quality_path = folder / image_quality.QUALITY_FILE
  strays = [f for f in findings if f.split not in counts]
  if strays or len(findings) > sum(counts.values()) * len(image_quality.KINDS):
    raise image_quality.BadQualityReport(
        f"{quality_path}: not a quality report of this version ("
        + (f"split {strays[0].split!r} is not one of its splits" if strays else
           f"{len(findings)} findings for {sum(counts.values())} examples")
        + "); recompute it with `imagesets report SPEC --recompute`")
  return groups, findings, num_images


def _claims(groups, findings) -> dict[Key, list[tuple[str | None, str]]]:
  """(split, name) -> [(label, report file)] of every example the stored reports name."""
  claims = collections.defaultdict(list)
  for file, named in ((duplicates.REPORT_FILE, (m for g in groups for m in g.members)),
                      (image_quality.QUALITY_FILE, findings)):
    for item in named:
      claims[(item.split, item.file_name)].append((item.label, file))
  return claims


def _check_claims(claims: dict, labels: dict, folder) -> None:
  """Each example the stored reports name is one of the version's, with that label (read:
  `labels`); else the report is another version's or edited, and the page would show a
  picture under a label it does not have, or none: refused in one line."""
  for key, said in claims.items():
    for label, file in said:
      if label in labels.get(key, ()):
        continue
      what = (f"is labelled {' or '.join(sorted(map(repr, labels[key])))} there, not "
              f"{label!r}" if key in labels else "is not in the version")
      message = (f"{folder / file}: not a report of this version "
                 f"({duplicates.printable(f'{key[0]}/{key[1]}')} {what}); ")
      if file == duplicates.REPORT_FILE:
        raise duplicates.BadReport(message + "run imagesets report SPEC --recompute to read "
                                   "the images instead")
      raise image_quality.BadQualityReport(message + "recompute it with `imagesets report "
                                           "SPEC --recompute`")


def _computed(images):
  members = [member for member, _ in images]
  fingerprints = [fingerprint for _, fingerprint in images]
  return (duplicates.find(members, fingerprints), image_quality.find(members, fingerprints),
          len(images))


_NEGATED = bytes(range(255, -1, -1))  # byte b -> 255 - b: a max-heap of ranks by a min-heap


def _rank(key: Key) -> bytes:
  return hashlib.sha256(f"{key[0]}/{key[1]}".encode("utf-8", "surrogateescape")).digest()


# Page pictures are made on threads (libjpeg and PIL release the GIL: 2x on 2 cores for
# 12 MP photos, 28 ms a picture), at most _IN_FLIGHT examples, and their bytes, held.
_MAKERS = 2
_IN_FLIGHT = 8


@dataclasses.dataclass
class _Pass:
  """One read of a version: thumbnails of the `wanted` examples, the sampled grid, counts."""

  wanted: set
  with_content: bool = False  # also key nameless examples by content (a diff's names)
  claimed: frozenset = frozenset()  # keys a stored report names: their labels are kept
  labels: dict = dataclasses.field(default_factory=dict)  # claimed key -> its examples' labels
  grid_labels: frozenset | None = None  # the classes the grid shows (None: every one)
  picture: Callable = None  # example -> its picture (default `_thumbnail`)
  pictures: dict = dataclasses.field(default_factory=dict)  # Key -> data URI
  counts: dict = dataclasses.field(   # split -> class -> examples showing it
      default_factory=lambda: collections.defaultdict(collections.Counter))
  examples: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  grid: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(list))
  seen: int = 0  # examples offered to the grid (the heap's tie-break: equal ranks never
                 # compare their labels or bytes)

  def read(self, source, what: str, grid: bool = True) -> "_Pass":
    catalog = getattr(source, "catalog", None)
    with concurrent.futures.ThreadPoolExecutor(_MAKERS) as makers:
      if catalog is not None and not self.with_content:
        with version_examples.progress(source, what) as bar:
          return self._read_catalog(catalog, grid, makers, bar)
      return self._read(source, what, grid, makers)

  def _read(self, source, what: str, grid: bool, makers) -> "_Pass":
    pending = collections.deque()  # (keys, picture being made), in reading order
    for name, example in version_examples.numbered(source, what):
      shown = _shown(example)
      self.counts[example.split].update(shown)
      self.examples[example.split] += 1
      keys = [(example.split, name)]
      if keys[0] in self.claimed:
        self.labels.setdefault(keys[0], set()).add(example.label)
      if self.with_content and example.file_name is None:
        keys.append((example.split, version_diff.Entry.of(
            example.split, None, example.label, example.image).name))
      self._take(pending, [key for key in keys if key in self.wanted], example, makers)
      if grid:
        for shown_label in shown:
          self._offer(shown_label, keys[0], example)
    while pending:
      self._picture(*pending.popleft())
    return self

  def _read_catalog(self, catalog: dict, grid: bool, makers, bar) -> "_Pass":
    """`_read` of a build's catalog (`version_examples.Catalog`s, named by file name: no
    record is read but those pictured), split by split in stored order: the same counts,
    pictures and grid, with only the examples that can be in the grid offered to it (in a
    split, the GRID_PER_CLASS of each class with the smallest ranks: the grid keeps those
    of the whole version)."""
    pending = collections.deque()
    for split, listed in catalog.items():
      # (one `Located` a position: an example offered under each class it shows is read and
      # pictured once)
      locate = functools.cache(listed.locate)
      shown = list(map(_shown_of, listed.labels, listed.classes))
      self.counts[split].update(itertools.chain.from_iterable(shown))
      self.examples[split] += len(listed)
      for position, name in enumerate(listed.names):
        if (split, name) in self.claimed:
          self.labels.setdefault((split, name), set()).add(listed.labels[position])
        if (split, name) in self.wanted:
          self._take(pending, [(split, name)], locate(position), makers, held=None)
      if grid:
        ranks = [_rank((split, name)) for name in listed.names]
        of_class = collections.defaultdict(list)  # class -> positions showing it
        for position, labels in enumerate(shown):
          for label in labels:
            of_class[label].append(position)
        for position, label in sorted(
            (position, label) for label, positions in of_class.items()
            for position in heapq.nsmallest(report_page.GRID_PER_CLASS, positions,
                                            key=ranks.__getitem__)):
          self._offer(label, (split, listed.names[position]), locate(position))
      bar.update(len(listed))
    while pending:
      self._picture(*pending.popleft())
    return self

  def _take(self, pending: collections.deque, pictured: list, example, makers,
            held: int | None = _IN_FLIGHT) -> None:
    """The picture of `example` made on `makers` when it has `pictured` keys, at most
    `held` examples (and their bytes) waiting; None: no bound, for examples that read their
    bytes when pictured (a catalog's `version_examples.Located`: on the makers' threads,
    so at most _MAKERS at once), whose reading then goes on while they are made."""
    if pictured:
      pending.append((pictured, makers.submit(self.picture or _thumbnail, example)))
      while held is not None and len(pending) > held:
        self._picture(*pending.popleft())

  def _picture(self, keys, made) -> None:
    uri = made.result()
    for key in keys:
      self.pictures[key] = uri

  def _offer(self, label: str, key, example) -> None:
    """`example` (of `key`) as a grid candidate of class `label`."""
    if self.grid_labels is not None and label not in self.grid_labels:
      return
    if (self.grid_labels is None and label not in self.grid
        and len(self.grid) == report_page.GRID_CLASSES):
      # labels not known up front (no ClassLabel): keep the first classes by name only
      last = max(self.grid)
      if label > last:
        return
      del self.grid[last]
    heap, rank = self.grid[label], _rank(key)
    # a max-heap by rank (negated bytes) of the class's GRID_PER_CLASS smallest ranks,
    # holding the examples (their images are read and made thumbnails for the kept
    # ones only: a `version_examples.Located` reads its bytes when asked)
    entry = (rank.translate(_NEGATED), -self.seen, key, example.label, example)
    self.seen += 1
    if len(heap) < report_page.GRID_PER_CLASS:
      heapq.heappush(heap, entry)
    elif entry[0] > heap[0][0]:
      heapq.heapreplace(heap, entry)

  def grid_pictures(self) -> dict[str, list[report_page.Picture]]:
    shown = {label: sorted(heap, reverse=True) for label, heap in sorted(self.grid.items())}
    missing = {id(example): example for entries in shown.values()
               for _, _, key, _, example in entries if not self.pictures.get(key)}
    with concurrent.futures.ThreadPoolExecutor(_MAKERS) as makers:
      made = dict(zip(missing, makers.map(self.picture or _thumbnail, missing.values())))
    return {label: [report_page.Picture(key[0], key[1], example_label,
                                        self.pictures.get(key) or made[id(example)])
                    for _, _, key, example_label, example in entries]
            for label, entries in shown.items()}


def _shown(example) -> tuple:
  """The classes an example counts under, and is a grid candidate of: each it shows."""
  return _shown_of(example.label, example.classes)


def _shown_of(label: str | None, classes: tuple | None) -> tuple:
  """`_shown` of an example of this label and classes (`Example.classes`)."""
  return classes or (NO_LABEL if label is None else label,)


def _thumbnail(example: version_examples.Example) -> str | None:
  """The page picture of an example: its image with its boxes and class mask drawn."""
  return report_page.thumbnail(example.image, example.boxes, example.mask)


def _group_view(group: duplicates.Group, pictured: bool) -> tuple[list[Key], report_page.Listed]:
  members = group.members
  keys = [(m.split, m.file_name) for m in members[:report_page.PER_GROUP]] if pictured else []
  flags = tuple(f for f, on in (("leak", group.cross_split), ("conflict", group.label_conflict))
                if on)
  title = (f"{group.kind}: {len(members)} images in {', '.join(group.splits)}"
           + (f" with labels {', '.join(sorted({str(m.label) for m in members}))}"
              if group.label_conflict else ""))
  names = [duplicates.printable(f"{m.split}/{m.file_name} [{m.label}]") for m in members]
  names += [f"same pixels: {same}" for same in group.same_pixels()]
  listed = report_page.Listed(title, [report_page.Picture(m.split, m.file_name, m.label)
                                      for m in members[:len(keys)]], names, flags)
  return keys, listed


def _finding_views(findings) -> list[report_page.Listed]:
  views = []
  for kind in image_quality.KINDS:
    of_kind = [f for f in findings if f.kind == kind]
    if of_kind:
      views.append(report_page.Listed(
          f"{kind.replace('_', ' ')}: {len(of_kind)}",
          [report_page.Picture(f.split, f.file_name, f.label,
                               note=f"{image_quality.SCORES[kind]} {f.score:g}")
           for f in of_kind[:report_page.PER_KIND]],
          [duplicates.printable(f"{f.split}/{f.file_name} [{f.label}] {f.score:g}")
           for f in of_kind]))
  return views


_OLD_SIDE = ("removed", "moved_out")


def _change_views(result: version_diff.Diff):
  """Per split, the kinds with changes; the keys wanted from the new and the old version."""
  splits, new_keys, old_keys = [], set(), set()
  for split, changes in result.splits.items():
    kinds = []
    for kind in version_diff.KINDS:
      items = changes[kind]
      if not items:
        continue
      pictures = []
      for item in items[:report_page.PER_KIND]:
        note = " ".join(filter(None, [
            f"was {item['old_label']}" if "old_label" in item else "",
            f"was {item['old_file_name']}" if "old_file_name" in item else "",
            f"to {item['to']}" if "to" in item else "",
            f"from {item['from']}" if "from" in item else ""]))
        picture = report_page.Picture(split, item["file_name"], item["label"], note=note,
                                      old=kind in _OLD_SIDE)
        (old_keys if kind in _OLD_SIDE else new_keys).add((split, item["file_name"]))
        if kind == "changed":  # the old side in the split it left, if it moved
          was_in = item.get("from", split)
          old_keys.add((was_in, item["file_name"]))
          pictures.append((dataclasses.replace(picture, split=was_in, note="before", old=True),
                           dataclasses.replace(picture, note="after")))
        else:
          pictures.append(picture)
      names = [duplicates.printable(f"{split}/{item['file_name']} [{item['label']}]")
               for item in items]
      kinds.append(report_page.Listed(f"{kind.replace('_', ' ')}: {len(items)}", pictures,
                                      names))
    line = (f"{split}: " + ", ".join(f"{len(changes[k])} {k.replace('_', ' ')}"
                                     for k in version_diff.KINDS if changes[k])
            + f"; {changes['unchanged']} unchanged")
    splits.append((line, kinds))
  return splits, new_keys, old_keys


def _entries(source) -> list[version_diff.Entry]:
  return [version_diff.Entry.of(e.split, e.file_name, e.label, e.image)
          for e in version_examples.every_example(source, "reading")]


def content(source, *, against=None, recompute: bool = False, images=None, found=None,
            pictures: Callable | None = None) -> report_page.Content:
  """The page of `source` (a `sources.Source` or `version_examples.Folder`), with the
  changes since `against` (another). `images`: (member named by `version_examples.name_of`,
  fingerprint) of every example, when the caller holds them (the build of a version without
  file names, whose stored report cannot name its examples): not computed again. `found`:
  (groups, findings, images) as the version's stored reports hold them, when the caller
  holds them (the build that just wrote them): not read back. `pictures`: the picture of
  an example of `source` (`page_pictures.Cache.picture`; default: made)."""
  info = source.builder.info
  for version in (source, against):
    features = version.builder.info.features if version else {}
    image = features["image"] if "image" in features else None
    if version and not isinstance(image, tfds.features.Image):
      raise ValueError(f"{version.builder.info.full_name} stores no image files (its "
                       f"\"image\" is {type(image).__name__}: raw pixels of keras' one call, or "
                       "none): it has no page; build the folder with `imagesets build` for one")
  read_back = None if found else _stored(source, recompute)  # (untrusted: checked below)
  stored = found or read_back
  groups, findings, num_images = stored or _computed(
      version_examples.fingerprints(source) if images is None else images)
  groups = sorted(groups, key=lambda g: (not (g.cross_split or g.label_conflict),))
  wanted, views = set(), []
  for position, group in enumerate(groups):
    keys, listed = _group_view(group, position < report_page.GROUPS_PICTURED)
    wanted.update(keys)
    views.append(listed)
  finding_views = _finding_views(findings)
  wanted.update((p.split, p.name) for view in finding_views for p in view.pictures)
  diff = diff_summary = None
  old_keys = set()
  if against is not None:
    result = version_diff.diff(_entries(against), _entries(source))
    diff, new_keys, old_keys = _change_views(result)
    wanted |= new_keys
    diff_summary = version_diff.summary(result, against.builder.info.full_name,
                                        info.full_name)[0]
  held = schema.of(info.features)
  names = held.class_names  # the grid's classes known up front (and images without any)
  grid_labels = (frozenset(sorted(names)[:report_page.GRID_CLASSES]) | {held.no_annotation}
                 if names else None)
  claims = _claims(groups, findings) if read_back else {}
  read = _Pass(wanted, with_content=against is not None, grid_labels=grid_labels,
               picture=pictures, claimed=frozenset(claims))
  for split in info.splits:  # (every split and class counted, also those with no example)
    read.counts[split].update({name: 0 for name in names or ()})
  read.read(source, "thumbnails of")
  _check_claims(claims, read.labels, version_examples.folder(source) if claims else None)
  pictures = dict(read.pictures)
  if diff is not None:  # the old version's pictures: "removed", "moved out", a "before"
    old = _Pass(old_keys, with_content=True).read(against, "thumbnails of", grid=False
                                                 ) if old_keys else _Pass(set())
    diff = [(line, [_pictured(kind, pictures, old.pictures) for kind in kinds])
            for line, kinds in diff]
  examples = sum(read.examples.values())
  summary = duplicates.summary(groups, num_images)
  quality = (image_quality.summary(findings) + f" among {num_images} images (definitions and "
             "thresholds: docs/know_your_data.md, \"Quality findings\").")
  origin = "stored by the build" if stored else "computed from the records"
  classes = {c for per in read.counts.values() for c in per} - {held.no_annotation}
  facts = [f"{examples} examples in {len(read.counts)} split(s), {len(classes)} class(es); "
           f"duplicates and quality findings {origin}.",
           f"Thumbnails at most {report_page.THUMBNAIL} px"
           + (f"; {held.mask} tinted in PASCAL VOC's colours (id 0 clear, 255 void cream)"
              if held.mask else "") + "."]  # (no time: a rebuild's page is byte for byte
  # the same, as the rest of the version)
  return report_page.Content(
      title=info.full_name, facts=facts,
      counts={split: dict(counter) for split, counter in read.counts.items()},
      examples={split: read.examples[split] for split in read.counts},
      grid=read.grid_pictures(),
      groups=[_pictured(view, pictures, {}) for view in views], groups_summary=summary,
      findings=[_pictured(view, pictures, {}) for view in finding_views],
      findings_summary=quality,
      diff=diff,
      diff_summary=diff_summary or "")


def _pictured(kind: report_page.Listed, new_pictures: dict, old_pictures: dict
              ) -> report_page.Listed:
  """A change kind with each picture from its side's version."""
  def side(picture):
    pictures = old_pictures if picture.old else new_pictures
    return dataclasses.replace(picture, uri=pictures.get((picture.split, picture.name)))
  return dataclasses.replace(kind, pictures=[
      (side(item[0]), side(item[1])) if isinstance(item, tuple) else side(item)
      for item in kind.pictures])


def write(page: report_page.Content, path) -> int:
  """Writes the page to `path` whole or not at all; its size."""
  text = report_page.render(page).encode("utf-8")
  atomic_files.write(path, text)
  return len(text)
