"""How well the quality findings find planted problems in real photos, and what else they flag.

    python benchmarks/quality_findings.py [--grid 3] [--quality 90] [--crops 3000]

The tree: the 15 real photos of imagesets_testing.real_photos, its 6 `more` (a macro, a sky,
a portrait, a photo blurred by the camera's motion: truly blurry, a scanned page, text) and
their `--grid` x `--grid` tiles, at their own resolution (~200 px photos, 44-67 px tiles at
3 x 3: skies, bricks, grass, microscopy, a starfield), as JPEGs; 7 of the photos are grey
scans stored as RGB, so they and their tiles are truly "grayscale" (checked on their
pixels). Planted: each kind of imagesets_testing.quality_cases made from each photo (the
grey photos get no "grayscale" plant), and the other shapes of a kind
(`quality_cases.ALSO`: a washed-out frame is overexposed). Every picture is fingerprinted
as a build does (`image_hashes.of_bytes`) and the findings made as a build makes them
(`image_quality.find`, over the whole tree).

Reports, per kind: planted found (recall); flags that are true (the planted kind,
"grayscale" on a grey picture, a size kind where the size says so: a 25 px high tile of the
text photo is tiny, a real problem of `REAL_PROBLEMS`); other flags (false, strictly:
counted even where the planted problem implies them, e.g. a blown-out frame is also low in
information), listed by name with the score; precision = true / all flags; on real = the
same on the real photos and tiles only.

Then what no threshold here can do, measured: `dark` against each photo underexposed by 1-5
stops in linear light (`quality_cases.underexposed`) at several cuts, and a cut relative to
the class on `--crops` real-photo crops, 10 % of them underexposed; camera shake
(`quality_cases.shaken`) against `blurry` and a measure of the edges' direction.
"""

import argparse
import collections

import numpy as np
import PIL.Image

from imagesets.analysis import duplicates
from imagesets.analysis import image_hashes
from imagesets.analysis import image_quality
from imagesets_testing import photo_crops
from imagesets_testing import quality_cases
from imagesets_testing import real_photos
from imagesets_testing import sample_images


# Real photos that truly have a problem (and so do their tiles).
REAL_PROBLEMS = {"clock_motion": "blurry"}


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--grid", type=int, default=3)
  parser.add_argument("--quality", type=int, default=90)
  parser.add_argument("--crops", type=int, default=3000,
                      help="real-photo crops for the class-relative dark cut (0: none)")
  args = parser.parse_args()
  pictures, planted = {}, {}  # name -> pixels; name -> planted kind
  photos = real_photos.photos() | real_photos.more()
  tiles = real_photos.tiles(args.grid, photos)
  for name, pixels in photos.items():
    pictures[name] = pixels
    pictures.update({key: tile for key, tile in tiles.items() if key.startswith(f"{name}#")})
    grey = (pixels.max(axis=2) == pixels.min(axis=2)).all()
    for kind, make in quality_cases.MAKERS.items():
      if not (grey and kind == "grayscale"):
        pictures[f"{name}.{kind}"] = make(pixels)
        planted[f"{name}.{kind}"] = kind
      for shape, also in quality_cases.ALSO.get(kind, {}).items():
        pictures[f"{name}.{shape}"] = also(pixels)
        planted[f"{name}.{shape}"] = kind
  members = [duplicates.Member("train", name, None) for name in pictures]
  fingerprints = [image_hashes.of_bytes(sample_images.encode(p, "JPEG", quality=args.quality))
                  for p in pictures.values()]
  findings = image_quality.find(members, fingerprints)
  flagged = collections.defaultdict(set)
  for finding in findings:
    flagged[finding.file_name].add(finding.kind)

  def truly(name: str, kind: str) -> bool:
    pixels = pictures[name]
    grey = (pixels.max(axis=2).astype(int) - pixels.min(axis=2) <= 1).all()
    real_problem = REAL_PROBLEMS.get(name.split("#")[0]) == kind  # (a photo and its tiles)
    height, width = pixels.shape[:2]  # (a size kind is a fact of the size, not a judgement)
    small = kind == "tiny" and min(height, width) < image_quality.TINY_SIDE
    narrow = (kind == "odd_aspect_ratio"
              and min(width / height, height / width) < image_quality.ODD_ASPECT)
    return (planted.get(name) == kind or (kind == "grayscale" and grey) or real_problem
            or small or narrow)

  unplanted = len(pictures) - len(planted)
  print(f"{len(pictures)} pictures: {unplanted} real photos and tiles, {len(planted)} planted "
        f"(JPEG quality {args.quality})")
  print(f"{'kind':18} {'planted found':>14} {'true flags':>10} {'other: real':>11} "
        f"{'other: planted':>14} {'precision':>9} {'on real':>7}")
  others = []
  for kind in image_quality.KINDS:
    of_kind = [f for f in findings if f.kind == kind]
    total = sum(k == kind for k in planted.values())
    found = sum(kind in flagged[n] for n, k in planted.items() if k == kind)
    true = [f for f in of_kind if truly(f.file_name, kind)]
    false = [f for f in of_kind if not truly(f.file_name, kind)]
    others += false
    precision = len(true) / len(of_kind) if of_kind else float("nan")
    on_real = sum(f.file_name not in planted for f in false)
    real_true = sum(f.file_name not in planted for f in true)
    print(f"{kind:18} {found:>7}/{total:<6} {len(true):>10} {on_real:>11} "
          f"{len(false) - on_real:>14} {precision:>9.2f} "
          f"{real_true / (real_true + on_real) if real_true + on_real else float('nan'):>7.2f}")
  for name, kind in REAL_PROBLEMS.items():
    of_photo = [n for n in pictures if n == name or n.startswith(f"{name}#")]
    print(f"real {kind} photo {name} and its tiles: {sum(kind in flagged[n] for n in of_photo)}"
          f" of {len(of_photo)} flagged {kind}")
  print("(size kinds are counted true where the size says so: a side under "
        f"{image_quality.TINY_SIDE} px is tiny, an aspect under {image_quality.ODD_ASPECT} odd, "
        "so odd aspect ratio's precision is 1 by construction; tiny's relative rule is judged)")
  print(f"all kinds: {len(findings) - len(others)} true of {len(findings)} flags "
        f"({(len(findings) - len(others)) / max(1, len(findings)):.2f}); real photos and tiles "
        f"with another flag than grayscale: "
        f"{len({f.file_name for f in others if f.file_name not in planted})} of {unplanted}")
  for finding in others:
    origin = f"planted {planted[finding.file_name]}" if finding.file_name in planted else "real"
    print(f"  other: {finding.kind} {finding.file_name} ({origin}) score {finding.score:g}")
  real = {name: pixels for name, pixels in pictures.items() if name not in planted}
  _dark_against_exposure(photos, real, args.quality)
  if args.crops:
    _dark_relative_to_class(args.crops, args.quality)
  _camera_shake(photos, real, args.quality)


def _measured(pixels, quality: int) -> tuple:
  return image_hashes.of_bytes(sample_images.encode(pixels, "JPEG", quality=quality)).quality


def _dark_against_exposure(photos: dict, real: dict, quality: int) -> None:
  """`dark` is the 99th percentile of brightness under a cut. Each photo underexposed by
  1-5 stops in linear light (as a camera's exposure does) against the real pictures, which
  are all exposed as their scenes ask: what each cut finds, and what else it flags."""
  real_p99 = sorted((_measured(p, quality)[0], name) for name, p in real.items())
  under = {stops: [_measured(quality_cases.underexposed(p, stops), quality)[0]
                   for p in photos.values()] for stops in (1, 2, 3, 4, 5)}
  under["12 %"] = [_measured(quality_cases.dark(p), quality)[0] for p in photos.values()]
  print(f"\ndark against exposure: p99 brightness of the {len(photos)} photos underexposed, "
        "min-max: " + ", ".join(f"{k}{' stops' if isinstance(k, int) else ''} "
                                  f"{min(v):.2f}-{max(v):.2f}" for k, v in under.items()))
  print(f"the {len(real)} real pictures' lowest: "
        + ", ".join(f"{name} {p99:.3f}" for p99, name in real_p99[:8]))
  heads = [f"{k} st" if isinstance(k, int) else k for k in under]
  print(f"{'cut':>6} {'real flagged':>12} " + " ".join(f"{head:>8}" for head in heads))
  for cut in (image_quality.DARK, 0.3, 0.25, 0.2, 0.15):
    flagged = sum(p99 < cut for p99, _ in real_p99)
    print(f"{cut:>6} {flagged:>12} " + " ".join(
        f"{sum(p < cut for p in v):>4}/{len(v):<3}" for v in under.values()))


def _dark_relative_to_class(count: int, quality: int) -> None:
  """A cut relative to the class: dark only where p99 is also under a share of the class's
  median p99 (a class of dim scenes is not all dark). On `count` crops of the 15 real photos
  (a class per photo), 10 % of them underexposed by 2, 3 or 4 stops."""
  rng = np.random.default_rng(0)
  rows = []  # (class, p99, stops under: 0 for a crop as it was taken)
  for picture in photo_crops.pictures(count, seed=0, scenes=15, share_in_bursts=0.0):
    stops = int(rng.choice([2, 3, 4])) if rng.uniform() < 0.1 else 0
    pixels = quality_cases.underexposed(picture.pixels, stops) if stops else picture.pixels
    rows.append((picture.scene, _measured(pixels, quality)[0], stops))
  median = {scene: float(np.median([p99 for s, p99, _ in rows if s == scene]))
            for scene in {row[0] for row in rows}}
  print(f"\ndark relative to the class, {count} real-photo crops, "
        f"{sum(bool(row[2]) for row in rows)} underexposed:")
  for share in (None, 0.6, 0.5, 0.4):
    flags = [(stops, p99 < image_quality.DARK and (share is None or p99 < share * median[s]))
             for s, p99, stops in rows]
    true = sum(flag and stops > 0 for stops, flag in flags)
    flagged = sum(flag for _, flag in flags)
    found = {n: f"{sum(flag for stops, flag in flags if stops == n)}/"
                f"{sum(stops == n for stops, _ in flags)}" for n in (2, 3, 4)}
    print(f"  {'cut alone' if share is None else f'and < {share} x class median':>26}: "
          f"precision {true / max(1, flagged):.2f} ({flagged} flags); found by stops under "
          + ", ".join(f"{n}: {v}" for n, v in found.items()))


def _directions(pixels, quality: int) -> np.ndarray:
  """The deviation of second differences along 0, 45, 90 and 135 degrees on the grey copy
  blur is measured on (its frame left out)."""
  small = image_hashes.decode_small(sample_images.encode(pixels, "JPEG", quality=quality))[0]
  grey = image_quality.grey_copy(PIL.Image.fromarray(image_quality.at_measured_scale(small)))
  g = np.asarray(grey, np.int32)
  centre = g[1:-1, 1:-1]
  steps = [(g[1:-1, :-2], g[1:-1, 2:]), (g[2:, :-2], g[:-2, 2:]), (g[:-2, 1:-1], g[2:, 1:-1]),
           (g[:-2, :-2], g[2:, 2:])]
  return np.array([(before - 2 * centre + after).std() for before, after in steps])


def _camera_shake(photos: dict, real: dict, quality: int) -> None:
  """Camera shake: each photo smeared along a line. Found `blurry`, and what a measure of
  direction (the weakest direction's edges over the strongest's) would have to tell apart."""
  print("\ncamera shake (a line of share of the longer side, at degrees): found blurry; "
        "weakest / strongest direction's edges, 5th-95th percentile")
  real_ratio = [d.min() / d.max() for d in (_directions(p, quality) for p in real.values())]
  print(f"  real pictures: {np.percentile(real_ratio, 5):.2f}-"
        f"{np.percentile(real_ratio, 95):.2f} (least {min(real_ratio):.2f})")
  for share in (1 / 25, 1 / 12):
    for degrees in (0, 45, 90):
      shaken = [quality_cases.shaken(p, share, degrees) for p in photos.values()]
      members = [duplicates.Member("train", str(k), None) for k in range(len(shaken))]
      found = image_quality.find(
          members, [image_hashes.of_bytes(sample_images.encode(p, "JPEG", quality=quality))
                    for p in shaken])
      ratio = [d.min() / d.max() for d in (_directions(p, quality) for p in shaken)]
      print(f"  1/{round(1 / share)} at {degrees:>2}: blurry "
            f"{sum(f.kind == 'blurry' for f in found):>2} of {len(shaken)}; "
            f"{np.percentile(ratio, 5):.2f}-{np.percentile(ratio, 95):.2f}")


if __name__ == "__main__":
  main()
