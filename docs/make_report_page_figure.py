"""Draws docs/report_page.png: the top of a real version's page, as headless Chromium shows it.

    python docs/make_report_page_figure.py

The tree is made of real photos (imagesets_testing: crops of the scikit-image sample photos,
one class per scene), with a copy in another split, a copy under another label and one
planted quality problem of each kind; version 1.1.0 then adds, removes, relabels and edits
a few photos. Both are built with `imagesets build`; the page is 1.1.0's against 1.0.0
(`imagesets report`), screenshotted by Debian's `chromium`: the top of the page, and the
page from its quality findings on (then the changes), side by side.
"""

import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import PIL.Image

from imagesets_testing import photo_crops
from imagesets_testing import planted_copies
from imagesets_testing import quality_cases
from imagesets_testing import sample_images
from imagesets_testing.trees import write_tree

OUT = pathlib.Path(__file__).resolve().parent / "report_page.png"
BIN = pathlib.Path(sys.executable).parent
CLASSES = {"chelsea": "cat", "coffee": "coffee", "rocket": "rocket",
           "motorcycle_left": "motorcycle", "astronaut": "astronaut"}


def _jpeg(pixels) -> bytes:
  return sample_images.encode(pixels, "JPEG", quality=90)


def _tree() -> dict[str, bytes]:
  photos = quality_cases.colour_photos()
  files = {}
  for i, picture in enumerate(photo_crops.pictures(400, scenes=15, size=(320, 240),
                                                   share_in_bursts=0.1)):
    if picture.scene in CLASSES:
      files[f"{CLASSES[picture.scene]}/IMG_{i:04d}.jpg"] = _jpeg(picture.pixels)
  for (kind, make), name in zip(quality_cases.MAKERS.items(), list(CLASSES) * 2):
    files[f"{CLASSES[name]}/IMG_9{len(files):03d}_{kind}.jpg"] = _jpeg(make(photos[name]))
  first = sorted(n for n in files if n.startswith("cat/"))[0]
  pixels = np.asarray(PIL.Image.open(__import__("io").BytesIO(files[first])))
  files["cat/IMG_0999_copy.jpg"] = planted_copies.exact(pixels)
  files["coffee/IMG_0998_resent.jpg"] = planted_copies.jpeg_q60(pixels)
  return files


def _run(*args: str) -> None:
  subprocess.run([str(BIN / "imagesets"), *args], check=True, capture_output=True)


def main() -> None:
  chromium = shutil.which("chromium") or shutil.which("chromium-browser")
  if chromium is None:
    raise SystemExit("needs Debian's chromium (apt-get install chromium)")
  with tempfile.TemporaryDirectory() as tmp:
    tmp = pathlib.Path(tmp)
    tree = pathlib.Path(write_tree(tmp / "photos", _tree()))
    _run("build", str(tree), "--name", "photos", "--version", "1.0.0", "--data-dir",
         str(tmp / "d"))
    names = sorted(p for p in tree.rglob("IMG_0*.jpg"))
    names[3].unlink()
    names[5].rename(tree / "coffee" / names[5].name)
    names[7].write_bytes(_jpeg(np.fliplr(np.asarray(PIL.Image.open(names[7])))))
    (tree / "cat" / "IMG_2000.jpg").write_bytes(_jpeg(quality_cases.colour_photos()["chelsea"]))
    _run("build", str(tree), "--name", "photos", "--version", "1.1.0", "--data-dir",
         str(tmp / "d"))
    page = tmp / "page.html"
    _run("report", "photos:1.1.0", "--against", "photos:1.0.0", "--data-dir", str(tmp / "d"),
         "--out", str(page))
    # the top of the page; the same page from its quality findings on (the sections above
    # cut out: headless Chromium's screenshot does not scroll to a #fragment)
    html = page.read_text()
    head, _, rest = html.partition("<h1>")
    lower = tmp / "lower.html"
    lower.write_text(head + rest[rest.index('<h2 id="quality">'):])
    columns = []
    for part in (page, lower):
      shot = tmp / f"shot{len(columns)}.png"
      subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                      "--hide-scrollbars", "--window-size=820,1300", f"--screenshot={shot}",
                      part.as_uri()], check=True, capture_output=True)
      columns.append(PIL.Image.open(shot).convert("RGB"))
    figure = PIL.Image.new("RGB", (1660, 1300), "white")
    figure.paste(columns[0], (0, 0))
    figure.paste(columns[1], (840, 0))
    figure.resize((1245, 975), PIL.Image.Resampling.LANCZOS).save(OUT, optimize=True)
  print(f"wrote {OUT}")


if __name__ == "__main__":
  main()
