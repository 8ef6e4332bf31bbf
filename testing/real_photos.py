"""Real photos (15 scikit-image sample images, ~200 px, see real_photos/NOTICE) for the
duplicate-detection tests: the generated photos of `sample_images` share one recipe, and
real content (textures, skies, microscopy) is where perceptual hashes pair distinct pictures.
"""

import pathlib

import numpy as np
import PIL.Image

_FOLDER = pathlib.Path(__file__).parent / "real_photos"


def photos() -> dict[str, np.ndarray]:
  """name -> HxWx3 uint8 pixels."""
  return {path.stem: np.asarray(PIL.Image.open(path).convert("RGB"))
          for path in sorted(_FOLDER.glob("*.jpg"))}


def more() -> dict[str, np.ndarray]:
  """name -> HxWx3 uint8 pixels of six more real scenes (real_photos/more/NOTICE): kept
  apart from `photos`, whose set and order the duplicate tests and benchmarks rest on.
  "clock_motion" is blurred by the camera's motion (a real blurry photo)."""
  return {path.stem: np.asarray(PIL.Image.open(path).convert("RGB"))
          for path in sorted((_FOLDER / "more").glob("*.jpg"))}


def tiles(grid: int = 3, of: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
  """Each photo (of `of`, default all) cut into grid x grid tiles ("name#row,col"): more,
  smaller distinct pictures."""
  cut = {}
  for name, pixels in (photos() if of is None else of).items():
    height, width = pixels.shape[:2]
    for row in range(grid):
      for col in range(grid):
        cut[f"{name}#{row},{col}"] = np.ascontiguousarray(
            pixels[row * height // grid:(row + 1) * height // grid,
                   col * width // grid:(col + 1) * width // grid])
  return cut
