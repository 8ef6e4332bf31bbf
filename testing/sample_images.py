"""Photo-like images and the odd files real photo collections hold, made on the spot.

For tests, dummy data and benchmarks (no downloads): smooth colour fields with soft
discs and grain compress and decode like photos, not like noise; a vertical red-to-blue
layout makes "upright" checkable.
"""

import io

import numpy as np
import PIL.Image

EXIF_ORIENTATION = 0x0112


def photo(height: int, width: int, seed: int = 0) -> np.ndarray:
  """uint8 RGB, HxWx3: red-ish at the top, blue-ish at the bottom, soft shapes, grain."""
  rng = np.random.default_rng(seed)
  coarse = rng.integers(40, 216, (6, 8, 3)).astype(np.float32)
  coarse[:3, :, 0] += 40   # top: more red
  coarse[3:, :, 2] += 40   # bottom: more blue
  image = np.asarray(PIL.Image.fromarray(np.clip(coarse, 0, 255).astype(np.uint8)).resize(
      (width, height), PIL.Image.BICUBIC), np.float32)
  yy, xx = np.mgrid[0:height, 0:width]
  for _ in range(6):  # petals: soft-edged coloured discs
    cy, cx = rng.uniform(0, height), rng.uniform(0, width)
    radius = rng.uniform(0.05, 0.25) * max(height, width)
    mask = np.clip((radius - np.hypot(yy - cy, xx - cx)) / 6, 0, 1)[..., None]
    image = image * (1 - mask) + rng.uniform(0, 255, 3) * mask
  image += rng.normal(0, 6, image.shape)  # sensor grain and texture
  return np.clip(image, 0, 255).astype(np.uint8)


def encode(image, fmt: str, orientation: int | None = None, **save) -> bytes:
  """`image` (array or PIL image) encoded by PIL as `fmt`, optionally with EXIF orientation."""
  if isinstance(image, np.ndarray):
    image = PIL.Image.fromarray(image)
  if orientation is not None:
    exif = PIL.Image.Exif()
    exif[EXIF_ORIENTATION] = orientation
    save["exif"] = exif.tobytes()
  out = io.BytesIO()
  image.save(out, format=fmt, **save)
  return out.getvalue()


def jpeg(height: int, width: int, seed: int = 0, quality: int = 90) -> bytes:
  return encode(photo(height, width, seed), "JPEG", quality=quality)


def sideways_jpeg(upright: np.ndarray, quality: int = 95) -> bytes:
  """A phone photo: the sensor image turned 90 degrees, with EXIF orientation 6 to undo it."""
  return encode(np.rot90(upright, k=1), "JPEG", orientation=6, quality=quality)


def cmyk_jpeg(rgb: np.ndarray) -> bytes:
  return encode(PIL.Image.fromarray(rgb).convert("CMYK"), "JPEG", quality=95)


def rgba_png(rgb: np.ndarray) -> bytes:
  """RGBA with the left half fully transparent (its hidden colour is black)."""
  alpha = np.full(rgb.shape[:2], 255, np.uint8)
  alpha[:, : rgb.shape[1] // 2] = 0
  hidden = rgb.copy()
  hidden[:, : rgb.shape[1] // 2] = 0
  return encode(np.dstack([hidden, alpha]), "PNG")
