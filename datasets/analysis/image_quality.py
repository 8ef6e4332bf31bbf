"""Quality findings: images that are dark, overexposed, blurry, low in information,
grayscale stored as colour, of an odd aspect ratio, or tiny.

The measures come from the fingerprint's small decode (`image_hashes.decode_small`: no
other decode), one tuple per image (`measure`, stored in the fingerprint). CleanVision
(cleanlab/cleanvision, `issue_managers/image_property.py`) is the reference for the
definitions and default thresholds of the first five and the aspect ratio:

* dark: the 99th percentile of the pixels' perceived brightness
  (sqrt(.241 R^2 + .691 G^2 + .068 B^2) / 255) is below `DARK` (0.37);
* overexposed: their 5th percentile is above 1 - `LIGHT` (0.95: blown out), or above
  1 - `WASHED_OUT` (0.85) with the faint edges of blur below (washed out: haze, a flash too
  close, every pixel 235-255). CleanVision's cut alone leaves a washed-out frame (0.92-0.95,
  edges 4-9) unflagged, and then blurry for its faint edges; a bright scene with a sharp
  subject (snow, a product on white) keeps its edges (19-29) and is not flagged; real
  photos and tiles of the tests reach 0.75 (0.77 in smaller tiles: a grey sky);
* blurry: on a grey copy resized to at most `BLUR_SIDE` (64) px a side (grey first, then
  resized: CleanVision resizes the colour image), the standard deviation b of PIL's
  FIND_EDGES response is below `BLUR_EDGES` (12), and the image is neither overexposed
  nor low in information (its edges are faint for that reason; a dark picture's are too,
  but its detail, below, is a ratio of its own edges: a blurred dark photo is both dark
  and blurry, a sharp one dark only). CleanVision flags 1 - exp(-b / 100) < 0.17, i.e.
  b < 18.6, but takes b over the whole filtered image, whose 1-pixel frame PIL leaves
  unfiltered (the picture's own grey values): a blurred bright picture's frame alone keeps b
  near 30, so it is never flagged. We leave the frame out; on the real photos of the tests,
  sharp pictures give b of 19 to 82, a Gaussian blur of 1/40 of the side 3 to 18, and one of
  1/25 of the side 2 to 8, hence the lower threshold. Faint edges alone also mark soft
  scenes (the moon's surface, a blurred background, a dim microscopy field: 4 to 12), so
  the picture must also lack fine detail: its "detail", b over the same deviation on the
  grey copy box-reduced by 2, is below `BLUR_DETAIL` (0.52). Blur takes the finest scale
  and leaves the coarser (a smooth sinusoid gives ~0.27, noise ~1). The threshold is
  fitted, not derived: at JPEG quality 90, photos blurred by 1/25 of their side give 0.27
  to 0.51 (but a brick wall blurred flat, 0.77) and real pictures of at least ~64 px with
  faint edges 0.526 or more (flat walls ~0.9), real-photo crops 0.495 and up (2 of 3,000
  flagged); at quality 75, or on tiles of 33-50 px, the two overlap
  (docs/know_your_data.md has the figures);
* low information: the entropy (bits) of the RGB histogram (PIL's `Image.entropy`) is
  below `LOW_ENTROPY` (3.0), and the image is not overexposed (a blown-out frame's few
  grey levels are its overexposure: one finding says it);
* grayscale stored as colour: the 99th percentile (nearest rank) of a pixel's channel spread (max - min of
  R, G, B) is at most `GREY_SPREAD` (4 of 255: JPEG rounding), and the image is neither dark
  nor overexposed (a black or white frame tells nothing of colour). CleanVision flags PIL mode
  "L" only, which never happens to images stored with three channels;
* odd aspect ratio: min(w / h, h / w) < `ODD_ASPECT` (0.35), on the stored size;
* tiny (CleanVision's `odd_size`, on the small side): a shorter side under `TINY_SIDE`
  (32 px), or sqrt(h * w) under the version's median of it divided by `TINY_RATIO` (5).

Measured on the small decode (shorter side 64-127 px for JPEGs, other formats box-reduced
to that; CleanVision resizes to 64 px for blur anyway), the percentiles and entropy differ from a full decode's by a few
hundredths (docs/know_your_data.md, "Quality findings").
"""

import collections
import dataclasses
import json
import math
import pathlib
from typing import Sequence

import numpy as np
import PIL.Image
import PIL.ImageFilter

QUALITY_FILE = "quality.json"  # beside duplicates.json: published and fetched with it
KINDS = ("dark", "overexposed", "blurry", "low_information", "grayscale",
         "odd_aspect_ratio", "tiny")
DARK = 0.37
LIGHT = 0.05
WASHED_OUT = 0.15
BLUR_EDGES = 12.0
BLUR_DETAIL = 0.52
BLUR_SIDE = 64
LOW_ENTROPY = 3.0
GREY_SPREAD = 4
ODD_ASPECT = 0.35
TINY_SIDE = 32
TINY_RATIO = 5.0
SCALE_SIDE = 64  # image_hashes.SMALL_DECODE: the shorter side measures are taken at, at least
# What each kind's score is (the value its threshold was applied to).
SCORES = {"dark": "p99 brightness", "overexposed": "1 - p5 brightness", "blurry": "edges",
          "low_information": "entropy", "grayscale": "channel spread",
          "odd_aspect_ratio": "aspect", "tiny": "sqrt(h*w) px"}
# measure()'s tuple: (p99 brightness, p5 brightness, edges b, entropy, p99 channel spread,
# detail: b over the edges' deviation at half the scale; stored rows of older builds held
# the first five: `record_index.FORMAT` 3 has every one)
FIELDS = ("brightness_p99", "brightness_p5", "edges", "entropy", "channel_spread_p99",
          "detail")


def _ranked(values: np.ndarray, shares: Sequence[float]) -> list:
  """The values at ranks round(share * (n - 1)) (nearest rank: a partition, not a sort)."""
  ranks = [round(share * (values.size - 1)) for share in shares]
  parted = np.partition(values, ranks)
  return [parted[rank] for rank in ranks]


# 1000 x the brightness weights x the squares of 0..255 (integers: the same on every CPU;
# at most 65,025,000, an int32)
_WEIGHTED_SQUARES = [np.arange(256, dtype=np.int32) ** 2 * weight for weight in (241, 691, 68)]


def _deviation(values: np.ndarray) -> float:
  """The standard deviation of integers, summed exactly (no float summation order)."""
  n, total = values.size, int(values.sum(dtype=np.int64))
  squares = int((values.astype(np.int64) ** 2).sum())
  return float(np.sqrt(max(0, n * squares - total * total))) / n


def measure(rgb: np.ndarray) -> tuple[float, ...]:
  """The measures of one image's (small) RGB decode, rounded for storage (`FIELDS`).
  Integer arithmetic wherever the result is stored, so it is the same on every machine.
  A larger decode (a PNG is decoded in full) is first box-reduced by an integer factor to a
  shorter side of `SCALE_SIDE` to 2x that, the scale a JPEG's small decode has: the same
  measures for the same picture whatever its format, at the same cost."""
  rgb = at_measured_scale(rgb)
  red, green, blue = (rgb[..., c] for c in range(3))
  spread = np.maximum(np.maximum(red, green), blue) - np.minimum(np.minimum(red, green), blue)
  brightness = (_WEIGHTED_SQUARES[0][red] + _WEIGHTED_SQUARES[1][green]
                + _WEIGHTED_SQUARES[2][blue]).ravel()  # 1000 x (255 x brightness)^2
  p5, p99 = (float(np.sqrt(int(v) / 1000)) / 255 for v in _ranked(brightness, (0.05, 0.99)))
  image = PIL.Image.fromarray(rgb)
  grey = grey_copy(image)
  fine = _edge_deviation(grey)
  coarse = _edge_deviation(grey.reduce(2)) if min(grey.size) >= 8 else 0.0  # (of the grey
  # copy at most BLUR_SIDE a side: one under 8 px, a sliver, has detail 1.0)
  return (round(p99, 4), round(p5, 4), round(fine, 3),
          round(float(image.entropy()), 4), float(_ranked(spread.ravel(), (0.99,))[0]),
          round(fine / coarse, 3) if coarse else 1.0)


def at_measured_scale(rgb: np.ndarray) -> np.ndarray:
  """A decode box-reduced by an integer factor to a shorter side of `SCALE_SIDE` to 2x that
  (a JPEG's small decode is already)."""
  factor = min(rgb.shape[:2]) // SCALE_SIDE
  return np.asarray(PIL.Image.fromarray(rgb).reduce(factor)) if factor >= 2 else rgb


def grey_copy(image: PIL.Image.Image) -> PIL.Image.Image:
  """The grey copy blur is measured on: at most `BLUR_SIDE` a side (grey first, then
  resized)."""
  grey = image.convert("L")
  ratio = max(image.size) / BLUR_SIDE
  if ratio > 1:
    grey = grey.resize((max(1, int(image.width // ratio)), max(1, int(image.height // ratio))))
  return grey


def _edge_deviation(grey: PIL.Image.Image) -> float:
  """The standard deviation of PIL's FIND_EDGES response, its unfiltered 1-pixel frame
  left out."""
  edges = np.asarray(grey.filter(PIL.ImageFilter.FIND_EDGES))
  return _deviation(edges[1:-1, 1:-1] if min(edges.shape) > 2 else edges)


@dataclasses.dataclass(frozen=True)
class Finding:
  kind: str
  split: str
  file_name: str
  label: str | None
  score: float  # the value the threshold was applied to (see the module's definitions)

  def to_json(self) -> dict:
    return {"kind": self.kind, "split": self.split, "file_name": self.file_name,
            "label": self.label, "score": self.score}


_UNMEASURED = (1.0, 0.0, 1e9, 8.0, 255.0, 1.0)  # (an image without measures: its size only)


def _kinds(values: Sequence, heights: Sequence[int], widths: Sequence[int],
           median_side: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """{kind: (which images have it, the scores)} of N images: their measures (`FIELDS`),
  stored sizes, and the version's `median_side`. One numpy pass a kind (a version's
  20,000 images in milliseconds); a score is the float the kind's threshold is applied to."""
  p99, p5, edges, entropy, spread, detail = np.asarray(values, np.float64).reshape(
      -1, len(FIELDS)).T
  light = 1 - p5
  over = (light < LIGHT) | ((light < WASHED_OUT) & (edges < BLUR_EDGES))
  # (a black, white or washed-out frame has faint edges and no hue)
  exposed = (p99 >= DARK) & ~over
  side = np.array([(h * w) ** 0.5 for h, w in zip(heights, widths)], np.float64)  # (C's pow)
  heights, widths = np.asarray(heights, np.float64), np.asarray(widths, np.float64)
  with np.errstate(divide="ignore", invalid="ignore"):
    aspect = np.where((heights > 0) & (widths > 0),
                      np.minimum(widths / heights, heights / widths), 0.0)
  return {
      "dark": (p99 < DARK, p99),
      "overexposed": (over, light),
      # (a dark picture's edges are faint for its darkness, but its detail is a ratio of its
      # own edges: blur takes its fine scale as it does a bright one's; a white frame's is noise)
      "blurry": ((edges < BLUR_EDGES) & (detail < BLUR_DETAIL) & ~over
                 & (entropy >= LOW_ENTROPY), edges),
      "low_information": ((entropy < LOW_ENTROPY) & ~over, entropy),  # (a white frame's, implied)
      "grayscale": ((spread <= GREY_SPREAD) & exposed, spread),
      "odd_aspect_ratio": (aspect < ODD_ASPECT, aspect),
      "tiny": ((np.minimum(heights, widths) < TINY_SIDE) | (side < median_side / TINY_RATIO),
               side),
  }


_ROUNDED = {"overexposed": 4, "odd_aspect_ratio": 4, "tiny": 1}  # digits the report keeps


def _scores(values, heights, widths, median_side: float) -> list[list[tuple[int, float]]]:
  """For each kind (`KINDS` order), [(image, score)] of the images that have it."""
  found = _kinds(values, heights, widths, median_side)
  scored = []
  for kind in KINDS:
    which, scores = found[kind]
    at = np.flatnonzero(which)
    digits = _ROUNDED.get(kind)
    scored.append([(i, score if digits is None else round(score, digits))
                   for i, score in zip(at.tolist(), scores[at].tolist())])
  return scored


def _measures(fingerprints: Sequence) -> list[tuple[float, ...]]:
  """Each fingerprint's measures (`FIELDS`, numbers), `_UNMEASURED` for one without."""
  measures = [fingerprint.quality or _UNMEASURED for fingerprint in fingerprints]
  if set(map(len, measures)) - {len(FIELDS)}:
    wrong = next(m for m in measures if len(m) != len(FIELDS))
    raise ValueError(f"quality measures {list(wrong)!r:.120} are not the {len(FIELDS)} "
                     f"values of {FIELDS}")
  return measures


def find(members: Sequence, fingerprints: Sequence) -> list[Finding]:
  """Every finding of the images (`duplicates.Member`s and their fingerprints), by kind
  (`KINDS` order), then split and file name. Images without measures (fingerprints of an
  older build) are left out of all but the size kinds."""
  side = median_side(collections.Counter((f.height, f.width) for f in fingerprints))
  found = _scores(_measures(fingerprints), [f.height for f in fingerprints],
                  [f.width for f in fingerprints], side)
  return sorted((Finding(kind, members[i].split, members[i].file_name, members[i].label, score)
                 for kind, scored in zip(KINDS, found) for i, score in scored),
                key=finding_order)


def median_side(sizes) -> float:
  """sqrt of the median area of the images, given as {(height, width): images} (a sum of
  parts: Beam's workers count theirs); sizes with a 0 side are not measured."""
  areas = sorted((height * width, count) for (height, width), count in sizes.items()
                 if height and width and count)
  total = sum(count for _, count in areas)
  if not total:
    return 0.0
  middle, seen, wanted = [], 0, sorted({(total - 1) // 2, total // 2})
  for area, count in areas:  # (the middle one or two, as statistics.median takes them)
    middle += [area for at in wanted if seen <= at < seen + count]
    seen += count
  return (middle[0] if total % 2 else (middle[0] + middle[1]) / 2) ** 0.5


def findings_of(member, fingerprint, side: float) -> list[Finding]:
  """The findings of one image, in a version whose `median_side` is `side` (`find`'s)."""
  found = _scores(_measures([fingerprint]), [fingerprint.height], [fingerprint.width], side)
  return [Finding(kind, member.split, member.file_name, member.label, score)
          for kind, scored in zip(KINDS, found) for _, score in scored]


def finding_order(finding: Finding) -> tuple:
  """`find`'s order, total: by kind (`KINDS`), split and file name, then (one name twice)
  label and score."""
  return (KINDS.index(finding.kind), finding.split, finding.file_name,
          finding.label is not None, finding.label or "", finding.score)


def counts(findings: Sequence[Finding]) -> dict[str, int]:
  """{kind: number of images}, in `KINDS` order, kinds found only."""
  found = collections.Counter(f.kind for f in findings)
  return {kind: found[kind] for kind in KINDS if found[kind]}


def summary(findings: Sequence[Finding]) -> str:
  """'no quality findings' or '5 quality findings: 3 dark, 2 tiny' (an image can have two)."""
  if not findings:
    return "no quality findings"
  return (f"{len(findings)} quality finding{'s' if len(findings) != 1 else ''}: "
          + ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in counts(findings).items()))


def to_json(findings: Sequence[Finding], num_images: int) -> dict:
  """The stored report (`QUALITY_FILE`)."""
  return {"num_images": num_images, "counts": counts(findings),
          "thresholds": {"dark": DARK, "light": LIGHT, "blur_edges": BLUR_EDGES,
                         "blur_detail": BLUR_DETAIL, "blur_side": BLUR_SIDE,
                         "low_entropy": LOW_ENTROPY, "grey_spread": GREY_SPREAD,
                         "odd_aspect": ODD_ASPECT, "tiny_side": TINY_SIDE,
                         "tiny_ratio": TINY_RATIO},
          "findings": [f.to_json() for f in findings]}


class BadQualityReport(ValueError):
  """A stored quality report that cannot be read (named, with the fix)."""


def from_json(report, source: str = QUALITY_FILE) -> list[Finding]:
  """The findings of a stored report (untrusted: every field checked)."""
  try:
    rows = report["findings"]
    if not isinstance(rows, list):
      raise TypeError("findings is not a list")
    findings = []
    for row in rows:
      kind, split, name, label, score = (row["kind"], row["split"], row["file_name"],
                                         row["label"], row["score"])
      if (kind not in KINDS or not isinstance(split, str) or not isinstance(name, str)
          or not (label is None or isinstance(label, str))
          or isinstance(score, bool) or not isinstance(score, (int, float))
          or not math.isfinite(score)):  # (a measure's value: never NaN nor infinite)
        raise ValueError(f"bad finding {str(row)[:120]}")
      findings.append(Finding(kind, split, name, label, float(score)))
    return findings
  except (KeyError, TypeError, ValueError, OverflowError) as why:  # (OverflowError: an
    # integer score too large for a float)
    raise BadQualityReport(f"{source}: not a quality report ({why}); recompute it with "
                           "`imagesets report SPEC --recompute`") from None


def read_stored(version_dir) -> list[Finding] | None:
  """The findings stored beside a version, or None when it has no quality report."""
  path = pathlib.Path(version_dir) / QUALITY_FILE
  if not path.exists():
    return None
  try:
    report = json.loads(path.read_text())
  except (ValueError, RecursionError) as why:  # (RecursionError: JSON nested too deep)
    raise BadQualityReport(f"{path}: not JSON ({why}); recompute it with `imagesets report "
                           "SPEC --recompute`") from None
  return from_json(report, str(path))
