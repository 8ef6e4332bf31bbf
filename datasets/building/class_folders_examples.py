"""One example from one image file of a class-per-folder tree: the per-example work of
every class-folder build (flowers, class_folders, `imagesets build PATH --name NAME`).

A module of its own, in the build machinery, so that it is importable wherever the
package is installed: `tfds build datasets/<name>` imports a builder file under another
module name, and Beam workers (multi-process, Dataflow, ...) unpickle `process_file` by
its module path.
"""

from imagesets.building import class_folders_tree
from imagesets.building import generation
from imagesets.building import image_checks
from imagesets.constants import ORIGINAL_SIZE


def make_example(root: str, relative_path: str, *, shorter_side: int = ORIGINAL_SIZE,
                 image_size: int = ORIGINAL_SIZE) -> tuple[dict, str | None]:
  """(features, why it was re-encoded or None) for one file; raises BadImageError.

  A pure function of the file: safe to map on any worker (processes here, Beam later).
  """
  data = class_folders_tree.read(root, relative_path)
  encoded, facts = image_checks.prepare(data, shorter_side=shorter_side, image_size=image_size)
  features = {
      "image": encoded,
      "label": class_folders_tree.label_of(relative_path),
      "file_name": relative_path,
      "height": facts.height,
      "width": facts.width,
      "channels": 3,
      "format": facts.format,
  }
  return features, facts.conversion


def work_item(root: str, relative_path: str, shorter_side: int = ORIGINAL_SIZE,
              image_size: int = ORIGINAL_SIZE) -> tuple[str, str, int, int]:
  """The picklable work item `process_file` takes, for one file of the tree."""
  return (root, relative_path, shorter_side, image_size)


def process_file(item: tuple[str, str, int, int]) -> tuple[dict, str | None]:
  """`make_example` for imagesets.building.generation: a bad file becomes a BadItem, not a crash.

  item: from `work_item`."""
  root, relative_path, shorter_side, image_size = item
  try:
    return make_example(root, relative_path, shorter_side=shorter_side, image_size=image_size)
  except image_checks.BadImageError as error:
    raise generation.BadItem(str(error)) from None
  except OSError as error:
    raise generation.BadItem(f"cannot be read: {error}") from None
