"""One example from one image file of a class-per-folder tree: the per-example work of
every class-folder build (flowers, class_folders, `imagesets build PATH --name NAME`, the
cache of `image_dataset_from_directory`).

A module of its own, in the build machinery, so that it is importable wherever the
package is installed: `tfds build datasets/<name>` imports a builder file under another
module name, and Beam workers (multi-process, Dataflow, ...) unpickle `process_file` by
its module path.
"""

import dataclasses

from imagesets.building import class_folders_tree
from imagesets.building import generation
from imagesets.building import image_checks
from imagesets.building import keras_pixels
from imagesets.constants import ORIGINAL_SIZE


def make_example(root: str, relative_path: str, *, shorter_side: int = ORIGINAL_SIZE,
                 image_size: int = ORIGINAL_SIZE,
                 keras_image: dict | None = None) -> tuple[dict, str | None]:
  """(features, why it was re-encoded or None) for one file; raises BadImageError.

  With `keras_image` (a `keras_pixels.KerasImage` option): the pixels keras returns for
  the file, as uint8 (`keras_pixels.pixels`); the file is good when TensorFlow decodes it,
  keras' own condition. A pure function of the file: safe to map on any worker.
  """
  data = class_folders_tree.read(root, relative_path)
  label = class_folders_tree.label_of(relative_path)
  if keras_image:
    if not data:
      raise image_checks.BadImageError("empty file (0 bytes)")
    try:
      image = keras_pixels.pixels(data, keras_pixels.KerasImage(**keras_image))
    except keras_pixels.UndecodableError as error:
      raise image_checks.BadImageError(str(error)) from None
    return _keras_example(relative_path, image), None
  encoded, facts = image_checks.prepare(data, shorter_side=shorter_side, image_size=image_size)
  features = {
      "image": encoded,
      "label": label,
      "file_name": relative_path,
      "height": facts.height,
      "width": facts.width,
      "channels": 3,
      "format": facts.format,
  }
  return features, facts.conversion


def _keras_example(relative_path: str, image) -> dict:
  return {"image": image, "label": class_folders_tree.label_of(relative_path),
          "file_name": relative_path}


def work_item(root: str, relative_path: str, shorter_side: int = ORIGINAL_SIZE,
              image_size: int = ORIGINAL_SIZE,
              keras_image: dict | None = None) -> tuple[str, str, int, int, dict | None]:
  """The picklable work item `process_file` takes, for one file of the tree."""
  return (root, relative_path, shorter_side, image_size, keras_image)


def process_file(item: tuple[str, str, int, int, dict | None]) -> tuple[dict, str | None]:
  """`make_example` for imagesets.building.generation: a bad file becomes a BadItem, not a crash.

  item: from `work_item`."""
  root, relative_path, shorter_side, image_size, keras_image = item
  try:
    return make_example(root, relative_path, shorter_side=shorter_side, image_size=image_size,
                        keras_image=keras_image)
  except image_checks.BadImageError as error:
    raise generation.BadItem(str(error)) from None
  except OSError as error:
    raise generation.BadItem(f"cannot be read: {error}") from None


@dataclasses.dataclass(frozen=True)
class FedProcess:
  """`process_file` for a build storing keras' pixels whose items a `keras_pixels.PixelFeed`
  decodes ahead, in order (threads only: the feed is not picklable). A file the feed could
  not decode, or did not list, goes through `process_file`, which says why."""

  feed: keras_pixels.PixelFeed

  def __call__(self, item: tuple[str, str, int, int, dict | None]) -> tuple[dict, str | None]:
    relative_path = item[1]
    try:
      image = self.feed.take(relative_path)
    except KeyError:  # taken once already (a build that runs its items again)
      image = None
    if image is None:
      return process_file(item)
    return _keras_example(relative_path, image), None
