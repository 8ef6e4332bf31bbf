"""Quality findings on planted cases made from real photos: each kind found, real photos not
flagged, the measures of the small decode close to a full decode's, stored reports checked."""

import collections

import numpy as np
import PIL.Image
import pytest

from imagesets.analysis import duplicates
from imagesets.analysis import image_hashes
from imagesets.analysis import image_quality
from imagesets_testing import quality_cases
from imagesets_testing import real_photos
from imagesets_testing import sample_images


def _find(pictures: dict[str, np.ndarray]) -> dict[str, set[str]]:
  """{file name: kinds found} of JPEGs of the pictures (quality 90, as a camera's)."""
  members = [duplicates.Member("train", name, "x") for name in pictures]
  fingerprints = [image_hashes.of_bytes(sample_images.encode(p, "JPEG", quality=90))
                  for p in pictures.values()]
  found = {name: set() for name in pictures}
  for finding in image_quality.find(members, fingerprints):
    found[finding.file_name].add(finding.kind)
  return found


def test_each_planted_kind_is_found_on_every_colour_photo_and_the_photos_are_not_flagged():
  photos = quality_cases.colour_photos()
  assert len(photos) == 8
  pictures = dict(photos)
  for name, pixels in photos.items():
    for kind, make in quality_cases.MAKERS.items():
      pictures[f"{name}.{kind}"] = make(pixels)
  found = _find(pictures)
  for name in photos:
    assert found[name] == set(), name  # a real photo, as it was taken
    for kind in quality_cases.MAKERS:
      assert kind in found[f"{name}.{kind}"], (name, kind, found[f"{name}.{kind}"])
  # a blurred starfield loses its stars' highlights: it is dark, and blurry all the same
  assert found["hubble_deep_field.blurry"] == {"dark", "blurry"}


def test_planted_kinds_rarely_bring_others():
  """One finding a problem: a blown-out frame is overexposed, not also low in information
  (its few grey levels are the overexposure); only a dark or blank frame may bring more."""
  photos = quality_cases.colour_photos()
  pictures = {f"{name}.{kind}": make(pixels) for name, pixels in photos.items()
              for kind, make in quality_cases.MAKERS.items() if name != "hubble_deep_field"}
  extra = {name: kinds - {name.split(".")[1]} for name, kinds in _find(pictures).items()}
  assert all(not kinds for name, kinds in extra.items()
             if not name.endswith((".dark", ".low_information"))), extra


def test_a_washed_out_frame_is_overexposed_and_not_blurry():
  """Every pixel 235-255 (haze, a flash too close): the darkest are not white, but the
  frame is overexposed all the same; its faint edges are not a missed focus."""
  photos = quality_cases.colour_photos()
  found = _find({name: quality_cases.washed_out(pixels) for name, pixels in photos.items()})
  assert found == {name: {"overexposed"} for name in photos}, found


def test_a_bright_scene_with_a_sharp_subject_is_not_overexposed():
  """Snow, a product on white: the frame as bright as a washed-out one, but with a sharp
  subject (2 % of it: the 5th percentile stays in the bright part) keeping its edges."""
  pictures = {}
  for name, pixels in quality_cases.colour_photos().items():
    height, width = pixels.shape[:2]
    small = np.asarray(PIL.Image.fromarray(pixels).resize((width // 7, height // 7)))
    scene = quality_cases.washed_out(pixels)
    top, left = (height - small.shape[0]) // 2, (width - small.shape[1]) // 2
    scene[top:top + small.shape[0], left:left + small.shape[1]] = small
    pictures[name] = scene
  found = _find(pictures)
  assert all(not kinds & {"overexposed", "blurry"} for kinds in found.values()), found


def test_grey_scans_stored_as_rgb_are_grayscale_and_nothing_else():
  grey = {name: pixels for name, pixels in real_photos.photos().items()
          if name not in quality_cases.colour_photos()}
  assert len(grey) == 7
  assert {name: kinds for name, kinds in _find(grey).items()} == {
      name: {"grayscale"} for name in grey}


def test_blur_is_measured_without_the_unfiltered_frame():
  """A blurred bright picture: PIL's FIND_EDGES leaves a 1-pixel frame of grey values, which
  alone keeps the edges' deviation near 30 (CleanVision's b, never under its 18.6)."""
  pixels = quality_cases.blurry(quality_cases.colour_photos()["motorcycle_left"])
  fingerprint = image_hashes.of_bytes(sample_images.encode(pixels, "JPEG", quality=90))
  assert fingerprint.quality[2] < image_quality.BLUR_EDGES
  small = image_hashes.decode_small(sample_images.encode(pixels, "JPEG", quality=90))[0]
  import PIL.Image, PIL.ImageFilter  # pylint: disable=import-outside-toplevel,multiple-imports
  image = PIL.Image.fromarray(small)
  resized = image.resize((64, round(64 * image.height / image.width)))
  with_frame = np.asarray(resized.convert("L").filter(PIL.ImageFilter.FIND_EDGES), float).std()
  assert with_frame > 18.6  # what the frame does to CleanVision's measure


def test_a_soft_scene_is_not_a_blurred_photo():
  """Faint edges mark soft scenes as well as blurred photos (the moon's surface, a camera
  man's blurred background, the retina's centre: edges 4-12); what tells them apart is the
  finest scale's share of the edges, which blur takes. The soft tiles (detail 0.75-1.0)
  are left alone and every colour photo blurred (0.27-0.40) is found: cases far from the
  cut (0.52), which a codec's rounding cannot move across it."""
  tiles = real_photos.tiles(3, real_photos.photos())
  soft = {name: tiles[name] for name in ("moon#1,2", "moon#2,2", "camera#0,2", "retina#1,1")}
  measured = {name: image_hashes.of_bytes(sample_images.encode(pixels, "JPEG", quality=90))
              for name, pixels in soft.items()}
  assert all(f.quality[2] < image_quality.BLUR_EDGES for f in measured.values())  # (faint)
  assert all("blurry" not in kinds for kinds in _find(soft).values()), _find(soft)
  blurred = {name: quality_cases.blurry(pixels)
             for name, pixels in quality_cases.colour_photos().items()}
  assert all("blurry" in kinds for kinds in _find(blurred).values()), _find(blurred)


def test_a_dark_photo_is_blurry_only_when_blurred():
  """A dark frame's edges are faint for its darkness alone; its detail, a ratio of its own
  edges, is what blur takes: the real photos at 12 % of their light (detail 0.62 and up,
  0.56 at JPEG quality 75) are dark only, the blurred starfield (0.47) dark and blurry."""
  photos = real_photos.photos() | real_photos.more()
  found = _find({name: quality_cases.dark(pixels) for name, pixels in photos.items()})
  assert found == {name: {"dark"} for name in photos}, found
  starfield = quality_cases.blurry(photos["hubble_deep_field"])
  assert _find({"starfield": starfield})["starfield"] == {"dark", "blurry"}


@pytest.mark.parametrize("measures", [[0.8, 0.1, 8.0], [0.8, 0.1, 8.0, 6.0, 30.0],
                                      [0.8, 0.1, 8.0, 6.0, 30.0, 0.6, 1.0],
                                      [0.8, 0.1, 8.0, 6.0, 30.0, float("nan")]])
def test_a_stored_fingerprint_holds_every_measure_or_none(measures):
  """A stored row whose measures are not every one of FIELDS, finite, is refused (a row of
  an older build, with five, among them): it would crash the findings or pass unjudged."""
  row = image_hashes.of_bytes(sample_images.jpeg(96, 128, seed=1)).to_json()
  assert len(row[6]) == len(image_quality.FIELDS) == 6
  with pytest.raises(ValueError, match="quality measures"):
    image_hashes.Fingerprint.from_json([*row[:6], measures])


def test_tiny_is_small_for_its_version_or_under_32_px():
  photos = quality_cases.colour_photos()
  members = [duplicates.Member("train", f"{i}", None) for i in range(4)]
  sizes = [(400, 300), (410, 300), (40, 50), (31, 300)]
  fingerprints = [image_hashes.Fingerprint("", 0, h, w, "jpeg", b"",
                                           image_quality.measure(photos["coffee"]))
                  for h, w in sizes]
  tiny = {f.file_name for f in image_quality.find(members, fingerprints) if f.kind == "tiny"}
  assert tiny == {"2", "3"}  # 45 px against a median of ~254: under a fifth; 31 px a side


def test_a_version_s_findings_are_each_image_s_own_whatever_the_images_beside_it():
  # `find` judges a version's images in one numpy pass a kind: each image gets what it
  # gets alone (`findings_of`, as Beam's workers judge it), scores and all, in KINDS order
  # then member order; measures at the thresholds, sizes with a 0 side, no measures.
  rng = np.random.default_rng(7)
  edges = [image_quality.DARK, 1 - image_quality.LIGHT, 1 - image_quality.WASHED_OUT,
           image_quality.BLUR_EDGES, image_quality.BLUR_DETAIL, image_quality.LOW_ENTROPY,
           image_quality.GREY_SPREAD, 0.0, 1.0]
  for count in (0, 1, 2, 37, 500):
    members, fingerprints = [], []
    for i in range(count):
      measures = tuple(float(rng.choice(edges)) if rng.random() < 0.4 else
                       float(rng.random() * rng.choice([1, 20, 300])) for _ in range(6))
      height, width = (int(rng.choice([0, 31, 32, 90, 333, int(rng.integers(1, 3000))]))
                       for _ in range(2))
      members.append(duplicates.Member(str(rng.choice(["train", "test"])),
                                       f"{i:04d}.jpg",
                                       str(rng.choice(["a", "b"]))))
      fingerprints.append(image_hashes.Fingerprint("", 0, height, width, "jpeg", b"",
                                                   () if rng.random() < 0.1 else measures))
    side = image_quality.median_side(collections.Counter(
        (f.height, f.width) for f in fingerprints))
    each = [finding for member, fingerprint in zip(members, fingerprints)
            for finding in image_quality.findings_of(member, fingerprint, side)]
    found = image_quality.find(members, fingerprints)
    assert found == sorted(each, key=image_quality.finding_order)
    assert len(found) == len(each) and (count < 500 or len({f.kind for f in found}) == 7)
    for finding in found:  # (the score the rule names, as the report rounds it)
      fingerprint = fingerprints[int(finding.file_name[:4])]
      if finding.kind == "tiny":
        assert finding.score == round((fingerprint.height * fingerprint.width) ** 0.5, 1)
      if finding.kind == "dark":
        assert finding.score < image_quality.DARK


def test_each_kind_s_score_is_the_value_its_threshold_is_applied_to():
  """Measures (p99, p5, edges, entropy, spread, detail) chosen for one kind each: the
  score the report keeps is the documented value (`SCORES`), rounded where it says."""
  cases = {  # name: (measures, height, width), the findings expected
      "dark": ((0.2, 0.01, 30.0, 6.0, 40.0, 0.9), 300, 400),
      "blown": ((1.0, 0.96123, 30.0, 6.0, 40.0, 0.9), 300, 400),
      "washed": ((1.0, 0.9, 5.0, 6.0, 40.0, 0.3), 300, 400),
      "blurry": ((0.9, 0.1, 7.5, 6.0, 40.0, 0.3), 300, 400),
      "flat": ((0.9, 0.1, 30.0, 2.5, 40.0, 0.9), 300, 400),
      "grey": ((0.9, 0.1, 30.0, 6.0, 3.0, 0.9), 300, 400),
      "strip": ((0.9, 0.1, 30.0, 6.0, 40.0, 0.9), 100, 301),
      "small": ((0.9, 0.1, 30.0, 6.0, 40.0, 0.9), 20, 50),
  }
  members = [duplicates.Member("train", name, None) for name in cases]
  fingerprints = [image_hashes.Fingerprint("", 0, h, w, "jpeg", b"", m)
                  for m, h, w in cases.values()]
  found = {(f.file_name, f.kind): f.score for f in image_quality.find(members, fingerprints)}
  assert found == {("dark", "dark"): 0.2, ("blown", "overexposed"): round(1 - 0.96123, 4),
                   ("washed", "overexposed"): round(1 - 0.9, 4), ("blurry", "blurry"): 7.5,
                   ("flat", "low_information"): 2.5, ("grey", "grayscale"): 3.0,
                   ("strip", "odd_aspect_ratio"): round(100 / 301, 4),
                   ("small", "tiny"): round((20 * 50) ** 0.5, 1)}
  with pytest.raises(ValueError, match="quality measures"):  # (not the six FIELDS)
    image_quality.find(members[:1], [image_hashes.Fingerprint("", 0, 9, 9, "png", b"",
                                                              (0.2, 0.01, 30.0))])


def test_the_small_decode_measures_what_a_full_decode_does():
  for name, pixels in real_photos.photos().items():
    data = sample_images.encode(pixels, "JPEG", quality=90)
    small = image_quality.measure(image_hashes.decode_small(data)[0])
    full = image_quality.measure(image_hashes.decode_rgb(data)[0])
    # (a starfield's points of light average out at a scaled decode: its p99 moves most)
    assert abs(small[0] - full[0]) < 0.1 and abs(small[1] - full[1]) < 0.06, name
    assert abs(small[3] - full[3]) < 0.5, name  # entropy, bits


def test_fingerprints_keep_their_measures_and_older_rows_still_read():
  data = sample_images.encode(quality_cases.colour_photos()["coffee"], "JPEG", quality=90)
  fingerprint = image_hashes.of_bytes(data)
  assert len(fingerprint.quality) == len(image_quality.FIELDS)
  assert image_hashes.Fingerprint.from_json(fingerprint.to_json()) == fingerprint
  older = image_hashes.Fingerprint.from_json(fingerprint.to_json()[:6])  # (built before)
  assert older.quality == () and older.pixels == fingerprint.pixels


def test_summary_and_stored_report_round_trip(tmp_path):
  findings = [image_quality.Finding("dark", "train", "a/1.jpg", "a", 0.1),
              image_quality.Finding("dark", "test", "a/2.jpg", "a", 0.2),
              image_quality.Finding("tiny", "train", "b/3.jpg", None, 20.0)]
  assert image_quality.summary(findings) == "3 quality findings: 2 dark, 1 tiny"
  assert image_quality.summary([]) == "no quality findings"
  report = image_quality.to_json(findings, 10)
  assert image_quality.from_json(report) == findings
  (tmp_path / image_quality.QUALITY_FILE).write_text(__import__("json").dumps(report))
  assert image_quality.read_stored(tmp_path) == findings
  assert image_quality.read_stored(tmp_path / "none") is None


@pytest.mark.parametrize("bad", [
    {}, {"findings": {}}, {"findings": [{"kind": "ugly", "split": "t", "file_name": "f",
                                         "label": None, "score": 1}]},
    {"findings": [{"kind": "dark", "split": 1, "file_name": "f", "label": None, "score": 1}]},
    {"findings": [{"kind": "dark", "split": "t", "file_name": "f", "label": None,
                   "score": True}]},
    {"findings": [["dark"]]},
    # a score no measure gives: an integer past a float's range (it was a bare
    # OverflowError naming neither the file nor the fix), NaN, infinite
    *({"findings": [{"kind": "dark", "split": "t", "file_name": "f", "label": None,
                     "score": score}]} for score in (10 ** 400, float("nan"), float("inf")))])
def test_a_bad_stored_report_is_refused_in_one_line_naming_it(bad, tmp_path):
  with pytest.raises(image_quality.BadQualityReport, match=r"^s3://b/quality.json: not a "
                     r"quality report .*; recompute it with `imagesets report SPEC --recompute`"):
    image_quality.from_json(bad, "s3://b/quality.json")
  for broken in ("{not json", "[" * 100_000 + "]" * 100_000):  # (the second: a bare
    # RecursionError, nested past Python's limit)
    (tmp_path / image_quality.QUALITY_FILE).write_text(broken)
    with pytest.raises(image_quality.BadQualityReport, match="not JSON"):
      image_quality.read_stored(tmp_path)


def test_a_png_is_measured_at_the_scale_of_a_jpegs_small_decode(monkeypatch):
  """A PNG is decoded in full; its measures are taken box-reduced to a JPEG small decode's
  scale (shorter side 64-127 px): the same picture measures the same in both formats, and
  a large PNG costs what a JPEG does (the pixels ranked are counted)."""
  photo = np.asarray(PIL.Image.fromarray(quality_cases.colour_photos()["coffee"]).resize(
      (1200, 800), PIL.Image.Resampling.BICUBIC))
  ranked = []
  partition = image_quality._ranked  # pylint: disable=protected-access
  monkeypatch.setattr(image_quality, "_ranked",
                      lambda values, shares: ranked.append(values.size) or partition(values, shares))
  png = image_hashes.of_bytes(sample_images.encode(photo, "PNG")).quality
  assert ranked and max(ranked) <= 128 * 192  # (not the 960,000 pixels of the PNG)
  jpeg = image_hashes.of_bytes(sample_images.encode(photo, "JPEG", quality=95)).quality
  assert abs(png[0] - jpeg[0]) < 0.03 and abs(png[1] - jpeg[1]) < 0.03
  assert abs(png[3] - jpeg[3]) < 0.3 and abs(png[2] - jpeg[2]) < 3
