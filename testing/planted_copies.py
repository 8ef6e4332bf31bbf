"""Copies of photos as they happen in real collections, for duplicate-detection tests and
the quality benchmark: the same picture saved twice, re-encoded, resized, converted, cropped.

Each maker takes the original's pixels (HxWx3 uint8) and returns encoded bytes.
"""

import numpy as np
import PIL.Image

from imagesets_testing import sample_images


def _image(pixels: np.ndarray) -> PIL.Image.Image:
  return PIL.Image.fromarray(pixels)


def original(pixels: np.ndarray) -> bytes:
  """How the originals of a planted tree are stored: JPEG quality 90."""
  return sample_images.encode(pixels, "JPEG", quality=90)


def exact(pixels: np.ndarray) -> bytes:
  """The same pixels, other bytes: the original JPEG with an EXIF block added (orientation 1)."""
  return sample_images.encode(pixels, "JPEG", orientation=1, quality=90)


def jpeg_q60(pixels: np.ndarray) -> bytes:
  return sample_images.encode(pixels, "JPEG", quality=60)


def resized_half(pixels: np.ndarray) -> bytes:
  image = _image(pixels)
  return sample_images.encode(image.resize((image.width // 2, image.height // 2),
                                           PIL.Image.Resampling.BICUBIC), "JPEG", quality=90)


def png(pixels: np.ndarray) -> bytes:
  """The original JPEG's decoded pixels saved as PNG (exactly the same pixels)."""
  decoded = np.asarray(PIL.Image.open(__import__("io").BytesIO(original(pixels))).convert("RGB"))
  return sample_images.encode(decoded, "PNG")


def border_crop(pixels: np.ndarray, fraction: float = 0.05) -> bytes:
  """5 % of the width and of the height cut off, split evenly between the opposite borders."""
  height, width = pixels.shape[:2]
  dy, dx = round(height * fraction / 2), round(width * fraction / 2)
  return sample_images.encode(pixels[dy:height - dy, dx:width - dx], "JPEG", quality=90)


KINDS = {"exact": exact, "jpeg_q60": jpeg_q60, "resized_50": resized_half, "png": png,
         "crop_5": border_crop}
