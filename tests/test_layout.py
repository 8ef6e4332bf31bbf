"""The package layout's rule: imports flow one way (builders -> build -> TFDS; the read path
and publishing never import builders or the build machinery; nothing imports test makers)."""

import ast
import pathlib

from conftest import REPO

PACKAGE = REPO / "datasets"
BUILDERS = sorted(p.parent.name for p in PACKAGE.glob("*/*_dataset_builder.py"))


def _imports(path: pathlib.Path) -> set[str]:
  names = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      names |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom) and node.module:
      names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
  return names


def _modules(folder: str):
  return sorted((PACKAGE / folder).glob("*.py"))


def _violations(folder: str, forbidden: list[str]) -> dict[str, list[str]]:
  found = {}
  for path in _modules(folder):
    bad = sorted(name for name in _imports(path)
                 if any(name == f or name.startswith(f + ".") for f in forbidden))
    if bad:
      found[str(path.relative_to(REPO))] = bad
  return found


def test_the_builders_and_the_folders_of_the_layout():
  assert BUILDERS == ["class_folders", "flowers", "oxford17", "synthetic_images", "voc_segmentation"]
  for folder in ("building", "reading", "publishing", "cli"):
    assert _modules(folder), folder


def test_read_path_and_publishing_never_import_builders_or_build_machinery():
  forbidden = ["imagesets.building", *(f"imagesets.{name}" for name in BUILDERS), "imagesets_testing"]
  assert _violations("reading", forbidden) == {}
  assert _violations("publishing", forbidden + ["imagesets.reading", "imagesets.cli"]) == {}


def test_build_machinery_never_imports_builders_read_path_publishing_or_cli():
  forbidden = [*(f"imagesets.{name}" for name in BUILDERS), "imagesets.reading",
               "imagesets.publishing", "imagesets.cli", "imagesets_testing"]
  assert _violations("building", forbidden) == {}


def test_builders_never_import_other_builders_or_the_cli():
  # class_folders also reads (its keras call serves its own builds through `reading/`).
  for name in BUILDERS:
    forbidden = [*(f"imagesets.{other}" for other in BUILDERS if other != name),
                 "imagesets.cli", "imagesets.publishing", "imagesets_testing"]
    if name != "class_folders":
      forbidden.append("imagesets.reading")
    assert _violations(name, forbidden) == {}, name


def test_runtime_package_never_imports_the_test_data_makers():
  users = [str(path.relative_to(REPO)) for path in PACKAGE.rglob("*.py")
           if "dummy_data" not in path.parts
           and any(name.startswith("imagesets_testing") for name in _imports(path))]
  assert users == []


def test_build_machinery_never_imports_the_top_level_package():
  # `from imagesets import x` runs the package's __init__ for a name it may not have yet
  # (it registers builders, which import building/): import the module you need by path.
  users = [str(path.relative_to(REPO)) for path in _modules("building")
           if "imagesets" in _imports(path)]
  assert users == []




def _private_tfds(path: pathlib.Path) -> list[str]:
  """The non-public TFDS names a module uses: imports of modules under tensorflow_datasets
  other than the top level, and `tfds.core.<name>` / `tfds.features.<name>` chains whose
  name is not exported there."""
  import tensorflow_datasets as tfds
  public = {"core": set(tfds.core.__all__), "features": set(dir(tfds.features))}
  found = [name for name in _imports(path)
           if name.startswith("tensorflow_datasets.")]
  for node in ast.walk(ast.parse(path.read_text())):
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
        and isinstance(node.value.value, ast.Name) and node.value.value.id == "tfds"
        and node.value.attr in public and node.attr not in public[node.value.attr]):
      found.append(f"tfds.{node.value.attr}.{node.attr}")
  return sorted(set(found))


def test_only_the_door_reaches_tfds_private_names():
  users = {str(path.relative_to(REPO)): _private_tfds(path) for path in PACKAGE.rglob("*.py")
           if path.name != "tfds_internals.py"}
  assert {path: names for path, names in users.items() if names} == {}


def test_what_the_build_imports_from_verifying_never_imports_the_read_path_or_publishing():
  # building/ fingerprints and groups images with these; they must stay light and one-way.
  used = sorted({name.split(".")[2] for path in _modules("building") for name in _imports(path)
                 if name.startswith("imagesets.verifying.")})
  assert used == ["dataset_card", "duplicates", "image_hashes"]
  forbidden = ["imagesets.reading", "imagesets.publishing", "imagesets.building",
               "imagesets.cli", *(f"imagesets.{name}" for name in BUILDERS)]
  for module in used:
    path = PACKAGE / "verifying" / f"{module}.py"
    assert not [n for n in _imports(path) if any(n == f or n.startswith(f + ".")
                                                  for f in forbidden)], module
