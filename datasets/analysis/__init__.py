"""Image analysis, beneath the build: `image_hashes` (one image's fingerprint: decoded-pixel
digest, perceptual hash, size, format, quality measures), `image_quality` (quality findings
from those measures) and `duplicates` (exact and near groups, leakage across splits, label
conflicts, what `--leakage drop` removes), and `beam_components` (the connected components
of pairs as Beam transforms, for grouping on Beam's workers: only Beam builds import it),
and `terminal_text` (names made safe to print, light enough for `imagesets list`).

Imports nothing else of the package, and neither TFDS nor TensorFlow.
"""
