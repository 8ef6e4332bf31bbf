"""Masks from annotations, without TensorFlow: COCO segmentation checked on reading and
drawn exactly as pycocotools' own COCO API draws it (polygons, RLE uncompressed and
compressed, crowd void, later over earlier); mask folders (palette PNG + classes.txt,
CVAT's RGB + labelmap.txt) read back pixel for pixel; every bad polygon, RLE, colour,
value and size named."""

import json
import os
import pathlib
import pickle
import shutil

import numpy as np
import PIL.Image
import pytest
from pycocotools import mask as coco_mask

from imagesets.annotations import coco
from imagesets.annotations import formats
from imagesets.annotations import masks
from imagesets.annotations import objects
from imagesets_testing import annotation_files


@pytest.fixture(scope="module")
def known(tmp_path_factory):
  return annotation_files.write(tmp_path_factory.mktemp("known"), seed=11, count=12)


def _images(known) -> list[str]:
  return annotation_files.list_images(known.images_dir)


@pytest.mark.parametrize("rle", ["uncompressed", "compressed"])
def test_coco_masks_are_pycocotools_own_pixel_for_pixel(known, tmp_path, rle):
  path = known.coco
  if rle == "compressed":
    path = tmp_path / "compressed.json"
    path.write_text(json.dumps(annotation_files.compressed_coco(
        json.loads(known.coco.read_text()))))
  annotations = formats.read(str(path), _images(known))
  assert annotations.problems == () and annotations.masks is not None
  assert annotations.masks.class_names == ("background", *known.class_names("coco"))
  assert pickle.loads(pickle.dumps(annotations)) == annotations   # it goes to the workers
  kinds, crowd, overlaps = set(), 0, 0
  for file_name, entry in annotations.entries.items():
    made = masks.make(annotations.masks, entry)
    want_class, want_object = annotation_files.coco_reference_masks(path, file_name)
    np.testing.assert_array_equal(made["class_mask"], want_class, err_msg=file_name)
    np.testing.assert_array_equal(made["object_mask"], want_object, err_msg=file_name)
    kinds.update(type(o.segmentation.counts if isinstance(o.segmentation, objects.Rle)
                      else o.segmentation).__name__ for o in entry.objects)
    crowd += int((want_class == 255).any())
    drawn = sum(masks._region(o.segmentation, *entry.size) for o in entry.objects)
    overlaps += int((np.asarray(drawn) > 1).any())
  # The data exercises what it claims: crowd regions, objects drawn over others, and
  # polygons with uncompressed or compressed RLE.
  assert crowd and overlaps
  assert kinds == ({"tuple"} if rle == "uncompressed" else {"tuple", "str"})


def _coco_file(tmp_path: pathlib.Path, annotations: list[dict], size=(40, 60)) -> pathlib.Path:
  path = tmp_path / "instances.json"
  path.write_text(json.dumps({
      "images": [{"id": 1, "file_name": "a.jpg", "height": size[0], "width": size[1]}],
      "categories": [{"id": 5, "name": "part"}, {"id": 9, "name": "tool"}],
      "annotations": [{"id": k, "image_id": 1, "bbox": [1, 1, 2, 2], "iscrowd": 0, **a}
                      for k, a in enumerate(annotations, 1)]}))
  return path


def _rectangle(x0, y0, x1, y1) -> list[list[float]]:
  return [[x0, y0, x1, y0, x1, y1, x0, y1]]


def _made(tmp_path, annotations, size=(40, 60)) -> dict[str, np.ndarray]:
  read = coco.read(str(_coco_file(tmp_path, annotations, size)), ["a.jpg"])
  assert read.problems == (), read.problems
  return masks.make(read.masks, read.entries["a.jpg"])


def test_planted_objects_cover_exactly_their_pixels_later_over_earlier(tmp_path):
  made = _made(tmp_path, [
      {"category_id": 9, "segmentation": _rectangle(5, 4, 30, 20)},     # tool, object 1
      {"category_id": 5, "segmentation": _rectangle(20, 10, 50, 30)},   # part over it
      {"category_id": 9, "segmentation": _rectangle(0, 25, 10, 40), "iscrowd": 1},
      {"category_id": 5, "segmentation": _rectangle(2, 30, 6, 34)},     # over the crowd
  ])
  want_class = np.zeros((40, 60), np.uint8)
  want_object = want_class.copy()
  for number, (label, (x0, y0, x1, y1)) in enumerate(
      [(2, (5, 4, 30, 20)), (1, (20, 10, 50, 30)), (255, (0, 25, 10, 40)),
       (1, (2, 30, 6, 34))], 1):
    want_class[y0:y1, x0:x1] = label
    want_object[y0:y1, x0:x1] = 255 if label == 255 else number
  np.testing.assert_array_equal(made["class_mask"], want_class)
  np.testing.assert_array_equal(made["object_mask"], want_object)
  assert made["class_mask"].dtype == np.uint8 and made["class_mask"].shape == (40, 60)


def test_an_object_of_several_polygons_is_their_union_as_coco_draws_it(tmp_path):
  path = _coco_file(tmp_path, [
      {"category_id": 9, "segmentation": [[3.2, 4.7, 30.5, 8.1, 12.9, 33.6],
                                          [20.4, 2.2, 55.8, 12.3, 41.1, 39.9, 25, 20],
                                          [48.5, 30.5, 58.5, 30.5, 58.5, 38.5]]},
      {"category_id": 5, "segmentation": [[10, 10, 20, 10, 20, 20, 10, 20],
                                          [15, 15, 25, 15, 25, 25, 15, 25]], "iscrowd": 1}])
  read = coco.read(str(path), ["a.jpg"])
  made = masks.make(read.masks, read.entries["a.jpg"])
  want_class, want_object = annotation_files.coco_reference_masks(path, "a.jpg")
  np.testing.assert_array_equal(made["class_mask"], want_class)
  np.testing.assert_array_equal(made["object_mask"], want_object)
  assert set(np.unique(want_class)) == {0, 2, 255} and (want_class[30:38, 50:58] == 2).any()


def test_a_file_of_boxes_only_gets_no_masks(tmp_path):
  read = coco.read(str(_coco_file(tmp_path, [{"category_id": 5, "segmentation": []},
                                             {"category_id": 9}])), ["a.jpg"])
  assert read.problems == () and read.masks is None
  assert [o.segmentation for o in read.entries["a.jpg"].objects] == [None, None]


@pytest.mark.parametrize("segmentation, words", [
    ([[1, 2, 3, 4, 5]], "polygon 0 has 5 numbers: a polygon is x, y pairs, at least 3 points"),
    ([[1, 2, 3, 4]], "polygon 0 has 4 numbers"),
    ([[1, 2, 3, 4, 5, 6], [1, 2, 3, float("nan"), 5, 6]], "polygon 1 [1, 2, 3, nan, 5, 6] is "
                                                          "not a list of finite numbers"),
    ([[1, 2, 3, "4", 5, 6]], "is not a list of finite numbers"),
    ([1, 2, 3, 4, 5, 6], "polygon 0 1 is not a list"),
    ([[1, 2, 3, 4, 5, 10**400]], "not a list of finite numbers"),
    ([[1, 2, 30, 4, 5, 500]], "more than the image's size outside the 60x40 image"),
    ([[1, 2, 30, 4, 5, 41.5]], "segmentation polygon outside the 60x40 image: x 1..30, y 2..41.5"),
    ({"size": [40, 60], "counts": [100, 50]}, "RLE runs cover 150 pixels, the 60x40 image has "
                                              "2,400"),
    ({"size": [40, 60], "counts": [2400, -1, 1]}, "hold a run that is not a whole number >= 0"),
    ({"size": [40, 60], "counts": [2399.5, 0.5]}, "not a whole number >= 0"),
    ({"size": [60, 40], "counts": [2400]}, "RLE size [60, 40] is not the image's [height, width] "
                                           "[40, 60]"),
    ({"size": [40], "counts": [2400]}, "RLE size [40] is not [height, width]"),
    ({"counts": [2400]}, "RLE size None is not [height, width]"),
    ({"size": [40, 60], "counts": "PPYo0"}, "RLE runs cover 1,025,024 pixels"),
    # runs of 4,300 digits each, the most a JSON parse gives: their sum is longer
    ({"size": [40, 60], "counts": [9 * 10**4299] * 2}, "RLE runs cover more than "
                                                       "1,000,000,000,000,000,000 pixels"),
    ({"size": [40, 60], "counts": "0T"}, "'0T' is not COCO's compressed RLE string"),  # truncated
    ({"size": [40, 60], "counts": "0\x00"}, "is not COCO's compressed RLE string"),
    ({"size": [40, 60], "counts": "0~"}, "is not COCO's compressed RLE string"),
    ({"size": [40, 60], "counts": "ooooooo0"}, "is not COCO's compressed RLE string"),
    ({"size": [40, 60], "counts": None}, "counts None is neither a list of run lengths nor"),
    ({"size": [40, 60]}, "counts None is neither"),
    ("polygon", "segmentation 'polygon' is neither polygons"),
    (7, "segmentation 7 is neither polygons"),
])
def test_bad_segmentation_is_a_problem_naming_the_annotation(tmp_path, segmentation, words):
  path = _coco_file(tmp_path, [{"category_id": 5, "segmentation": _rectangle(1, 1, 5, 5)},
                               {"category_id": 9, "segmentation": segmentation}])
  read = coco.read(str(path), ["a.jpg"])
  assert [p.where for p in read.problems] == ["instances.json: annotation id 2 (image 1, a.jpg)"]
  assert words in read.problems[0].reason, read.problems[0].reason
  assert len(read.entries["a.jpg"].objects) == 1   # never drawn without its outline


def test_in_a_file_with_segmentation_every_annotation_needs_one(tmp_path):
  read = coco.read(str(_coco_file(tmp_path, [
      {"category_id": 5, "segmentation": _rectangle(1, 1, 5, 5)}, {"category_id": 9},
      {"category_id": 9, "segmentation": []}])), ["a.jpg"])
  assert [p.where for p in read.problems] == [
      f"instances.json: annotation id {k} (image 1, a.jpg)" for k in (2, 3)]
  assert all(p.reason.startswith("no segmentation, but other annotations of the file have "
                                 "one: masks need every object's outline") for p in read.problems)


@pytest.mark.parametrize("policy", ["clip", "skip"])
def test_a_polygon_reaching_outside_follows_on_bad_box_and_is_drawn_inside(tmp_path, policy):
  path = _coco_file(tmp_path, [{"category_id": 5, "segmentation": _rectangle(50, 30, 70, 50)}])
  read = coco.read(str(path), ["a.jpg"], on_bad_box=policy)
  assert read.problems == ()
  assert [f.reason for f in read.fixed] == [
      "segmentation polygon clipped to the 60x40 image: x 50..70, y 30..50"]
  made = masks.make(read.masks, read.entries["a.jpg"])
  want = np.zeros((40, 60), np.uint8)
  want[30:, 50:] = 1
  np.testing.assert_array_equal(made["class_mask"], want)


def test_rle_strings_decode_as_pycocotools_encodes_them():
  rng = np.random.default_rng(0)
  for k in range(40):
    height, width = (int(v) for v in rng.integers(1, 70, 2))
    mask = (rng.uniform(size=(height, width)) < rng.uniform(0.02, 0.98)).astype(np.uint8)
    if k % 4 == 0:
      mask[:] = k % 8 == 0   # one run, or two
    encoded = coco_mask.encode(np.asfortranarray(mask))
    runs = masks.rle_string_counts(encoded["counts"].decode())
    flat = mask.flatten(order="F")
    changes = np.flatnonzero(np.diff(flat)) + 1
    want = ([0] if flat[0] else []) + np.diff(np.r_[0, changes, flat.size]).tolist()
    assert runs == want, k


def _mask_folder(tmp_path: pathlib.Path, known, cvat: bool = False) -> pathlib.Path:
  """A copy of the known mask folder (to spoil)."""
  folder = tmp_path / ("cvat" if cvat else "masks")
  shutil.copytree(known.masks_cvat if cvat else known.masks, folder)
  return folder


@pytest.mark.parametrize("cvat", [False, True])
def test_mask_folders_are_detected_and_read_back_exactly(known, cvat):
  folder = known.masks_cvat if cvat else known.masks
  assert formats.detect(str(folder)) == "masks"
  read = formats.read(str(folder), _images(known), images_root=str(known.images_dir))
  assert read.problems == () and read.task == "segmentation" and read.format == "masks"
  assert read.class_names == annotation_files.MASK_CLASS_NAMES == read.masks.class_names
  assert read.masks.colors == (annotation_files.CVAT_COLORS if cvat else ())
  assert list(read.entries) == known.images and read.negatives == 0
  void = 0
  for file_name, entry in read.entries.items():
    made = masks.make(read.masks, entry, known.sizes[file_name])
    assert list(made) == ["class_mask"]
    want = known.class_mask(file_name, crowd_void=not cvat)
    np.testing.assert_array_equal(made["class_mask"], want, err_msg=file_name)
    void += int((want == 255).any())
  assert bool(void) != cvat   # palette masks carry void (crowd), CVAT's colours do not


def test_a_palette_mask_gives_its_indices_not_its_colours(tmp_path):
  (tmp_path / "masks").mkdir()
  (tmp_path / "masks" / "classes.txt").write_text("background\nroad\n")
  ids = np.array([[0, 1, 255], [1, 1, 0]], np.uint8)
  image = PIL.Image.fromarray(ids)
  image.putpalette([200, 10, 10, 10, 200, 10] + [7] * 762)   # any colours
  image.save(tmp_path / "masks" / "a.png")
  read = masks.read(str(tmp_path / "masks"), ["a.jpg"])
  np.testing.assert_array_equal(masks.make(read.masks, read.entries["a.jpg"], (2, 3))[
      "class_mask"], ids)


def test_mask_folder_problems_are_named(known, tmp_path):
  folder = _mask_folder(tmp_path, known)
  missing, orphan = known.images[3], "street/nobody.png"
  (folder / f"{missing.rsplit('.', 1)[0]}.png").unlink()
  shutil.copy(folder / f"{known.images[0].rsplit('.', 1)[0]}.png", folder / orphan)
  read = masks.read(str(folder), _images(known))
  assert [(p.where, p.reason.split(":")[0]) for p in read.problems] == [
      ("masks/street/nobody.png", "no image street/nobody.* in the images folder"),
      (f"masks/{missing.rsplit('.', 1)[0]}.png", "missing")]
  assert missing in read.problems[1].reason and "dense labels" in read.problems[1].reason


def test_a_mask_that_is_a_link_is_one_problem_naming_it(known, tmp_path):
  folder = _mask_folder(tmp_path, known)
  victim = folder / f"{known.images[3].rsplit('.', 1)[0]}.png"
  victim.unlink()
  victim.symlink_to(tmp_path / "nowhere.png")
  read = masks.read(str(folder), _images(known))
  assert [(p.where, p.reason.split(",")[0]) for p in read.problems] == [
      (f"masks/{known.images[3].rsplit('.', 1)[0]}.png", "a link to nothing")]


def test_bad_masks_are_errors_naming_the_file_and_what_is_wrong(known, tmp_path):
  folder = _mask_folder(tmp_path, known)
  read = masks.read(str(folder), _images(known))
  name = known.images[2]
  entry = read.entries[name]
  height, width = known.sizes[name]
  with pytest.raises(masks.MaskError, match=(
      f"mask .*{entry.mask.rsplit('/', 1)[-1]} is {width}x{height} \\(width x height\\), the "
      f"image is {width + 1}x{height} upright")):
    masks.make(read.masks, entry, (height, width + 1))
  spoiled = known.class_mask(name)
  spoiled[1, 2] = 9   # not a class of classes.txt (0-5)
  PIL.Image.fromarray(spoiled).save(entry.mask)
  with pytest.raises(masks.MaskError, match=r"value\(s\) 9 are neither class ids of classes.txt "
                                            r"\(0-5\) nor 255"):
    masks.make(read.masks, entry, (height, width))
  PIL.Image.fromarray(np.zeros((height, width, 3), np.uint8)).save(entry.mask)
  with pytest.raises(masks.MaskError, match="is mode RGB: with classes.txt .* give labelmap.txt"):
    masks.make(read.masks, entry, (height, width))
  pathlib.Path(entry.mask).write_bytes(b"\x89PNG\r\n\x1a\n broken")
  with pytest.raises(masks.MaskError, match="cannot be read"):
    masks.make(read.masks, entry, (height, width))


def test_a_colour_the_labelmap_lacks_is_named_with_where_it_is(known, tmp_path):
  folder = _mask_folder(tmp_path, known, cvat=True)
  read = masks.read(str(folder), _images(known))
  name = known.images[5]
  entry = read.entries[name]
  colours = np.array(annotation_files.CVAT_COLORS, np.uint8)[known.class_mask(name, False)]
  colours[3, 7] = (1, 2, 3)
  colours[4, 0] = (9, 9, 9)
  PIL.Image.fromarray(colours).save(entry.mask)
  with pytest.raises(masks.MaskError, match=(
      r"SegmentationClass/.*\.png: colour \(1, 2, 3\) at x 7, y 3 \(and 1 other unknown "
      r"colours\) is not a class of labelmap.txt")):
    masks.make(read.masks, entry, known.sizes[name])


@pytest.mark.parametrize("text, words", [
    ("background:0,0,0::\nroad:1,2::\n", "line 3: 'road:1,2::' is not `name:r,g,b::`"),
    ("background:0,0,0::\nroad:1,2,256::\n", "line 3: 'road:1,2,256::' is not"),
    ("background:0,0,0::\nroad:0,0,0::\n", "line 3: colour (0, 0, 0) is also 'background''s"),
    ("road:0,0,0::\nroad:1,1,1::\n", "line 3: class name 'road' given twice"),
])
def test_a_bad_labelmap_is_an_error_naming_its_line(tmp_path, text, words):
  (tmp_path / "labelmap.txt").write_text("# label:color_rgb:parts:actions\n" + text)
  with pytest.raises(objects.AnnotationError) as error:
    masks.read(str(tmp_path), [])
  assert f"labelmap.txt {words}" in str(error.value)


def test_class_names_need_exactly_one_names_file(tmp_path):
  with pytest.raises(objects.AnnotationError, match="no class names: a mask folder holds"):
    masks.read(str(tmp_path), [])
  (tmp_path / "labelmap.txt").write_text("a:0,0,0::\n")
  (tmp_path / "classes.txt").write_text("a\n")
  with pytest.raises(objects.AnnotationError, match="both labelmap.txt and classes.txt"):
    masks.read(str(tmp_path), [])


def test_detection_tells_mask_folders_from_yolo_folders(tmp_path):
  def folder(name, files):
    for relative in files:
      (tmp_path / name / relative).parent.mkdir(parents=True, exist_ok=True)
      (tmp_path / name / relative).write_bytes(b"")
    return str(tmp_path / name)
  assert formats.detect(folder("voc_style", ["classes.txt", "a.png", "sub/b.png"])) == "masks"
  assert formats.detect(folder("cvat", ["labelmap.txt", "ImageSets/Segmentation/default.txt",
                                        "SegmentationClass/a.png"])) == "masks"
  # labelImg's YOLO layout: PNG images, their label files and classes.txt together.
  assert formats.detect(folder("labelimg", ["classes.txt", "a.png", "a.txt"])) == "yolo"
  assert formats.detect(folder("yolo_names", ["classes.txt", "labels/a.txt"])) == "yolo"
  with pytest.raises(objects.AnnotationError, match="could be masks or yolo"):
    formats.detect(folder("both", ["classes.txt", "a.png", "data.yaml"]))


def test_pascal_palette_matches_voc_colours():
  palette = masks.pascal_palette()
  assert palette.shape == (256, 3) and palette.dtype == np.uint8
  assert palette[0].tolist() == [0, 0, 0]
  assert palette[1].tolist() == [128, 0, 0]       # aeroplane
  assert palette[15].tolist() == [192, 128, 128]  # person
  assert palette[20].tolist() == [0, 64, 128]     # tvmonitor
  assert palette[255].tolist() == [224, 224, 192]  # void
  assert len({tuple(c) for c in palette}) == 256


def test_a_names_file_that_is_no_regular_file_is_named_not_passed_over(tmp_path):
  """A FIFO labelmap.txt beside classes.txt: both are names files, and the folder is
  refused for holding two, not read with classes.txt's names alone."""
  os.mkfifo(tmp_path / "labelmap.txt")
  (tmp_path / "classes.txt").write_text("a\n")
  with pytest.raises(objects.AnnotationError, match=r"both labelmap.txt and classes.txt "
                                                    r"\(labelmap.txt no regular file\)"):
    masks.read(str(tmp_path), [])
  (tmp_path / "classes.txt").unlink()
  with pytest.raises(objects.AnnotationError, match=r"labelmap.txt: a named pipe \(FIFO\)"):
    masks.read(str(tmp_path), [])


def test_a_linked_sub_folder_of_masks_is_one_problem_not_one_per_image(known, tmp_path):
  """A sub-folder of masks that is a link is refused, named once: its images are not named
  again, each as missing its mask (the masks are there, behind the link)."""
  folder = _mask_folder(tmp_path, known)
  sub = next(name.split("/")[0] for name in known.images if "/" in name)
  shutil.move(folder / sub, tmp_path / "elsewhere")
  (folder / sub).symlink_to(tmp_path / "elsewhere", target_is_directory=True)
  read = masks.read(str(folder), _images(known))
  assert [(p.where, p.reason.split(" (")[0]) for p in read.problems] == [
      (f"masks/{sub}", "a link to a folder holding annotation files, not followed")]
  assert sum(name.startswith(sub + "/") for name in known.images) > 1
