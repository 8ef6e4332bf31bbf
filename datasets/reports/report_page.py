"""A version's page (`PAGE_FILE`): one self-contained HTML file a person reads in a browser.

What is on it (`Content`): examples per split and class as a bar chart (inline SVG); a
sampled grid of examples per class (boxes drawn and named, class masks tinted); every
duplicate, leak and label-conflict group with its members' thumbnails side by side
(split, class, file name under each); the quality findings
(`image_quality`) with thumbnails; and, against an older version, the diff (`version_diff`:
added, removed, changed (old and new side by side), relabelled, renamed, moved).

Self-contained: thumbnails are inlined JPEG data URIs, the style is inline, there is no
script and no link to anything outside the file, so it opens from disk, from a bucket's
browser or as an e-mail attachment. Every name on it comes from a user's folder or a
bucket and is HTML-escaped. Its pictures are bounded whatever the version's size:
`THUMBNAIL` px, at most `GRID_PER_CLASS` per class for `GRID_CLASSES` classes, `PER_GROUP`
per group for the first `GROUPS_PICTURED` groups, `PER_KIND` per finding kind and per
change kind. Every group member, finding and change is also listed by name (folded), so
the text grows with them: about 35 bytes each (a version whose every image is grey lists
every image once).
"""

import dataclasses
import base64
import functools
import html
import io
from typing import Sequence
import zlib

import numpy as np
import PIL.Image
import PIL.ImageDraw

from imagesets import constants
from imagesets.annotations import masks
from imagesets.analysis import image_hashes

PAGE_FILE = constants.PAGE_FILE  # beside the card: published and fetched with it
THUMBNAIL = 96       # px, the longer side
THUMBNAIL_QUALITY = 70
GRID_PER_CLASS = 8
GRID_CLASSES = 60
PER_GROUP = 6
GROUPS_PICTURED = 100
PER_KIND = 24
_CHART_CLASSES = 60  # bars drawn; the table below the chart has every class
_SPLIT_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948")


# An object drawn on a thumbnail: its normalised box (TFDS's ymin, xmin, ymax, xmax) and
# class name.
Box = tuple[float, float, float, float, str]
_BOX_COLOURS = ("#e6194b", "#3cb44b", "#ffe119", "#4363d8", "#f58231", "#911eb4", "#46f0f0")


# A class-id mask (`schema.MASK`) is tinted over its picture in PASCAL VOC's colours, at
# this opacity; id 0 (background) is left clear, 255 (void) shows VOC's cream.
_MASK_OPACITY = 0.5
_MASK_COLOURS = masks.pascal_palette()


def thumbnail(image: bytes, boxes: Sequence[Box] = (), mask: bytes | None = None) -> str | None:
  """A data URI of a JPEG at most THUMBNAIL px a side of encoded image bytes (from the
  fingerprint's small decode: a JPEG's DCT scaled down by libjpeg, not a full decode), with
  the class-id `mask` (PNG bytes of the image's size) tinted over it and `boxes` drawn and
  named (a colour per class name), or None for image bytes that do not decode (a page is
  drawn whatever one image holds; a mask that does not decode is left off)."""
  try:
    small, _, _, size = image_hashes.decode_small(image)
  except Exception:  # pylint: disable=broad-except  # (untrusted bytes: any decoder error)
    return None
  picture = PIL.Image.fromarray(small)
  picture.thumbnail((THUMBNAIL, THUMBNAIL), PIL.Image.Resampling.BILINEAR)
  if mask is not None:
    picture = _tinted(picture, mask, size)
  if boxes:
    picture = picture.convert("RGB")
    draw = PIL.ImageDraw.Draw(picture)
    width, height = picture.size
    for ymin, xmin, ymax, xmax, name in boxes:
      colour = _BOX_COLOURS[zlib.crc32(name.encode()) % len(_BOX_COLOURS)]
      corner = (xmin * (width - 1), ymin * (height - 1))
      draw.rectangle([corner, (xmax * (width - 1), ymax * (height - 1))], outline=colour)
      picture.paste(colour, (int(corner[0] + 2), int(corner[1] + 1)), _text(name))
  out = io.BytesIO()
  picture.save(out, "JPEG", quality=THUMBNAIL_QUALITY)
  return "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode("ascii")


@functools.lru_cache(maxsize=1024)
def _text(name: str) -> PIL.Image.Image:
  """`name` in PIL's default font as a mask ("L", 255 where the letters are): rendered once
  a class name, pasted in its colour on every box of that class."""
  _, _, right, bottom = PIL.ImageDraw.Draw(PIL.Image.new("L", (1, 1))).textbbox((0, 0), name)
  mask = PIL.Image.new("L", (max(1, right), max(1, bottom)))
  PIL.ImageDraw.Draw(mask).text((0, 0), name, fill=255)
  return mask


def _tinted(picture: PIL.Image.Image, mask: bytes, size: tuple[int, int]) -> PIL.Image.Image:
  """`picture` with the ids of `mask` tinted over it: a single-channel PNG of the image's
  (height, width) `size` (else left off, before its pixels are decoded), scaled to the
  picture's by nearest neighbour (ids are never blended)."""
  try:
    with PIL.Image.open(io.BytesIO(mask), formats=["PNG"]) as opened:
      if opened.mode not in ("L", "P") or opened.size[::-1] != tuple(size):
        return picture
      ids = np.asarray(opened.resize(picture.size, PIL.Image.Resampling.NEAREST))
  except Exception:  # pylint: disable=broad-except  # (untrusted bytes: any decoder error)
    return picture
  pixels = np.asarray(picture.convert("RGB"), np.float32)
  tinted = (1 - _MASK_OPACITY) * pixels + _MASK_OPACITY * _MASK_COLOURS[ids]
  shown = (ids != 0)[..., None]
  return PIL.Image.fromarray(np.where(shown, tinted, pixels).round().astype(np.uint8))


@dataclasses.dataclass(frozen=True)
class Picture:
  split: str
  name: str
  label: str | None
  uri: str | None = None  # None: not read (the bound) or not in the version
  note: str = ""          # a score, "was: ...", shown under the caption
  old: bool = False       # a picture of the older version of a diff


@dataclasses.dataclass(frozen=True)
class Listed:
  """One section's items: the first ones with pictures, every one by name."""

  title: str
  pictures: list  # [Picture] or, for changed examples, [(old Picture, new Picture)]
  names: list[str]  # every item, as text (the folded list)
  flags: tuple[str, ...] = ()


@dataclasses.dataclass
class Content:
  title: str
  facts: list[str]                           # lines under the title
  counts: dict[str, dict[str, int]]          # split -> class -> examples
  grid: dict[str, list[Picture]]             # class -> sampled pictures
  groups: list[Listed]
  groups_summary: str
  findings: list[Listed]
  findings_summary: str
  diff: list[tuple[str, list[Listed]]] | None = None  # (split line, kinds) per split
  diff_summary: str = ""
  examples: dict[str, int] | None = None     # split -> examples (None: the counts' sums)


def _e(text) -> str:
  """Text as HTML: escaped, and valid UTF-8 whatever it holds (a file name that was not
  UTF-8 reaches us with surrogate escapes: they are shown as \\udcXX)."""
  return html.escape(str(text).encode("utf-8", "backslashreplace").decode("utf-8"), quote=True)


_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:16px 0 6px}.facts{color:#555;margin:0 0 12px}
.row{display:flex;flex-wrap:wrap;gap:8px;margin:4px 0 12px}
figure{margin:0;width:104px;font-size:11px;word-break:break-all}
figure img,figure .none{width:96px;height:96px;object-fit:contain;background:#eee;display:block;
border:1px solid #ccc}figure .none{display:flex;align-items:center;justify-content:center;color:#888}
.group{border:1px solid #ddd;border-radius:4px;padding:6px 8px;margin:8px 0}
.flag{display:inline-block;padding:0 6px;margin-right:4px;border-radius:3px;color:#fff;
background:#888;font-size:12px}.flag.leak{background:#c0392b}.flag.conflict{background:#d35400}
.pair{display:flex;gap:4px;align-items:center;border:1px solid #eee;padding:2px}
table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:right}
td:first-child,th:first-child{text-align:left}details{margin:4px 0 12px}summary{cursor:pointer}
.names{font-family:monospace;font-size:12px;white-space:pre-wrap;color:#333}
"""


def _figure(picture: Picture) -> str:
  image = (f'<img alt="{_e(picture.name)}" src="{picture.uri}">' if picture.uri
           else '<div class="none">not shown</div>')
  label = "" if picture.label is None else f" · {_e(picture.label)}"
  note = f"<br><b>{_e(picture.note)}</b>" if picture.note else ""
  return (f"<figure>{image}<figcaption>{_e(picture.split)}{label}<br>{_e(picture.name)}"
          f"{note}</figcaption></figure>")


def _chart(counts: dict[str, dict[str, int]]) -> str:
  """Horizontal bars, one per class, a segment per split, the count at the end."""
  splits = list(counts)
  classes = sorted({c for per in counts.values() for c in per})
  totals = {c: sum(counts[s].get(c, 0) for s in splits) for c in classes}
  drawn = sorted(classes, key=lambda c: -totals[c])[:_CHART_CLASSES]
  drawn.sort()
  largest = max(totals.values(), default=1) or 1
  label_width, bar_width, height = 170, 480, 18
  rows = []
  for i, name in enumerate(drawn):
    y, x = 24 + i * height, label_width
    text = name if len(name) <= 24 else name[:23] + "…"
    rows.append(f'<text x="{label_width - 6}" y="{y + 13}" text-anchor="end">{_e(text)}</text>')
    for j, split in enumerate(splits):
      width = bar_width * counts[split].get(name, 0) / largest
      if width:
        rows.append(f'<rect x="{x:.1f}" y="{y + 2}" width="{width:.1f}" height="{height - 4}" '
                    f'fill="{_SPLIT_COLOURS[j % len(_SPLIT_COLOURS)]}"><title>{_e(split)}: '
                    f'{counts[split].get(name, 0)}</title></rect>')
        x += width
    rows.append(f'<text x="{x + 4:.1f}" y="{y + 13}">{totals[name]}</text>')
  legend = "".join(
      f'<rect x="{label_width + 110 * j}" y="4" width="12" height="12" '
      f'fill="{_SPLIT_COLOURS[j % len(_SPLIT_COLOURS)]}"/><text x="{label_width + 110 * j + 16}" '
      f'y="14">{_e(split)}</text>' for j, split in enumerate(splits))
  total_height = 30 + len(drawn) * height
  more = (f"<p>The {len(drawn)} largest of {len(classes)} classes are drawn; the table has "
          "every class.</p>" if len(drawn) < len(classes) else "")
  return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_width + bar_width + 60}" '
          f'height="{total_height}" font-size="12" role="img" aria-label="examples per class '
          f'and split">{legend}{"".join(rows)}</svg>{more}')


def _count_table(counts: dict[str, dict[str, int]], examples: dict[str, int] | None) -> str:
  splits = list(counts)
  examples = examples or {s: sum(counts[s].values()) for s in splits}
  classes = sorted({c for per in counts.values() for c in per})
  head = "".join(f"<th>{_e(s)}</th>" for s in splits)
  body = "".join(
      f"<tr><td>{_e(c)}</td>" + "".join(f"<td>{counts[s].get(c, 0)}</td>" for s in splits)
      + "</tr>" for c in classes)
  total = "".join(f"<td><b>{examples.get(s, 0)}</b></td>" for s in splits)
  several = any(sum(counts[s].values()) != examples.get(s, 0) for s in splits)
  note = ("<p>An example counts under each class it shows (its objects' or its tags' "
          "classes), so a split's classes can add up to more than its examples.</p>"
          if several else "")
  return (f"{note}<details><summary>Table ({len(classes)} classes)</summary><table><tr><th>"
          f"class</th>{head}</tr>{body}<tr><td><b>examples</b></td>{total}</tr></table>"
          "</details>")


def _listed(section: Listed) -> str:
  flags = "".join(f'<span class="flag {_e(f)}">{_e(f)}</span>' for f in section.flags)
  pictures = []
  for item in section.pictures:
    if isinstance(item, tuple):
      pictures.append(f'<div class="pair">{_figure(item[0])}→{_figure(item[1])}</div>')
    else:
      pictures.append(_figure(item))
  shown = len(section.pictures)
  names = ""
  if len(section.names) > shown or not shown:
    names = (f"<details><summary>every one by name ({len(section.names)})</summary>"
             f'<div class="names">{_e(chr(10).join(section.names))}</div></details>')
  return (f'<div class="group"><h3>{flags}{_e(section.title)}</h3>'
          f'<div class="row">{"".join(pictures)}</div>{names}</div>')


def render(content: Content) -> str:
  parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
           f"<title>{_e(content.title)}</title><style>{_STYLE}</style></head><body>",
           f"<h1>{_e(content.title)}</h1>",
           "".join(f'<p class="facts">{_e(line)}</p>' for line in content.facts),
           "<h2 id=\"counts\">Examples per split and class</h2>", _chart(content.counts),
           _count_table(content.counts, content.examples),
           f"<h2 id=\"examples\">Examples of each class</h2><p>Up to {GRID_PER_CLASS} per class, "
           "sampled by a hash of split and file name (the same every time)"
           + (f"; the first {GRID_CLASSES} classes by name"
              if len({c for per in content.counts.values() for c in per}) > GRID_CLASSES
              else "")
           + ".</p>"]
  for label, pictures in content.grid.items():   # (at most GRID_CLASSES and the unlabelled)
    parts.append(f"<h3>{_e(label)}</h3><div class=\"row\">"
                 + "".join(_figure(p) for p in pictures) + "</div>")
  parts.append(f"<h2 id=\"duplicates\">Duplicates</h2><p>{_e(content.groups_summary)}.</p>")
  parts += [_listed(group) for group in content.groups]
  parts.append(f"<h2 id=\"quality\">Quality</h2><p>{_e(content.findings_summary)}</p>")
  parts += [_listed(kind) for kind in content.findings]
  if content.diff is not None:
    parts.append(f"<h2 id=\"changes\">Changes</h2><p>{_e(content.diff_summary)}</p>")
    for line, kinds in content.diff:
      parts.append(f"<p><b>{_e(line)}</b></p>")
      parts += [_listed(kind) for kind in kinds]
  parts.append("</body></html>\n")
  return "\n".join(parts)
