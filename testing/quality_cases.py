"""Planted quality problems made from real photos: one maker per `image_quality` kind.

Each maker takes a real photo's RGB pixels (HxWx3 uint8) and returns the pixels of the
problem a photo folder really holds: an underexposed frame, a blown-out one, a missed focus,
a blank frame, a black-and-white scan saved as colour, a panorama strip,
a thumbnail saved by mistake.
"""

import numpy as np
import PIL.Image
import PIL.ImageFilter

from imagesets_testing import real_photos


def dark(pixels: np.ndarray) -> np.ndarray:
  return (pixels.astype(np.float32) * 0.12).astype(np.uint8)


def overexposed(pixels: np.ndarray) -> np.ndarray:
  return np.clip(pixels.astype(np.float32) * 0.25 + 248, 0, 255).astype(np.uint8)


def blurry(pixels: np.ndarray) -> np.ndarray:
  radius = max(pixels.shape[:2]) / 25
  return np.asarray(PIL.Image.fromarray(pixels).filter(PIL.ImageFilter.GaussianBlur(radius)))


def low_information(pixels: np.ndarray) -> np.ndarray:
  """A blank frame (a lens cap, a wall): the photo at 0.5 % of its contrast."""
  mean = pixels.reshape(-1, 3).mean(axis=0)
  return np.round(pixels * 0.005 + mean * 0.995).astype(np.uint8)


def grayscale(pixels: np.ndarray) -> np.ndarray:
  return np.asarray(PIL.Image.fromarray(pixels).convert("L").convert("RGB"))


def odd_aspect_ratio(pixels: np.ndarray) -> np.ndarray:
  """A panorama strip across the middle, 4:1."""
  height, width = pixels.shape[:2]
  strip = max(1, width // 4)
  return np.ascontiguousarray(pixels[(height - strip) // 2:(height + strip) // 2])


def tiny(pixels: np.ndarray) -> np.ndarray:
  return np.asarray(PIL.Image.fromarray(pixels).resize((24, 18), PIL.Image.Resampling.BOX))


def washed_out(pixels: np.ndarray) -> np.ndarray:
  """A washed-out frame (haze, a flash too close): every pixel 235-255, the photo at 8 % of
  its contrast. Its darkest pixels are not white: CleanVision's cut does not call it
  overexposed."""
  return np.clip(pixels.astype(np.float32) * 0.08 + 235, 0, 255).astype(np.uint8)


def underexposed(pixels: np.ndarray, stops: float) -> np.ndarray:
  """The photo taken with 2**-stops of the light: scaled in linear light (sRGB's curve
  undone and redone), as a camera's exposure scales it. `dark` (12 % of the encoded
  values) is ~6-7 stops."""
  encoded = pixels.astype(np.float64) / 255
  light = np.where(encoded <= 0.04045, encoded / 12.92, ((encoded + 0.055) / 1.055) ** 2.4)
  light *= 2.0 ** -stops
  out = np.where(light <= 0.0031308, light * 12.92, 1.055 * light ** (1 / 2.4) - 0.055)
  return np.clip(np.round(out * 255), 0, 255).astype(np.uint8)


def shaken(pixels: np.ndarray, share: float, degrees: float = 0.0) -> np.ndarray:
  """Camera shake: the photo smeared along a line of `share` of its longer side at
  `degrees` from the horizontal (a box over the line: a steady motion during exposure)."""
  length = max(3, round(max(pixels.shape[:2]) * share)) | 1
  kernel = np.zeros((length, length))
  centre = length // 2
  for step in np.linspace(-centre, centre, 4 * length):
    kernel[round(centre - step * np.sin(np.radians(degrees))),
           round(centre + step * np.cos(np.radians(degrees)))] = 1
  kernel /= kernel.sum()
  padded = np.pad(pixels.astype(np.float64), ((centre, centre), (centre, centre), (0, 0)),
                  mode="edge")
  height, width = pixels.shape[:2]
  out = np.zeros(pixels.shape)
  for row, col in zip(*np.nonzero(kernel)):
    out += kernel[row, col] * padded[row:row + height, col:col + width]
  return np.clip(np.round(out), 0, 255).astype(np.uint8)


MAKERS = {"dark": dark, "overexposed": overexposed, "blurry": blurry,
          "low_information": low_information, "grayscale": grayscale,
          "odd_aspect_ratio": odd_aspect_ratio, "tiny": tiny}
# Other shapes of a kind's problem: {kind: {name: maker}}.
ALSO = {"overexposed": {"washed_out": washed_out}}


def colour_photos() -> dict[str, np.ndarray]:
  """The real photos that are in colour (the others are grey scans stored as RGB)."""
  return {name: pixels for name, pixels in real_photos.photos().items()
          if not (pixels.max(axis=2) == pixels.min(axis=2)).all()}

