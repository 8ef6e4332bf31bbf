"""`imagesets verify`: a prepared version checked against the folder or archive it was built
from, by the round trip its builder declares (`ROUND_TRIP`; see `building.round_trips`)."""

import importlib
import os

from imagesets import registry
from imagesets.building import round_trips
from imagesets.reading import sources

Report = round_trips.Report


def verify(version_dir: os.PathLike, source: os.PathLike,
           annotations: os.PathLike | None = None) -> round_trips.Report:
  """Checks the prepared version in `version_dir` against `source` (folder or archive);
  a build from annotations against `annotations` (default: the file it recorded)."""
  version = sources.open_folder(version_dir)
  info = version.builder.info
  not_yet = registry.no_round_trip(info.name, info.config_name)
  if not_yet:  # rather than report a correct build as mismatched
    raise ValueError(f"{info.full_name}: no round trip for this config yet ({not_yet})")
  check = _declared(info)
  if check is None:
    raise ValueError(f"{info.full_name}: no round trip for these features "
                     f"({sorted(info.features.keys())}); supported: class-per-folder builds, "
                     "builds from annotations and voc_segmentation")
  with round_trips.source_folder(source) as folder:
    return check(version, folder, str(source), annotations)


def _declared(info):
  """The check the version's builder declares. A build by `imagesets build --name` (any
  name) has no builder of its own here: a class-folders build or one from annotations,
  known by what it stored."""
  known = registry.BY_NAME.get(info.name)
  if known is not None:   # (its module, loaded by name as TFDS loads it: never imported here)
    return importlib.import_module(known.module).Builder.ROUND_TRIP
  if (info.metadata or {}).get("annotation_format"):
    return round_trips.annotated
  if "file_name" in info.features and "label" in info.features:
    return round_trips.class_folders
  return None
