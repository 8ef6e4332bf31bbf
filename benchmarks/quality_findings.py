"""How well the quality findings find planted problems in real photos, and what else they flag.

    python benchmarks/quality_findings.py [--grid 3] [--quality 90]

The tree: the 15 real photos of imagesets_testing.real_photos, its 6 `more` (a macro, a sky,
a portrait, a photo blurred by the camera's motion: truly blurry, a scanned page, text) and
their `--grid` x `--grid` tiles, at their own resolution (~200 px photos, 44-67 px tiles at
3 x 3: skies, bricks, grass, microscopy, a starfield), as JPEGs; 7 of the photos are grey scans stored as RGB, so they and
their tiles are truly "grayscale" (checked on their pixels). Planted: each kind of
imagesets_testing.quality_cases made from each photo (the grey photos get no "grayscale"
plant), and the other shapes of a kind (`quality_cases.ALSO`: a washed-out frame is
overexposed). Every picture is fingerprinted as a build does (`image_hashes.of_bytes`) and the
findings made as a build makes them (`image_quality.find`, over the whole tree).

Reports, per kind: planted found (recall); flags that are true (the planted kind, "grayscale"
on a grey picture, a size kind where the size says so: a 25 px high tile of the text photo
is tiny, a real problem of `REAL_PROBLEMS`); other flags (false, strictly: counted even where the planted
problem implies them, e.g. a blown-out frame is also low in information), listed by name
with the score; precision = true / all flags; on real = the same on the real photos and
tiles only.
"""

import argparse
import collections

from imagesets.analysis import duplicates
from imagesets.analysis import image_hashes
from imagesets.analysis import image_quality
from imagesets_testing import quality_cases
from imagesets_testing import real_photos
from imagesets_testing import sample_images


# Real photos that truly have a problem (and so do their tiles).
REAL_PROBLEMS = {"clock_motion": "blurry"}


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--grid", type=int, default=3)
  parser.add_argument("--quality", type=int, default=90)
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


if __name__ == "__main__":
  main()
