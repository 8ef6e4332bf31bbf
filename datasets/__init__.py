"""tfds-imagesets: TFDS builders for image collections.

`import imagesets` registers every builder with TFDS, so that
`tfds.load('synthetic_images/tiny', data_dir=...)` and
`tfds build synthetic_images --imports imagesets` find them.
"""

# First, before TensorFlow loads: keep its start-up noise off the terminal (see startup).
from imagesets import startup

startup.load_tensorflow()

# Importing a builder module registers its dataset name.
from imagesets.synthetic_images import synthetic_images_dataset_builder  # noqa: E402,F401
from imagesets.voc_segmentation import voc_segmentation_dataset_builder  # noqa: E402,F401
from imagesets.flowers import flowers_dataset_builder  # noqa: E402,F401
from imagesets.class_folders import class_folders_dataset_builder  # noqa: E402,F401

# The training input pipeline: one call per task, built from `preprocess_ops`.
from imagesets.reading import input_pipeline, preprocess_ops  # noqa: E402
from imagesets.reading.input_pipeline import (  # noqa: E402
    DatasetNotPreparedError,
    classification_eval,
    classification_train,
    segmentation_eval,
    segmentation_train,
)

# Training from a team bucket (docs/training_from_a_bucket.md): every pipeline streams a
# bucket data_dir; `load` gives plain examples the same way; `fetch` a whole verified copy.
from imagesets.publishing.fetch import fetch  # noqa: E402
from imagesets.reading.streaming import load  # noqa: E402

# Your own folder: keras' one call, over a cached, validated build (docs/class_folders.md).
from imagesets.class_folders.from_directory import image_dataset_from_directory  # noqa: E402

__all__ = [
    "input_pipeline", "preprocess_ops", "DatasetNotPreparedError", "classification_train",
    "classification_eval", "segmentation_train", "segmentation_eval",
    "fetch", "load", "image_dataset_from_directory",
]
