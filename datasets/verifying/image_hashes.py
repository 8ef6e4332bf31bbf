"""One image's fingerprint: what duplicate detection and statistics need to know of it.

* `content`: a digest of the encoded bytes: the same bytes are the same picture, whatever
  the file's name;
* `perceptual`: two 64-bit perceptual hashes from `imagehash` (a well-kept library):
  pHash (signs of the low DCT frequencies) and aHash (8x8 means against their mean),
  concatenated into 128 bits. Measured on photo-like images (docs/know_your_data.md): a copy
  re-encoded, resized or converted differs by a few bits, one with 5 % of its borders cropped
  by up to ~25, distinct photos by ~64 (rarely below 33). The two hashes err on different
  pictures, so together they separate crops from distinct photos better than either alone
  (pHash + wHash separates as well but costs 7x more: pywt);
* `thumbnail`: a 16x16 grey thumbnail (256 bytes) that confirms a near pair the hashes
  propose (`duplicates.confirmed`): on real photos the 128 bits alone pair distinct pictures
  (textures, tiles) about twice in 10,000 pairs;
* the stored size and format, for the dataset card's statistics;
* `pixels`, only when asked for (`with_pixels`): a digest of the decoded pixels and their
  shape, so two files holding the same picture are exact duplicates whatever their bytes
  (EXIF added or removed, PNG recompressed, a JPEG's pixels saved as PNG).

The hashes and the thumbnail come from a 64-pixel grey thumbnail, so a JPEG is decoded by
libjpeg-turbo at a reduced scale (1/2 to 1/8, in the DCT domain: much of a full decode's
work is never done), grey only; a full decode, for `pixels`, is left to the few images that
duplicate detection finds alike (`duplicates.find`'s `pixels_of`). A fingerprint costs
about a third of what it did with a full decode and pixel digest of every image
(docs/know_your_data.md: 0.65 ms against 1.76 ms for a 500x375 photo, 27 against 87 ms for
a 12-megapixel one).

A pure function of the bytes: it runs in the build's worker processes, next to the image
checks, and again on any stored version (`imagesets duplicates`).
"""

import dataclasses
import hashlib
import io

import imagehash
import numpy as np
import PIL.Image
import simplejpeg

HASH_BITS = 128  # pHash 64 + aHash 64
_THUMBNAIL = 64  # side of the grey thumbnail both hashes are computed from
SMALL = 16  # side of the stored thumbnail that confirms near pairs


@dataclasses.dataclass(frozen=True)
class Fingerprint:
  content: str      # hex digest of the encoded bytes
  perceptual: int   # HASH_BITS bits: pHash << 64 | aHash
  height: int
  width: int
  format: str       # "jpeg", "png", ... (lower case, from the bytes)
  thumbnail: bytes = b""  # SMALL x SMALL grey, row major
  pixels: str = ""  # `pixel_digest` of the bytes, or "" when not computed

  def to_json(self) -> list:
    return [self.content, f"{self.perceptual:032x}", self.height, self.width, self.format,
            self.thumbnail.hex(), self.pixels]

  @classmethod
  def from_json(cls, row: list) -> "Fingerprint":
    content, perceptual, height, width, fmt, thumbnail, pixels = row
    return cls(content, int(perceptual, 16), int(height), int(width), fmt,
               bytes.fromhex(thumbnail), pixels)


def decode_rgb(data: bytes) -> tuple[np.ndarray, str]:
  """(HxWx3 uint8 pixels, format) of stored image bytes (already upright: builds rotate them).

  JPEGs go through libjpeg-turbo (simplejpeg), the decoder the image checks use."""
  if data[:2] == b"\xff\xd8":
    return simplejpeg.decode_jpeg(data, colorspace="RGB", strict=False), "jpeg"
  with PIL.Image.open(io.BytesIO(data)) as image:
    return np.asarray(image.convert("RGB")), (image.format or "unknown").lower()


def _decode_grey(data: bytes) -> tuple[PIL.Image.Image, int, int, str]:
  """(grey image, full height, full width, format). A JPEG is decoded at the smallest of
  libjpeg's 1/2, 1/4, 1/8 scales that keeps the shorter side at 2 * _THUMBNAIL or more: as
  `_thumbnail` box-averages a full decode down to that size, the hashes stay within a few
  bits of a PNG's holding the same pixels (other scales (3/8, ...) do not average: they
  moved textures' hashes by up to 46 bits)."""
  if data[:2] == b"\xff\xd8":
    height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    factor = next(f for f in (8, 4, 2, 1)
                  if min(height, width) // f >= 2 * _THUMBNAIL or f == 1)
    grey = simplejpeg.decode_jpeg(data, colorspace="GRAY", strict=False,
                                  min_height=-(-height // factor), min_width=-(-width // factor))
    return PIL.Image.fromarray(grey[:, :, 0]), height, width, "jpeg"
  with PIL.Image.open(io.BytesIO(data)) as image:
    # (RGB first: PIL's "L" of a palette, alpha or 16-bit image is not the RGB one's grey)
    return image.convert("RGB").convert("L"), image.height, image.width, (
        image.format or "unknown").lower()


def _thumbnail(grey: PIL.Image.Image) -> PIL.Image.Image:
  """A _THUMBNAIL-square thumbnail of `grey`."""
  factor = max(1, min(grey.size) // (2 * _THUMBNAIL))  # (box-averaged: cheap, no aliasing)
  return grey.reduce(factor).resize((_THUMBNAIL, _THUMBNAIL), PIL.Image.Resampling.BOX)


def _hash_of(thumbnail: PIL.Image.Image) -> int:
  bits = np.concatenate([imagehash.phash(thumbnail).hash.ravel(),
                         imagehash.average_hash(thumbnail).hash.ravel()])
  return int(np.packbits(bits).tobytes().hex(), 16)


def small_thumbnail(grey: PIL.Image.Image) -> bytes:
  return grey.resize((SMALL, SMALL), PIL.Image.Resampling.BOX).tobytes()


def of_bytes(data: bytes, *, with_pixels: bool = False) -> Fingerprint:
  """The fingerprint of encoded image bytes; `with_pixels` adds the decoded pixels' digest
  (a full decode: more work than all the rest)."""
  grey, height, width, fmt = _decode_grey(data)
  thumbnail = _thumbnail(grey)
  return Fingerprint(hashlib.sha256(data).hexdigest()[:32], _hash_of(thumbnail), height, width,
                     fmt, small_thumbnail(thumbnail), pixel_digest(data) if with_pixels else "")


def pixel_digest(data: bytes) -> str:
  """Hex digest of the decoded RGB pixels of encoded image bytes, and their shape: the same
  for the same pixels, whatever the bytes (EXIF, PNG compression)."""
  rgb = decode_rgb(data)[0]
  digest = hashlib.sha256(repr(rgb.shape).encode())
  digest.update(np.ascontiguousarray(rgb).data)
  return digest.hexdigest()[:32]


def distance(a: int, b: int) -> int:
  """Hamming distance of two perceptual hashes."""
  return (a ^ b).bit_count()
