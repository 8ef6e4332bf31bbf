"""One image's fingerprint: what duplicate detection and statistics need to know of it.

* `pixels`: a digest of the image's size and its pixels at a small decode (`decode_small`:
  a JPEG's DCT scaled by 1/8, 1/4 or 1/2 in libjpeg, so its shorter side stays >=
  `SMALL_DECODE`; other formats in full), so two files holding the same picture are exact duplicates whatever
  their bytes (EXIF added or removed, PNG recompressed). A JPEG and a PNG of its pixels are
  decoded differently, so they are near duplicates, not exact ones; two JPEGs that differ
  only in detail finer than the small decode (a few pixels) count as exact;
* `perceptual`: two 64-bit perceptual hashes from `imagehash` (a well-kept library):
  pHash (signs of the low DCT frequencies) and aHash (8x8 means against their mean),
  concatenated into 128 bits. Measured on photo-like images (docs/know_your_data.md): a copy
  re-encoded, resized or converted differs by a few bits, one with 5 % of its borders cropped
  by up to ~25, distinct photos by ~64 (rarely below 33). The two hashes err on different
  pictures, so together they separate crops from distinct photos better than either alone
  (pHash + wHash separates as well, at several times the cost: pywt);
* `thumbnail`: a 16x16 grey thumbnail (256 bytes) that confirms a near pair the hashes
  propose (`duplicates.similarities`): on real photos the 128 bits alone pair distinct pictures
  (textures, tiles) about twice in 10,000 pairs;
* the stored size and format, for the dataset card's statistics;
* `quality`: the measures of `image_quality` (brightness, edges, entropy, colour), from
  the same small decode.

A pure function of the bytes: it runs in the build's worker processes, next to the image
checks, and again on any stored version (`imagesets duplicates`). The small decode is what
makes it cheap: libjpeg skips most of the inverse DCT and the colour conversion, and
nothing hashes or resamples the full pixels (docs/know_your_data.md has the figures); the
entropy-coded data is still read whole.
"""

import collections
import dataclasses
import functools
import hashlib
import io
import math
import warnings

import imagehash
import numpy as np
import PIL.Image
import PIL.ImageFile
import simplejpeg

from imagesets.analysis import image_quality

HASH_BITS = 128  # pHash 64 + aHash 64
_THUMBNAIL = 64  # side of the grey thumbnail both hashes are computed from
SMALL = 16  # side of the stored thumbnail that confirms near pairs
SMALL_DECODE = 64  # a JPEG's shorter side at its small decode is at least this (or in full)


@dataclasses.dataclass(frozen=True)
class Fingerprint:
  pixels: str       # hex digest of the image's size and its small decode's RGB pixels
  perceptual: int   # HASH_BITS bits: pHash << 64 | aHash
  height: int
  width: int
  format: str       # "jpeg", "png", ... (lower case, from the bytes)
  thumbnail: bytes = b""  # SMALL x SMALL grey, row major
  quality: tuple[float, ...] = ()  # image_quality.measure of the small decode

  def to_json(self) -> list:
    return [self.pixels, f"{self.perceptual:032x}", self.height, self.width, self.format,
            self.thumbnail.hex(), list(self.quality)]

  @classmethod
  def from_json(cls, row: list) -> "Fingerprint":
    """The fingerprint of a stored row; ValueError for measures that are not every one of
    `image_quality.FIELDS`, finite (a row without measures has none)."""
    pixels, perceptual, height, width, fmt, thumbnail, *quality = row
    measures = tuple(map(float, quality[0])) if quality else ()
    if measures and (len(measures) != len(image_quality.FIELDS)
                     or not all(map(math.isfinite, measures))):
      raise ValueError(f"quality measures {list(measures)!r:.120} are not the "
                       f"{len(image_quality.FIELDS)} finite values of {image_quality.FIELDS}")
    return cls(pixels, int(perceptual, 16), int(height), int(width), fmt,
               bytes.fromhex(thumbnail), measures)


def decode_rgb(data: bytes) -> tuple[np.ndarray, str, bytes]:
  """(HxWx3 uint8 pixels, format, what RGB leaves out) of stored image bytes (already
  upright: builds rotate them).

  JPEGs go through libjpeg-turbo (simplejpeg), the decoder the image checks use."""
  if data[:2] == b"\xff\xd8":
    return simplejpeg.decode_jpeg(data, colorspace="RGB", strict=False), "jpeg", b""
  with PIL.Image.open(io.BytesIO(data)) as image:
    return (np.asarray(image.convert("RGB")), (image.format or "unknown").lower(),
            _beyond_rgb(image))


def _beyond_rgb(image: PIL.Image.Image) -> bytes:
  """What converting to 8-bit RGB drops that tells two pictures apart: an alpha channel
  that is not fully opaque, values of more than 8 bits. Empty for plain pictures, so a
  PNG and a JPEG of the same RGB pixels keep one digest."""
  extra = b""
  if "A" in image.getbands() or "transparency" in image.info:
    alpha = np.asarray(image.convert("RGBA"))[..., 3]
    if (alpha != 255).any():
      extra += b"alpha" + alpha.tobytes()
  if image.mode.startswith("I") or image.mode == "F":  # 16- and 32-bit greys
    extra += image.mode.encode() + image.tobytes()
  return extra


def _grey(rgb: np.ndarray) -> PIL.Image.Image:
  """A _THUMBNAIL-square grey thumbnail of `rgb`, resampled with PIL's antialiased
  bilinear filter: from a small decode or a full one, a copy gets nearly the same
  thumbnail (a box filter aliased fine textures, and their hashes drifted apart)."""
  image = PIL.Image.fromarray(rgb)
  factor = max(1, min(image.size) // (4 * _THUMBNAIL))  # (a large PNG: box-reduced first)
  return image.reduce(factor).convert("L").resize((_THUMBNAIL, _THUMBNAIL),
                                                  PIL.Image.Resampling.BILINEAR)


@functools.cache
def _scipy_imported_quietly() -> None:
  """imagehash's pHash imports scipy.fftpack on its first call, and scipy.special adds a
  process-wide warnings filter on import: imported here under catch_warnings, so that a
  fingerprint taken in the caller's process (the page of a version) changes nothing of it."""
  with warnings.catch_warnings():
    import scipy.fftpack  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import


def warm_up() -> None:
  """What a process's first fingerprint would wait for, done ahead (a build's idle workers:
  `parallel_map.warm`): scipy's imports (~0.08 s) and PIL's formats."""
  _scipy_imported_quietly()
  PIL.Image.preinit()


def _hash_of(thumbnail: PIL.Image.Image) -> int:
  _scipy_imported_quietly()
  bits = np.concatenate([imagehash.phash(thumbnail).hash.ravel(),
                         imagehash.average_hash(thumbnail).hash.ravel()])
  return int(np.packbits(bits).tobytes().hex(), 16)


def small_thumbnail(grey: PIL.Image.Image) -> bytes:
  return grey.resize((SMALL, SMALL), PIL.Image.Resampling.BOX).tobytes()


def decode_small(data: bytes) -> tuple[np.ndarray, str, bytes, tuple[int, int]]:
  """(RGB pixels at a small decode, format, what RGB leaves out, (height, width) of the
  image): a JPEG decoded at the smallest of the DCT scales 1/8, 1/4 and 1/2 whose shorter
  side stays >= SMALL_DECODE (else in full), any other format in full (`decode_rgb`)."""
  if data[:2] == b"\xff\xd8":
    height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    # libjpeg-turbo has fast inverse DCTs for 1/2, 1/4 and 1/8 only (its other M/8
    # scales can be slower than a full decode)
    factor = next((f for f in (8, 4, 2) if min(height, width) // f >= SMALL_DECODE), 1)
    small = simplejpeg.decode_jpeg(data, colorspace="RGB", strict=False,
                                   min_height=-(-height // factor),
                                   min_width=-(-width // factor))
    return small, "jpeg", b"", (height, width)
  rgb, fmt, extra = decode_rgb(data)
  return rgb, fmt, extra, rgb.shape[:2]


def of_bytes(data: bytes) -> Fingerprint:
  """The fingerprint of encoded image bytes (one small decode; none for bytes this process
  fingerprinted lately: `_SAME_BYTES`)."""
  key = (PIL.Image.MAX_IMAGE_PIXELS, PIL.ImageFile.LOAD_TRUNCATED_IMAGES,
         hashlib.sha256(data).digest())
  fingerprint = _SAME_BYTES.get(key) or _of_new_bytes(data)
  _SAME_BYTES[key] = fingerprint
  try:
    _SAME_BYTES.move_to_end(key)  # (the newest last: the oldest leaves first)
    while len(_SAME_BYTES) > _SAME_BYTES_KEPT:
      _SAME_BYTES.popitem(last=False)
  except KeyError:  # (another thread took it or emptied the table meanwhile)
    pass
  return fingerprint


# A fingerprint is a function of the bytes (and of PIL's two switches that refuse or take
# a picture: the decompression-bomb limit, truncated files; in the key), so the
# fingerprints of the last bytes seen serve exact copies without a decode (a folder's
# copies of one file: hashing 30 KB costs a tenth of its decode). Process-local and
# bounded: ~0.8 KB an entry, ~13 MB full. No lock: each OrderedDict call is atomic under
# the GIL (CPython with the GIL, as every build here), and a lock held by another thread
# when a build forks its workers would stay held in them.
_SAME_BYTES: collections.OrderedDict = collections.OrderedDict()
_SAME_BYTES_KEPT = 16384


def _of_new_bytes(data: bytes) -> Fingerprint:
  small, fmt, extra, (height, width) = decode_small(data)
  grey = _grey(small)
  return Fingerprint(_digest(small, extra, (height, width)), _hash_of(grey), int(height),
                     int(width), fmt, small_thumbnail(grey), image_quality.measure(small))


def _digest(rgb: np.ndarray, extra: bytes = b"", size: tuple[int, int] | None = None) -> str:
  digest = hashlib.sha256(repr(rgb.shape if size is None else (*size, 3)).encode())
  digest.update(np.ascontiguousarray(rgb).data)
  digest.update(extra)
  return digest.hexdigest()[:32]


def pixel_digest(data: bytes) -> str:
  """A digest of the fully decoded pixels of encoded image bytes: the same for the same
  pixels, whatever the bytes (EXIF, PNG compression, a JPEG's pixels as PNG), and another
  for any change of a pixel (what `version_diff` needs; `Fingerprint.pixels` is cheaper)."""
  rgb, _, extra = decode_rgb(data)
  return _digest(rgb, extra)


def distance(a: int, b: int) -> int:
  """Hamming distance of two perceptual hashes."""
  return (a ^ b).bit_count()
