"""A version's card (`CARD_FILE`, beside dataset_info.json): what is in it, at a glance.

Per split and class, the number of examples; the distribution of image sizes and formats;
the duplicate summary (`duplicates`), with every cross-split group and label conflict named;
the quality findings (`image_quality`), counted per kind, the first of each named.
Made from the per-image fingerprints a build computes anyway (`image_hashes`).
"""

import collections
import dataclasses
from typing import Sequence

from imagesets.analysis import duplicates
from imagesets.analysis import image_hashes
from imagesets.analysis import image_quality

CARD_FILE = "README.md"
_SIZE_BINS = (0, 128, 256, 512, 1024, 2048)  # shorter side, pixels
_LISTED = 20  # groups named in the card; the report file has them all
_NAMED_FINDINGS = 3  # file names per quality kind in the card


def _table(header: list[str], rows: list[list]) -> list[str]:
  return ([f"| {' | '.join(header)} |", "|" + "---|" * len(header)]
          + [f"| {' | '.join(str(cell) for cell in row)} |" for row in rows])


# (a backslash too: left bare, Markdown reads it as escaping the character after it)
_MARKDOWN = str.maketrans({"\\": "\\\\", "|": "\\|", "`": "\\`", "&": "&amp;", "<": "&lt;",
                           ">": "&gt;", "*": "\\*", "_": "\\_", "[": "\\[", "]": "\\]"})


def _text(name) -> str:
  """A file or class name as plain text in Markdown (and in the HTML viewers render)."""
  return duplicates.printable(name).translate(_MARKDOWN)


def _size_bin(shorter: int) -> str:
  lower = max(b for b in _SIZE_BINS if b <= shorter)
  upper = [b for b in _SIZE_BINS if b > shorter]
  return f"{lower}-{upper[0] - 1}" if upper else f">= {lower}"


@dataclasses.dataclass(frozen=True)
class Tallies:
  """What the card counts of a version's images: a sum of parts (Beam's workers count
  their images, the driver adds the counts). {(split, label or None): images},
  {(height, width): images}, {format: images}."""
  classes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  sizes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  formats: collections.Counter = dataclasses.field(default_factory=collections.Counter)

  @classmethod
  def of(cls, images: Sequence[tuple[duplicates.Member, image_hashes.Fingerprint]]
         ) -> "Tallies":
    tallies = cls()
    for member, fingerprint in images:
      tallies.add(member, fingerprint)
    return tallies

  def add(self, member: duplicates.Member, fingerprint: image_hashes.Fingerprint
          ) -> "Tallies":
    """These tallies, one image more (counted in place)."""
    self.classes[(member.split, member.label)] += 1
    self.sizes[(fingerprint.height, fingerprint.width)] += 1
    self.formats[fingerprint.format] += 1
    return self

  def __add__(self, other: "Tallies") -> "Tallies":
    return Tallies(self.classes + other.classes, self.sizes + other.sizes,
                   self.formats + other.formats)

  @property
  def num_images(self) -> int:
    return sum(self.formats.values())

  def to_json(self) -> dict:
    return {"classes": [[*key, n] for key, n in sorted(
                self.classes.items(), key=lambda kv: (kv[0][0], kv[0][1] is not None,
                                                      kv[0][1] or ""))],
            "sizes": [[*key, n] for key, n in sorted(self.sizes.items())],
            "formats": [[key, n] for key, n in sorted(self.formats.items())]}

  @classmethod
  def from_json(cls, held: dict) -> "Tallies":
    return cls(collections.Counter({(split, label): n for split, label, n in held["classes"]}),
               collections.Counter({(h, w): n for h, w, n in held["sizes"]}),
               collections.Counter({f: n for f, n in held["formats"]}))


def statistics(tallies: Tallies) -> dict:
  """{"splits": {split: {class: count}}, "shorter_side": {bin: count}, "formats": {...},
  "sizes": {"min": [h, w], "max": [h, w]}}."""
  splits = collections.defaultdict(collections.Counter)
  for (split, label), count in tallies.classes.items():
    splits[split][label if label is not None else "-"] += count
  bins = collections.Counter()
  for (height, width), count in tallies.sizes.items():
    bins[_size_bin(min(height, width))] += count
  areas = [(h * w, h, w) for (h, w), count in tallies.sizes.items() if count]
  formats = sorted(tallies.formats.items(), key=lambda kv: (-kv[1], kv[0]))
  return {"splits": {s: dict(sorted(c.items())) for s, c in
                     sorted(splits.items(), key=lambda item: duplicates.split_rank(item[0]))},
          "shorter_side": {b: bins[b] for b in map(_size_bin, _SIZE_BINS) if bins[b]},
          "formats": {f: n for f, n in formats if n},
          "sizes": {"min": list(min(areas)[1:]), "max": list(max(areas)[1:])} if areas else {}}


def markdown(title: str, tallies: Tallies, groups: Sequence[duplicates.Group],
             dropped: Sequence[duplicates.Member] = (),
             findings: Sequence[image_quality.Finding] = ()) -> str:
  stats = statistics(tallies)
  classes = sorted({c for per_class in stats["splits"].values() for c in per_class})
  lines = [f"# {title}", "", "## Examples per split and class", ""]
  rows = [[_text(c)] + [stats["splits"][s].get(c, 0) for s in stats["splits"]] for c in classes]
  rows.append(["**total**"] + [sum(v.values()) for v in stats["splits"].values()])
  lines += _table(["class", *stats["splits"]], rows)
  lines += ["", "## Images", "", "Shorter side (pixels):", ""]
  lines += _table(["shorter side", "images"], [[b, n] for b, n in stats["shorter_side"].items()])
  lines += ["", "Formats: " + ", ".join(f"{f} {n}" for f, n in stats["formats"].items())]
  if stats["sizes"]:
    lines += [f"Smallest {stats['sizes']['min'][0]}x{stats['sizes']['min'][1]}, largest "
              f"{stats['sizes']['max'][0]}x{stats['sizes']['max'][1]} (height x width)."]
  lines += ["", "## Duplicates", "", _text(duplicates.summary(groups, tallies.num_images, dropped)) + ".",
            ""]
  notable = [g for g in groups if g.cross_split or g.label_conflict]
  if notable:
    lines += _table(["kind", "leak", "label conflict", "members (split/file: label)"], [
        [g.kind, "yes" if g.cross_split else "", "yes" if g.label_conflict else "",
         "<br>".join([_text(f"{m.split}/{m.file_name}: {m.label}") for m in g.members]
                     + [f"same pixels: {_text(same)}" for same in g.same_pixels()])]
        for g in notable[:_LISTED]])
    if len(notable) > _LISTED:
      lines += ["", f"... and {len(notable) - _LISTED} more."]
  lines += ["", f"Every group: `{duplicates.REPORT_FILE}` (`imagesets duplicates`)."]
  if dropped:
    lines += [f"Dropped from later splits (leakage=drop): {len(dropped)} example(s), listed "
              "there."]
  lines += ["", "## Quality", "", _text(image_quality.summary(findings)) + "."]
  if findings:
    lines += [""] + _table(["kind", "images", "first (split/file)"], [
        [kind.replace("_", " "), count, "<br>".join(
            _text(f"{f.split}/{f.file_name}") for f in
            [f for f in findings if f.kind == kind][:_NAMED_FINDINGS])]
        for kind, count in image_quality.counts(findings).items()])
    lines += ["", f"Every finding and the thresholds: `{image_quality.QUALITY_FILE}`; "
              "the pictures: `report.html` beside this card (local builds) or `imagesets report`."]
  return "\n".join(lines) + "\n"
