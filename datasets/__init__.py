"""tfds-imagesets: TFDS builders for image collections.

`import imagesets` registers every builder with TFDS, so that
`tfds.load('synthetic_images/tiny', data_dir=...)` and
`tfds build synthetic_images --imports imagesets` find them.
"""

from imagesets import reproducible

reproducible.install()

# Importing a builder module registers its dataset name.
from imagesets.synthetic_images import synthetic_images_dataset_builder  # noqa: E402,F401
from imagesets.voc_segmentation import voc_segmentation_dataset_builder  # noqa: E402,F401

# Training from a team bucket (docs/publishing.md): fetch a verified local copy, or pass
# a bucket URL through resolve_data_dir. fsspec's cloud clients load on first use.
from imagesets.publish import fetch, resolve_data_dir, stream  # noqa: E402

__all__ = ["fetch", "resolve_data_dir", "stream"]
