"""Is this file a usable image, and can it be stored byte-for-byte?

Our contract for a stored image: `tf.io.decode_image(bytes)` gives the upright picture as
uint8 RGB (3 channels) of the recorded height and width. `check` finds out fast, without a
full decode: it reads the header and walks a JPEG's marker segments to its end-of-image
marker; then libjpeg-turbo (through simplejpeg) validates the tables and starts decoding a
plain JPEG (one baseline frame, one scan), or decodes any other JPEG at 1/8 scale (PIL
`draft` for CMYK), which reads every byte of the entropy-coded data. So truncated or
damaged files fail here, when TensorFlow would fail to decode them, and not in someone's
training job (tested on damaged files; on 6,000 randomly damaged ones (docs/performance.md)
we refused every file TensorFlow refuses but one damaged progressive JPEG, and 23 that
TensorFlow still decodes: we err on the side of reporting). Files that do not meet
the contract as they are (grayscale, CMYK, EXIF-rotated, alpha, palette, 16-bit,
non-JPEG/PNG content) are named with the reason and re-encoded by `convert`; everything
else is stored as it came.
"""

import dataclasses
import io
import re

import numpy as np
import PIL.Image
import simplejpeg
import PIL.ImageOps
from PIL import JpegImagePlugin
from PIL import PngImagePlugin

from imagesets.building import png_chunks
from imagesets.constants import ORIGINAL_SIZE

JPEG = "jpeg"
PNG = "png"
_EXIF_ORIENTATION = 0x0112
_PNG_COLOR_TYPES = {0: "grayscale", 2: "RGB", 3: "palette", 4: "grayscale+alpha", 6: "RGBA"}
# Not stuffing (FF00) nor a restart marker; FF FF is fill before a marker. A literal first
# byte keeps the regex on its fast scanning path (`\xff+` made it 20x slower).
_JPEG_NEXT_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7]")
_JPEG_STANDALONE = {0x01} | set(range(0xD0, 0xD8))  # TEM, RSTn: no length field
_JPEG_EOI, _JPEG_SOS = 0xD9, 0xDA
_JPEG_SEQUENTIAL_HUFFMAN = {0xC0, 0xC1}  # SOF0 baseline, SOF1 extended sequential
_JPEG_SCAN_PREFIX = 64  # bytes of entropy-coded data decoded by the fast check
# PIL imports its format plugins on the first open; do it now, so that worker processes
# forked from the build inherit them instead of each importing them again.
PIL.Image.preinit()
_DRAFT_SCALE = 8  # the smallest scale libjpeg decodes to; it still reads all the data
_JPEG_RESIZE_QUALITY = 90
_JPEG_SOI = b"\xff\xd8\xff"


def _open(data: bytes) -> PIL.Image.Image:
  """PIL.Image.open, without its decompression-bomb *warning* for JPEG and PNG (PIL being
  careful, not a broken file). Silencing it with warnings.catch_warnings() would swap the
  process's warning filters, which is not thread-safe (checks run on threads, two builds
  may run at once): the plugins are opened directly instead, and the size limit that PIL
  turns into an error (twice its MAX_IMAGE_PIXELS, read at each call) is ours to apply."""
  try:
    if data.startswith(_JPEG_SOI):
      image = JpegImagePlugin.jpeg_factory(io.BytesIO(data))
    elif data.startswith(png_chunks.SIGNATURE):
      image = PngImagePlugin.PngImageFile(io.BytesIO(data))
    else:
      image = None
  except Exception:  # a broken header: PIL's open says what it makes of it, as before
    image = None
  if image is None:  # rare formats: PIL's own open (its warning goes to the user's filters)
    return PIL.Image.open(io.BytesIO(data))
  limit = PIL.Image.MAX_IMAGE_PIXELS
  if limit and image.size[0] * image.size[1] > 2 * limit:
    image.close()
    raise PIL.Image.DecompressionBombError(
        f"{image.size[0]}x{image.size[1]} pixels, more than twice PIL's MAX_IMAGE_PIXELS")
  return image


class BadImageError(ValueError):
  """The bytes are not a usable image; the message is the reason, for the user."""


@dataclasses.dataclass(frozen=True)
class ImageFacts:
  format: str              # JPEG or PNG: the format of the bytes we store
  height: int              # of the stored, upright image
  width: int
  conversion: str | None   # why the bytes must be re-encoded; None = store them as they are


def check(data: bytes, *, resized_below: int = ORIGINAL_SIZE) -> ImageFacts:
  """Validates encoded image bytes; raises BadImageError with a reason if unusable.

  `resized_below`: the caller resizes images whose shorter side is larger than this, which
  decodes them anyway (and fails on damaged data); those JPEGs skip the 1/8-scale decode
  here, so a 12 MP photo is entropy-decoded once, not twice.
  """
  if not data:
    raise BadImageError("empty file (0 bytes)")
  try:
    image = _open(data)
  except PIL.UnidentifiedImageError:
    raise BadImageError(f"not an image (starts with {data[:8]!r})") from None
  except Exception as error:  # PIL raises many types for broken headers.
    raise BadImageError(f"unreadable image header: {error}") from None
  with image:
    kind = image.format
    mode = image.mode
    orientation = _orientation(image)
    width, height = image.size
    try:
      if kind in ("JPEG", "MPO"):
        scan_data = _walk_jpeg_markers(data)
        resized = bool(resized_below) and min(width, height) > resized_below
        if mode not in ("RGB", "L"):  # CMYK, YCCK: not libjpeg-turbo's fast path, rare
          image.draft(mode, (max(1, width // _DRAFT_SCALE), max(1, height // _DRAFT_SCALE)))
          image.load()
        elif scan_data is not None:
          _start_jpeg_decoding(data, scan_data)
        elif not resized:  # (a resized one is decoded by `convert`, which raises)
          _decode_jpeg_at_one_eighth(data)
      else:
        if kind == "PNG":
          _walk_png_chunks(data)
        image.load()
    except Exception as error:
      raise BadImageError(f"cannot be decoded ({kind}): {error}") from None
  if orientation in (5, 6, 7, 8):  # transposed: the upright image is width x height
    height, width = width, height
  reasons = []
  if kind in ("JPEG", "MPO"):  # MPO = phone multi-picture JPEG; decoders read the first
    stored = JPEG
    if mode != "RGB":
      reasons.append(f"{mode} JPEG, not RGB")
  elif kind == "PNG":
    stored = PNG
    depth, color = data[24], data[25]  # IHDR, right after the signature and chunk header
    if color != 2:
      reasons.append(f"{_PNG_COLOR_TYPES.get(color, color)} PNG, not RGB")
    if depth != 8:
      reasons.append(f"{depth}-bit PNG")
  else:
    stored = PNG
    reasons.append(f"{kind} content, stored as lossless PNG")
  if orientation not in (None, 1):
    reasons.append(f"EXIF orientation {orientation}, which decoders ignore: rotated upright")
  return ImageFacts(stored, height, width, "; ".join(reasons) or None)


def _walk_jpeg_markers(data: bytes) -> int | None:
  """Follows the marker segments from SOI to EOI as libjpeg's memory reader does. For a
  plain file, returns where its entropy-coded data starts: plain = one baseline or
  sequential Huffman frame and one scan, whose data runs (with restart markers only)
  straight to the end-of-image marker; else None.

  PIL tolerates some damage that TensorFlow's decoder refuses (a marker segment running
  past the end of the data, a missing end-of-image marker); this walk refuses it too.
  """
  position, size = 2, len(data)
  frames, scans, after_scan, scan_data = set(), 0, False, None
  while True:
    if position + 2 > size or data[position] != 0xFF:
      raise ValueError(f"no end-of-image marker (file cut at byte {size}?)")
    marker = data[position + 1]
    if marker == 0xFF:  # fill byte before a marker
      position += 1
      continue
    if marker == _JPEG_EOI:
      plain = frames <= _JPEG_SEQUENTIAL_HUFFMAN and len(frames) == 1 and scans == 1
      return scan_data if plain else None
    if marker in _JPEG_STANDALONE:
      position += 2
      continue
    if after_scan:
      scans += 1  # another segment after the scan: several scans, or damage; not plain
    if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
      frames.add(marker)
    if position + 4 > size:
      raise ValueError("marker segment cut off at the end of the file")
    end = position + 2 + int.from_bytes(data[position + 2:position + 4], "big")
    if end > size:
      raise ValueError(f"marker 0x{marker:02X} segment runs past the end of the file")
    position = end
    if marker == _JPEG_SOS:  # entropy-coded data runs to the next real marker
      scans, after_scan, scan_data = scans + 1, True, position
      found = _JPEG_NEXT_MARKER.search(data, position)
      if not found:
        raise ValueError(f"no end-of-image marker (file cut at byte {size}?)")
      position = found.start()


def _walk_png_chunks(data: bytes) -> None:
  """Follows the chunks from the signature to IEND as libpng does, checking the CRC of each
  critical one (IHDR, PLTE, IDAT, IEND). PIL reads IDAT and IEND without their CRCs, and
  does not need IEND; libpng (`tf.io.decode_png`) refuses a file with a bad CRC there, or cut
  before the end of IEND. (A bad CRC in an ancillary chunk libpng only warns about.)"""
  size = len(data)
  for kind, start, end in png_chunks.chunks(data):
    if start + 12 > size:
      break   # (not even an empty chunk's 12 bytes left)
    name = kind.decode("latin-1")
    if end > size:
      raise ValueError(f"chunk {name} runs past the end of the file (cut at byte {size}?)")
    critical = kind[:1].isupper()  # (IHDR, PLTE, IDAT, IEND; ancillary ones: lower case)
    if critical and not png_chunks.crc_matches(memoryview(data)[start:end]):
      raise ValueError(f"chunk {name} has a bad CRC (damaged file)")
    if kind == b"IEND":
      return
  raise ValueError(f"no IEND chunk (file cut at byte {size}?)")


def _start_jpeg_decoding(data: bytes, scan_data: int) -> None:
  """libjpeg-turbo reads and validates every marker segment of a plain JPEG (see
  `_walk_jpeg_markers`) and starts decoding, as TensorFlow's decoder does (frame,
  quantization and Huffman tables, scan header: the checks of jpeg_read_header and
  jpeg_start_decompress), on the headers and the first bytes of the scan only.

  Measured on thousands of randomly damaged JPEGs (docs/performance.md): for a plain JPEG
  nothing after that makes TensorFlow's decode fail; damage inside the entropy-coded data
  draws libjpeg warnings, which TensorFlow ignores (it decodes the damaged pixels). The
  walk already found the end-of-image marker, so a cut file is refused there.
  """
  simplejpeg.decode_jpeg(data[:scan_data + _JPEG_SCAN_PREFIX] + b"\xff\xd9", colorspace="GRAY",
                         min_height=1, min_width=1, min_factor=_DRAFT_SCALE, strict=False)


def _decode_jpeg_at_one_eighth(data: bytes) -> None:
  """libjpeg-turbo's smallest scale, as grey levels: every byte of the entropy-coded data
  is still decoded, with ~15 % less work than PIL's draft mode (no colour conversion, no
  Python-level read loop). Warnings (damaged but decodable data) pass, as in TensorFlow."""
  simplejpeg.decode_jpeg(data, colorspace="GRAY", min_height=1, min_width=1,
                         min_factor=_DRAFT_SCALE, strict=False)


def _orientation(image: PIL.Image.Image) -> int | None:
  try:
    return image.getexif().get(_EXIF_ORIENTATION)
  except Exception:  # A broken EXIF block does not make the pixels unusable.
    return None


def convert(data: bytes, facts: ImageFacts, *, shorter_side: int = ORIGINAL_SIZE) -> tuple[bytes, ImageFacts]:
  """Re-encodes checked bytes as upright 8-bit RGB; with `shorter_side`, also downsizes.

  JPEG stays JPEG, re-encoded with the source's own quantization tables (about the same
  quality and size); anything else becomes PNG. Resized images are always JPEG at
  quality 90. Metadata (EXIF) is not carried over: the pixels are already upright.
  """
  with PIL.Image.open(io.BytesIO(data)) as source:
    if shorter_side and source.format in ("JPEG", "MPO"):
      # Let libjpeg do most of the downscaling, staying >= 2x the target for quality.
      scale = 2 * shorter_side / min(source.size)
      source.draft("RGB", (int(source.width * scale) + 1, int(source.height * scale) + 1))
    # Turned upright first: the conversions to RGB (compositing, 16-bit) drop the EXIF block.
    image = _to_rgb(PIL.ImageOps.exif_transpose(source))
    if shorter_side:
      image = _downsize(image, shorter_side)
      save = dict(format="JPEG", quality=_JPEG_RESIZE_QUALITY)
    elif facts.format == JPEG:
      save = _same_quality_jpeg(source)
    else:
      save = dict(format="PNG")
  out = io.BytesIO()
  image.save(out, **save)
  height, width = image.height, image.width
  return out.getvalue(), ImageFacts(save["format"].lower(), height, width, facts.conversion)


def _to_rgb(image: PIL.Image.Image) -> PIL.Image.Image:
  if image.mode in ("I", "I;16", "I;16B", "I;16L"):  # 16-bit grey: keep the top 8 bits
    image = PIL.Image.fromarray((np.asarray(image, np.uint32) >> 8).astype(np.uint8))
  if image.mode in ("RGBA", "LA", "PA", "La", "RGBa") or "transparency" in image.info:
    # Transparent pixels often hide arbitrary colours; show them as a viewer would.
    rgba = image.convert("RGBA")
    white = PIL.Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return PIL.Image.alpha_composite(white, rgba).convert("RGB")
  return image.convert("RGB")


def _same_quality_jpeg(source: PIL.Image.Image) -> dict:
  tables = list(getattr(source, "quantization", {}).values())
  if len(tables) == 1:  # grayscale source: use its one table for chroma too
    tables *= 2
  sampling = JpegImagePlugin.get_sampling(source)
  save = dict(format="JPEG", subsampling=sampling if sampling >= 0 else 2)
  if tables:
    save["qtables"] = tables[:2]
  else:
    save["quality"] = 95
  if source.mode == "RGB" and source.info.get("icc_profile"):
    save["icc_profile"] = source.info["icc_profile"]  # still valid for the RGB pixels
  return save


def _downsize(image: PIL.Image.Image, shorter_side: int) -> PIL.Image.Image:
  scale = shorter_side / min(image.size)
  if scale >= 1:
    return image  # never upscale
  size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
  return image.resize(size, PIL.Image.Resampling.BICUBIC)


def _dct_downscaled(data: bytes, facts: ImageFacts, shorter_side: int,
                    exact: bool) -> tuple[bytes, ImageFacts]:
  """An upright RGB JPEG decoded by libjpeg-turbo straight at the smallest scale n/8 whose
  shorter side is at least `shorter_side`; with `exact`, then resized (bicubic) to exactly
  that shorter side; encoded at quality `_JPEG_RESIZE_QUALITY`.

  Scaling inside the inverse DCT replaces a decode at full size plus most of a resampling
  pass: about 3x less work for a 500x375 photo, and a 12 MP photo is decoded at 1/8 scale.
  Without `exact` the shorter side lands between `shorter_side` and the next scale step
  above it (e.g. 282 for 258 from 375; 378 for 258 from 3024).
  """
  fits = ({"min_height": shorter_side} if facts.height <= facts.width
          else {"min_width": shorter_side})
  image = PIL.Image.fromarray(simplejpeg.decode_jpeg(data, colorspace="RGB", strict=False, **fits))
  how = "libjpeg DCT scaling"
  if exact and min(image.size) != shorter_side:
    image, how = _downsize(image, shorter_side), "libjpeg DCT scaling, then bicubic"
  out = io.BytesIO()
  image.save(out, format="JPEG", quality=_JPEG_RESIZE_QUALITY)
  side = min(image.size)
  reason = (f"resized to shorter side {side}" if exact else
            f"resized to shorter side {side} (>= {shorter_side}")
  return out.getvalue(), ImageFacts(
      JPEG, image.height, image.width,
      f"{reason} ({how})" if exact else f"{reason}, {how})")


def resize_threshold(shorter_side: int = ORIGINAL_SIZE, image_size: int = ORIGINAL_SIZE) -> int:
  """What `check` is told about the resizing `prepare` does with these options."""
  return image_size or shorter_side


def prepare(data: bytes, *, shorter_side: int = ORIGINAL_SIZE,
            image_size: int = ORIGINAL_SIZE,
            facts: ImageFacts | None = None) -> tuple[bytes, ImageFacts]:
  """Checked bytes to store and their facts: the input itself when it can pass through.

  Images whose shorter side is larger are stored downscaled: with `image_size`, to exactly
  that shorter side; with `shorter_side`, JPEGs to at least it (libjpeg's n/8 scales).
  Never upscaled; resized images are JPEGs of quality `_JPEG_RESIZE_QUALITY`.
  `facts`: what `check(data, resized_below=resize_threshold(...))` said, when the caller
  needed them first (the bytes are then checked once).
  """
  exact = bool(image_size)
  shorter_side = resize_threshold(shorter_side, image_size)
  facts = facts or check(data, resized_below=shorter_side)
  if min(facts.height, facts.width) <= shorter_side:
    shorter_side = ORIGINAL_SIZE  # never upscaled, nor re-encoded only to be the same size
  if facts.conversion is None and not shorter_side:
    return data, facts
  try:
    if shorter_side and facts.conversion is None and facts.format == JPEG:
      return _dct_downscaled(data, facts, shorter_side, exact)
    if shorter_side:
      reason = f"resized to shorter side {shorter_side}"
      facts = dataclasses.replace(
          facts, conversion=f"{facts.conversion}; {reason}" if facts.conversion else reason)
    return convert(data, facts, shorter_side=shorter_side)
  except Exception as error:  # a file PIL reads but cannot turn into RGB: report, not crash
    raise BadImageError(f"cannot be decoded or converted ({facts.conversion}): {error}") from None
