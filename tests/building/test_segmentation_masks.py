"""segmentation_masks: palette indices read exactly, colour masks refused, PNGs reproducible."""

import io

import numpy as np
import PIL.Image
import PIL.PngImagePlugin
import pytest
import tensorflow as tf

from imagesets.annotations import masks
from imagesets.building import segmentation_masks


def _indices(height=30, width=40):
  mask = np.zeros((height, width), np.uint8)
  mask[5:20, 8:30] = 15    # person
  mask[4:21, 7] = 255      # void border
  mask[22:, 31:] = 3       # bird
  return mask


def _save_palette_png(indices, path, palette=None, **save_kwargs):
  image = PIL.Image.frombytes("P", indices.shape[::-1], indices.tobytes())
  image.putpalette(masks.pascal_palette().tobytes() if palette is None else palette)
  image.save(path, **save_kwargs)
  return path


def _decode(png):
  return tf.io.decode_png(png).numpy()


def _chunk_types(png):
  types, offset = [], 8
  while offset < len(png):
    length = int.from_bytes(png[offset:offset + 4], "big")
    types.append(png[offset + 4:offset + 8])
    offset += 12 + length
  return types


def test_reads_palette_and_grey_masks_as_indices(tmp_path):
  indices = _indices()
  palette_png = _save_palette_png(indices, tmp_path / "p.png")
  PIL.Image.fromarray(indices).save(tmp_path / "l.png")
  for path in (palette_png, tmp_path / "l.png"):
    mask, why = segmentation_masks.read(path)
    assert why is None
    np.testing.assert_array_equal(mask.indices, np.array(PIL.Image.open(path)))
    np.testing.assert_array_equal(mask.indices, indices)
    decoded = _decode(mask.png)
    assert decoded.shape == indices.shape + (1,)
    np.testing.assert_array_equal(decoded[..., 0], indices)
  # The trap this module exists for: TF decodes the palette PNG itself to colours.
  assert _decode(palette_png.read_bytes()).shape[-1] == 3


def test_palette_pngs_become_grey_by_a_header_rewrite(tmp_path):
  source = _save_palette_png(_indices(), tmp_path / "p.png").read_bytes()
  grey = segmentation_masks.as_grey_png(source)
  assert _chunk_types(source)[:2] == [b"IHDR", b"PLTE"]
  assert _chunk_types(grey) == [b"IHDR", b"IDAT", b"IEND"]
  assert grey[8 + 8 + 9] == 0  # IHDR colour type: grey
  idat = source[source.index(b"IDAT") - 4:source.index(b"IEND") - 4]
  assert idat in grey  # compressed pixels copied, not re-compressed
  assert len(grey) < len(source)
  np.testing.assert_array_equal(np.array(PIL.Image.open(io.BytesIO(grey))), _indices())


def test_other_pngs_are_not_rewritten_and_fall_back_to_encoding(tmp_path):
  few_colours = np.minimum(_indices(), 15)
  _save_palette_png(few_colours, tmp_path / "p4.png", bits=4)  # 4-bit palette PNG
  data = (tmp_path / "p4.png").read_bytes()
  assert data[24] == 4  # IHDR bit depth
  assert segmentation_masks.as_grey_png(data) is None
  mask, why = segmentation_masks.read(tmp_path / "p4.png")
  assert why is None
  np.testing.assert_array_equal(_decode(mask.png)[..., 0], few_colours)
  PIL.Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "rgb.png")
  assert segmentation_masks.as_grey_png((tmp_path / "rgb.png").read_bytes()) is None
  assert segmentation_masks.as_grey_png(b"\xff\xd8\xff\xe0 a JPEG") is None


def test_a_palette_png_with_a_bad_idat_crc_is_re_encoded_not_copied(tmp_path):
  # PIL reads it (it skips IDAT's CRC); tf.io.decode_png refused the copied chunk.
  data = bytearray(_save_palette_png(_indices(), tmp_path / "p.png").read_bytes())
  idat = data.index(b"IDAT")
  data[idat + 4 + int.from_bytes(data[idat - 4:idat], "big")] ^= 0xFF  # the CRC's first byte
  (tmp_path / "p.png").write_bytes(bytes(data))
  mask, why = segmentation_masks.read(tmp_path / "p.png")
  assert why is None
  np.testing.assert_array_equal(_decode(mask.png)[..., 0], _indices())


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_colour_masks_are_refused_with_the_fix(tmp_path, mode):
  colours = masks.pascal_palette()[_indices()]
  PIL.Image.fromarray(colours).convert(mode).save(tmp_path / "rgb.png")
  mask, why = segmentation_masks.read(tmp_path / "rgb.png")
  assert mask is None
  assert f"colour ({mode}) mask" in why and "palette-indexed" in why


def test_other_modes_and_unreadable_files_are_refused(tmp_path):
  PIL.Image.fromarray(_indices()).convert("LA").save(tmp_path / "la.png")
  assert "mode 'LA'" in segmentation_masks.read(tmp_path / "la.png")[1]
  (tmp_path / "text.png").write_text("not a png")
  assert "unreadable mask" in segmentation_masks.read(tmp_path / "text.png")[1]
  good = _save_palette_png(_indices(), tmp_path / "cut.png").read_bytes()
  (tmp_path / "cut.png").write_bytes(good[:len(good) // 2])  # truncated download
  assert "unreadable mask" in segmentation_masks.read(tmp_path / "cut.png")[1]


def test_unexpected_values_lists_each_bad_value_once():
  allowed = np.array([*range(21), 255])
  mask = _indices()
  assert segmentation_masks.unexpected_values(mask, allowed).tolist() == []
  mask[0, :3] = [21, 100, 21]
  assert segmentation_masks.unexpected_values(mask, allowed).tolist() == [21, 100]


def test_encode_round_trips_through_tf_and_pil_as_one_channel():
  indices = _indices()
  encoded = segmentation_masks.encode(indices)
  np.testing.assert_array_equal(_decode(encoded)[..., 0], indices)
  np.testing.assert_array_equal(np.array(PIL.Image.open(io.BytesIO(encoded))), indices)
  assert len(encoded) < indices.size / 5  # compressed: flat masks shrink a lot
  assert segmentation_masks.encode(indices.copy()) == encoded


def test_the_same_source_gives_the_same_bytes_whatever_its_metadata(tmp_path):
  indices = _indices()
  info = PIL.PngImagePlugin.PngInfo()
  info.add_text("Software", "some editor")
  plain = _save_palette_png(indices, tmp_path / "a.png")
  decorated = _save_palette_png(indices, tmp_path / "b.png", palette=bytes(range(256)) * 3,
                                pnginfo=info)
  assert plain.read_bytes() != decorated.read_bytes()
  first, again, other = (segmentation_masks.read(p)[0].png for p in (plain, plain, decorated))
  assert first == again == other
  changed = indices.copy()
  changed[0, 0] = 1
  assert segmentation_masks.read(_save_palette_png(changed, tmp_path / "c.png"))[0].png != first


@pytest.mark.parametrize("bad", [np.zeros((4, 4), np.int32), np.zeros((4, 4, 1), np.uint8)])
def test_encode_refuses_non_index_arrays(bad):
  with pytest.raises(ValueError, match="H x W uint8"):
    segmentation_masks.encode(bad)
