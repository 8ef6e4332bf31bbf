"""One home for the augmentation defaults: every pipeline and op takes them from constants."""

import inspect

from imagesets import constants
from imagesets.reading import grain_pipeline
from imagesets.reading import input_pipeline
from imagesets.reading import numpy_ops
from imagesets.reading import preprocess_ops

DEFAULTS = {"area_range": constants.CROP_AREA_RANGE,
            "aspect_ratio_range": constants.CROP_ASPECT_RATIO_RANGE,
            "crop_fraction": constants.CENTRAL_CROP_FRACTION,
            "image_size": constants.IMAGE_SIZE}


def test_augmentation_defaults_come_from_constants():
  seen = set()
  for module in (input_pipeline, grain_pipeline, preprocess_ops, numpy_ops):
    for name, function in inspect.getmembers(module, inspect.isfunction):
      if function.__module__ != module.__name__:
        continue
      for parameter in inspect.signature(function).parameters.values():
        if parameter.name in DEFAULTS and parameter.default is not inspect.Parameter.empty:
          expected = (constants.DETECTION_CROP_AREA_RANGE
                      if name.startswith("detection_") and parameter.name == "area_range"
                      else DEFAULTS[parameter.name])
          assert parameter.default is expected, (module.__name__, name, parameter.name)
          seen.add((module.__name__.rsplit(".", 1)[-1], parameter.name))
  assert {("input_pipeline", "area_range"), ("grain_pipeline", "crop_fraction"),
          ("grain_pipeline", "area_range"),
          ("preprocess_ops", "aspect_ratio_range"), ("numpy_ops", "crop_fraction"),
          ("input_pipeline", "image_size"), ("grain_pipeline", "image_size")} <= seen
  assert constants.CROP_AREA_RANGE == (0.08, 1.0) and constants.CENTRAL_CROP_FRACTION == 0.875
