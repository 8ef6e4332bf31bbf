"""Many pictures cut from a few real scenes, as photo folders hold them: burst shots, video
frames, product or microscope series, augmentations. Their perceptual hashes are correlated
(not random bits), which is what makes duplicate grouping expensive; tests and benchmarks of
the grouping's cost use these.

Each picture is a crop of one of the real photos (`real_photos`), scaled to `size`, with a
little brightness jitter, encoded as JPEG. Pictures of one scene overlap; frames of one burst
differ by a shift of a pixel or two and are near copies of each other.
"""

import dataclasses
from typing import Iterator

import numpy as np
import PIL.Image

from imagesets_testing import real_photos
from imagesets_testing import sample_images


@dataclasses.dataclass(frozen=True)
class Picture:
  scene: str        # the real photo it was cut from
  burst: int        # pictures of one burst are near copies; -1: a lone crop
  pixels: np.ndarray


def _crop(photo: np.ndarray, box: tuple[float, float, float, float],
          size: tuple[int, int], gain: float) -> np.ndarray:
  image = PIL.Image.fromarray(photo).resize(size, PIL.Image.Resampling.BICUBIC, box=box)
  return np.clip(np.asarray(image, np.float32) * gain, 0, 255).astype(np.uint8)


def pictures(count: int, seed: int = 0, scenes: int = 5, size: tuple[int, int] = (500, 333),
             burst: int = 8, share_in_bursts: float = 0.5) -> Iterator[Picture]:
  """`count` pictures of the first `scenes` real photos: `share_in_bursts` of them in bursts
  of `burst` frames (one crop moved by a pixel or two a frame), the rest lone crops of 30 to
  90 % of the photo's side anywhere in it. Deterministic for the same arguments."""
  rng = np.random.default_rng(seed)
  photos = list(real_photos.photos().items())[:scenes]
  made = 0
  while made < count:
    name, photo = photos[int(rng.integers(len(photos)))]
    height, width = photo.shape[:2]
    scale = rng.uniform(0.3, 0.9)
    w, h = width * scale, height * scale
    x, y = rng.uniform(0, width - w), rng.uniform(0, height - h)
    frames = burst if rng.uniform() < share_in_bursts else 1
    number = made if frames > 1 else -1
    for _ in range(min(frames, count - made)):
      box = (x, y, x + w, y + h)
      yield Picture(name, number, _crop(photo, box, size, rng.uniform(0.97, 1.03)))
      made += 1
      x = float(np.clip(x + rng.uniform(-1.5, 1.5), 0, width - w))
      y = float(np.clip(y + rng.uniform(-1.5, 1.5), 0, height - h))


def jpegs(count: int, seed: int = 0, **options) -> Iterator[tuple[Picture, bytes]]:
  """`pictures`, each with its JPEG (quality 90) bytes."""
  for picture in pictures(count, seed, **options):
    yield picture, sample_images.encode(picture.pixels, "JPEG", quality=90)
