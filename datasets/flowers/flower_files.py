"""One flowers example from one image file: the per-example work of every flowers build.

Kept out of the builder file on purpose: `tfds build datasets/flowers` imports the
builder under another module name, which Beam workers (multi-process, Dataflow, ...)
could not import, while `imagesets.flowers.flower_files` is importable wherever the
package is installed.
"""

from imagesets.building import class_folders
from imagesets.building import generation
from imagesets.building import image_checks


def make_example(root: str, relative_path: str, *, shorter_side: int = 0) -> tuple[dict, str | None]:
  """(features, why it was re-encoded or None) for one file; raises BadImageError.

  A pure function of the file: safe to map on any worker (processes here, Beam later).
  """
  data = class_folders.read(root, relative_path)
  encoded, facts = image_checks.prepare(data, shorter_side=shorter_side or None)
  features = {
      "image": encoded,
      "label": class_folders.label_of(relative_path),
      "file_name": relative_path,
      "height": facts.height,
      "width": facts.width,
      "channels": 3,
      "format": facts.format,
  }
  return features, facts.conversion


def process_file(item: tuple[str, str, int]) -> tuple[dict, str | None]:
  """`make_example` for imagesets.building.generation: a bad file becomes a BadItem, not a crash."""
  root, relative_path, shorter_side = item
  try:
    return make_example(root, relative_path, shorter_side=shorter_side)
  except image_checks.BadImageError as error:
    raise generation.BadItem(str(error)) from None
  except OSError as error:
    raise generation.BadItem(f"cannot be read: {error}") from None
