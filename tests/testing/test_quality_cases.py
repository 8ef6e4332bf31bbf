"""The planted problems the quality benchmark measures with: exposure in linear light, a
shake along one direction."""

import numpy as np

from imagesets_testing import quality_cases
from imagesets_testing import real_photos


def test_underexposure_scales_the_light_not_the_encoded_values():
  photo = real_photos.photos()["astronaut"]
  assert np.array_equal(quality_cases.underexposed(photo, 0), photo)
  # sRGB 0.5 is 0.214 of the light; a stop less, 0.107, encodes as 0.361 (92 of 255)
  grey = np.full((4, 4, 3), 128, np.uint8)
  assert (quality_cases.underexposed(grey, 1) == 92).all()
  brighter, darker = (quality_cases.underexposed(photo, stops).astype(int) for stops in (2, 3))
  assert (darker <= brighter).all() and darker.mean() < brighter.mean()


def test_a_shake_smears_along_its_direction_only():
  """A horizontal shake of a vertical edge spreads it over the line's length; a horizontal
  edge is left as it was (and a flat picture is unchanged)."""
  vertical = np.zeros((50, 50, 3), np.uint8)
  vertical[:, 25:] = 200
  smeared = quality_cases.shaken(vertical, 0.2, 0)  # a line of 11 px
  row = smeared[25, :, 0]
  assert row[0] == 0 and row[-1] == 200 and np.count_nonzero((row > 0) & (row < 200)) == 10
  horizontal = np.ascontiguousarray(vertical.transpose(1, 0, 2))
  assert np.array_equal(quality_cases.shaken(horizontal, 0.2, 0), horizontal)
  assert np.array_equal(quality_cases.shaken(horizontal, 0.2, 90)[:, 25, 0],
                        smeared[25, :, 0])
  flat = np.full((20, 30, 3), 77, np.uint8)
  assert np.array_equal(quality_cases.shaken(flat, 0.3, 45), flat)
