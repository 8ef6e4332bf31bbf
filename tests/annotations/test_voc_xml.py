"""Pascal VOC XML folders: round trips, TFDS's normalisation, and hostile XML."""

import pytest

from imagesets.annotations import objects
from imagesets.annotations import voc_xml
from imagesets_testing import annotation_files

IMAGES = ["a.jpg", "b.jpg", "d.jpg", "d.png", "sub/c.jpg"]


@pytest.fixture(scope="module", params=[0, 1, 2, 3])
def known(request, tmp_path_factory):
  return annotation_files.write(tmp_path_factory.mktemp("known"), seed=request.param,
                                count=6 + 3 * request.param)


def test_known_boxes_labels_and_flags_come_back(known):
  annotations = voc_xml.read(str(known.voc), annotation_files.list_images(known.images_dir))
  assert known.mismatches(annotations, "voc", tolerance=1e-9) == []
  assert annotations.flag_names == ("difficult", "truncated", "pose")
  assert annotations.flag_classes == {"pose": ("frontal", "left", "rear", "right", "unspecified")}
  assert annotations.entries[known.without_file] == objects.Entry(known.without_file)


def _object(name="dog", box=(1, 1, 10, 10), **extra) -> str:
  fields = "".join(f"<{tag}>{value}</{tag}>" for tag, value in extra.items())
  corners = "".join(f"<{tag}>{value}</{tag}>" for tag, value in
                    zip(("xmin", "ymin", "xmax", "ymax"), box) if value is not None)
  return f"<object><name>{name}</name>{fields}<bndbox>{corners}</bndbox></object>"


def _xml(*objects_xml, filename="a.jpg", size=(500, 333)) -> str:
  name = "" if filename is None else f"<filename>{filename}</filename>"
  dims = "" if size is None else (f"<size><width>{size[1]}</width><height>{size[0]}</height>"
                                  "<depth>3</depth></size>")
  return (f"<annotation>\n  <folder>VOC2012</folder>{name}{dims}\n{''.join(objects_xml)}"
          "</annotation>")


def _read(tmp_path, files: dict[str, str | bytes], images=IMAGES, **options):
  folder = tmp_path / "Annotations"
  for name, text in files.items():
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(text if isinstance(text, bytes) else text.encode())
  return voc_xml.read(str(folder), images, images_root="/data/images", **options)


def _reasons(annotations) -> list[tuple[str, str]]:
  return [(p.where, p.reason) for p in annotations.problems]


def test_boxes_are_normalised_as_tfds_voc_does(tmp_path):
  # TFDS's voc.py: ymin / height, xmin / width, ymax / height, xmax / width (no 1-based shift).
  annotations = _read(tmp_path, {"a.xml": _xml(
      _object("dog", (1, 50, 333, 500), pose="Frontal", truncated=1, difficult=0),
      _object("cat", (33.3, 0, 66.6, 100)))})
  (dog, cat) = annotations.entries["a.jpg"].objects
  assert dog.bbox == pytest.approx((50 / 500, 1 / 333, 1.0, 1.0), abs=1e-12)
  assert cat.bbox == pytest.approx((0.0, 0.1, 0.2, 0.2), abs=1e-12)
  assert annotations.class_names == ("cat", "dog")
  assert (dog.label, dog.flags, cat.label, cat.flags) == (1, (0, 1, 0), 0, (0, 0, 4))
  assert annotations.entries["a.jpg"].size == (500, 333)


def test_class_names_are_sorted_names_over_all_files_and_images_without_xml_are_negatives(
    tmp_path):
  annotations = _read(tmp_path, {"a.xml": _xml(_object("zebra"), _object("ant")),
                                 "b.xml": _xml(_object("moose"), filename="b.jpg"),
                                 "n.xml": _xml(filename="d.png")})
  assert annotations.class_names == ("ant", "moose", "zebra")
  assert annotations.problems == () and annotations.unlisted == ()
  assert list(annotations.entries) == IMAGES
  assert annotations.entries["d.jpg"] == objects.Entry("d.jpg")        # no XML
  assert annotations.entries["d.png"] == objects.Entry("d.png", (500, 333))  # no objects
  assert annotations.negatives == 3


def test_the_image_is_filename_beside_the_mirrored_folder_or_the_xml_stem(tmp_path):
  annotations = _read(tmp_path, {"sub/c.xml": _xml(_object(), filename="c.jpg"),
                                 "b.xml": _xml(_object(), filename=None),
                                 "x.xml": _xml(_object(), filename="sub/../a.jpg"),
                                 "d.xml": _xml(_object(), filename=None),
                                 "e.xml": _xml(_object(), filename="C:\\VOC\\e.jpg"),
                                 "f.xml": _xml(_object(), filename="/VOC/f.jpg")})
  assert {name for name, entry in annotations.entries.items() if entry.objects} == {
      "b.jpg", "sub/c.jpg"}
  assert [(where, reason.split(":")[0]) for where, reason in _reasons(annotations)] == [
      ("Annotations/d.xml", "several images for it"),
      ("Annotations/e.xml", "file name 'C"),
      ("Annotations/f.xml", "file name '/VOC/f.jpg' is absolute"),
      ("Annotations/x.xml", "file name 'sub/../a.jpg' has a '..' component")]


def test_two_files_for_one_image_and_files_for_no_image_are_problems(tmp_path):
  annotations = _read(tmp_path, {"a.xml": _xml(_object()), "a2.xml": _xml(_object()),
                                 "z.xml": _xml(_object(), filename="z.jpg"),
                                 "y.xml": _xml(_object(), filename=None)})
  assert _reasons(annotations) == [
      ("Annotations/a2.xml", "a second entry for a.jpg (the first: Annotations/a.xml)"),
      ("Annotations/y.xml", "no image y.* in /data/images"),
      ("Annotations/z.xml", "z.jpg: no such image in /data/images")]


@pytest.mark.parametrize("xml_object, reason", [
    (_object(pose="Sideways"),
     "<pose> 'sideways' is not one of frontal, left, rear, right, unspecified"),
    (_object(difficult=2), "<difficult> '2' is not 0 or 1"),
    (_object(truncated="yes"), "<truncated> 'yes' is not 0 or 1"),
    (_object(box=(1, 1, None, 10)), "<bndbox> <xmax> None is not a number"),
    (_object(box=(1, "one", 10, 10)), "<bndbox> <ymin> 'one' is not a number"),
    (_object(name=""), "empty class name"),
    ("<object><name>dog</name></object>", "no <bndbox>"),
    ("<object><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>2</xmax><ymax>2</ymax></bndbox></object>",
     "no <name>"),
    (_object(box=(10, 1, 5, 10)), "box of zero or negative width/height: x 10..5, y 1..10"),
    (_object(box=("nan", 1, 5, 10)), "box with a non-finite coordinate: x nan..5, y 1..10"),
    (_object(box=(1, 1, 400, 10)), "box outside the image: x 1..400 of width 333"),
])
def test_bad_objects_are_problems_naming_the_file_and_object(tmp_path, xml_object, reason):
  annotations = _read(tmp_path, {"a.xml": _xml(_object(), xml_object)})
  assert _reasons(annotations) == [("Annotations/a.xml: object 2", reason)]
  assert len(annotations.entries["a.jpg"].objects) == 1


def test_missing_flags_are_0_and_a_missing_pose_is_unspecified(tmp_path):
  annotations = _read(tmp_path, {"a.xml": _xml(_object(pose=" LEFT "), _object())})
  assert [o.flags for o in annotations.entries["a.jpg"].objects] == [(0, 0, 1), (0, 0, 4)]


@pytest.mark.parametrize("policy, kept, fixed, problems", [
    ("error", 1, 0, 2), ("clip", 2, 1, 1), ("skip", 2, 2, 0)])
def test_the_bad_box_policy_applies(tmp_path, policy, kept, fixed, problems):
  annotations = _read(tmp_path, {"a.xml": _xml(_object(box=(1, 1, 10, 10)),
                                               _object(box=(300, 1, 400, 10)),
                                               _object(box=(340, 1, 400, 10)))},
                      on_bad_box=policy)
  assert len(annotations.entries["a.jpg"].objects) == kept
  assert (len(annotations.fixed), len(annotations.problems)) == (fixed, problems)


def test_a_file_without_a_usable_size_cannot_place_its_objects(tmp_path):
  annotations = _read(tmp_path, {"a.xml": _xml(_object(), _object(), size=None),
                                 "b.xml": _xml(_object(), filename="b.jpg", size=(0, 10)),
                                 "n.xml": _xml(filename="d.png", size=None)})
  assert _reasons(annotations) == [
      ("Annotations/a.xml", "no <size> with positive whole <width> and <height>: its 2 "
                            "object(s) cannot be placed"),
      ("Annotations/b.xml", "no <size> with positive whole <width> and <height>: its 1 "
                            "object(s) cannot be placed")]
  assert annotations.entries["a.jpg"] == objects.Entry("a.jpg")
  assert annotations.entries["d.png"] == objects.Entry("d.png")


def test_a_file_that_is_not_a_voc_annotation_is_a_problem(tmp_path):
  annotations = _read(tmp_path, {"a.xml": _xml(_object()), "svg.xml": "<svg><rect/></svg>"})
  assert _reasons(annotations) == [
      ("Annotations/svg.xml", "root element <svg>, not <annotation>: not a Pascal VOC file")]


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<annotation><filename>a.jpg</filename><object><name>&lol9;</name></object></annotation>
"""


def test_billion_laughs_is_refused_with_one_line(tmp_path):
  with pytest.raises(objects.AnnotationError, match="bomb.xml line 2: a DOCTYPE or ENTITY") as e:
    _read(tmp_path, {"a.xml": _xml(_object()), "bomb.xml": BILLION_LAUGHS})
  assert "\n" not in str(e.value)


@pytest.mark.parametrize("doctype", [
    '<!DOCTYPE annotation [<!ENTITY secret SYSTEM "file://{secret}">]>',
    '<!DOCTYPE annotation SYSTEM "file://{secret}">',
    '<!DOCTYPE annotation [<!ENTITY % remote SYSTEM "file://{secret}"> %remote;]>',
])
def test_external_entities_are_refused_and_never_read(tmp_path, doctype):
  secret = tmp_path / "secret.txt"
  secret.write_text("TOP-SECRET")
  text = (f'<?xml version="1.0"?>\n{doctype.format(secret=secret)}\n'
          "<annotation><filename>&secret;</filename></annotation>")
  with pytest.raises(objects.AnnotationError, match=r"x.xml line 2: a DOCTYPE") as e:
    _read(tmp_path, {"x.xml": text})
  assert "TOP-SECRET" not in str(e.value)


@pytest.mark.parametrize("text, where", [
    ("<annotation>\n<filename>a.jpg</filename>\n<size></annotation>", "line 3 column 9"),
    ("<annotation><name>&undefined;</name></annotation>", "line 1 column 19"),
    ("", "line 1 column 1"),
    (b"<annotation>\xff</annotation>", "line 1 column 13"),
])
def test_malformed_xml_names_the_file_and_line(tmp_path, text, where):
  with pytest.raises(objects.AnnotationError, match=f"bad.xml {where}: malformed XML") as e:
    _read(tmp_path, {"bad.xml": text})
  assert "\n" not in str(e.value)


def test_an_xml_over_the_limit_is_refused_before_it_is_read(tmp_path):
  folder = tmp_path / "Annotations"
  folder.mkdir()
  with open(folder / "big.xml", "wb") as f:
    f.truncate(voc_xml.MAX_DOCUMENT_BYTES + 1)
  with pytest.raises(objects.AnnotationError, match=r"big.xml: 16,777,217 bytes, over the "
                                                    r"16,777,216-byte limit"):
    voc_xml.read(str(folder), IMAGES)


def test_hidden_files_are_left_out_and_a_folder_without_xml_is_an_error(tmp_path):
  annotations = _read(tmp_path, {"a.xml": _xml(_object()), "__MACOSX/._a.xml": b"\x00\x05\x16",
                                 ".a.xml.swp": b"\x00"})
  assert annotations.problems == ()
  (tmp_path / "empty").mkdir()
  with pytest.raises(objects.AnnotationError, match="no \\*.xml files"):
    voc_xml.read(str(tmp_path / "empty"), IMAGES)
  with pytest.raises(objects.AnnotationError, match="not a folder"):
    voc_xml.read(str(tmp_path / "Annotations" / "a.xml"), IMAGES)


def test_a_link_to_an_xml_file_is_read_and_one_to_nothing_is_a_problem(tmp_path):
  """A DVC or git-annex checkout links each file: read as the file it links to; a link
  leading nowhere is named, never opened."""
  (tmp_path / "kept.xml").write_text(_xml(_object("cat"), filename="b.jpg"))
  folder = tmp_path / "Annotations"
  folder.mkdir()
  (folder / "b.xml").symlink_to(tmp_path / "kept.xml")
  (folder / "c.xml").symlink_to(folder / "gone.xml")
  annotations = _read(tmp_path, {"a.xml": _xml(_object())})
  assert [(where, reason.split(",")[0]) for where, reason in _reasons(annotations)] == [
      ("Annotations/c.xml", "a link to nothing")]
  assert annotations.class_names == ("cat", "dog")


def test_an_object_with_two_names_or_boxes_is_a_problem_not_a_guess(tmp_path):
  twice = ("<object><name>dog</name><name>cat</name><bndbox><xmin>1</xmin><ymin>1</ymin>"
           "<xmax>9</xmax><ymax>9</ymax></bndbox><bndbox><xmin>2</xmin><ymin>2</ymin>"
           "<xmax>8</xmax><ymax>8</ymax></bndbox></object>")
  annotations = _read(tmp_path, {"a.xml": _xml(twice, _object("dog"))})
  (problem,) = annotations.problems
  assert "more than one <name>, <bndbox>" in problem.reason


@pytest.mark.parametrize("header, reason", [
    ("<filename>a.jpg</filename><filename>b.jpg</filename>",
     "more than one <filename> in one <annotation>"),
    ("<size><width>333</width><height>500</height></size><size><width>9</width>"
     "<height>9</height></size>", "more than one <size> in one <annotation>"),
    ("<size><width>333</width><width>9</width><height>500</height><height>9</height></size>",
     "more than one <width>, <height> in one <size>"),
])
def test_a_file_giving_its_image_or_size_twice_is_a_problem_not_a_guess(tmp_path, header,
                                                                          reason):
  text = f"<annotation>{header}{_object()}</annotation>"
  if "<filename>" not in header:
    text = text.replace("<annotation>", "<annotation><filename>a.jpg</filename>")
  annotations = _read(tmp_path, {"a.xml": text, "b.xml": _xml(_object("cat"), filename="b.jpg")})
  assert _reasons(annotations) == [("Annotations/a.xml", reason)]


def test_a_box_giving_a_corner_twice_is_a_problem_not_a_guess(tmp_path):
  twice = ("<object><name>dog</name><bndbox><xmin>1</xmin><xmin>5</xmin><ymin>1</ymin>"
           "<xmax>9</xmax><ymax>9</ymax><ymax>7</ymax></bndbox></object>")
  annotations = _read(tmp_path, {"a.xml": _xml(twice, _object("dog"))})
  assert _reasons(annotations) == [
      ("Annotations/a.xml: object 1", "more than one <xmin>, <ymax> in one <bndbox>")]
  assert len(annotations.entries["a.jpg"].objects) == 1
