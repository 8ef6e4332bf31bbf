"""The package layout's rule: imports flow one way, layer by layer (`LAYERS`: console and the
flat modules <- storage, analysis <- reports <- building; storage <- reading, publishing;
building, reading <- verifying <- builders <- cli), with no cycle; nothing imports test makers."""

import ast
import pathlib
import sys

from conftest import REPO

PACKAGE = REPO / "datasets"
BUILDERS = sorted(p.parent.name for p in PACKAGE.glob("*/*_dataset_builder.py"))


def _imports(path: pathlib.Path) -> set[str]:
  """Every module `path` imports, anywhere in it; a relative import of a module of the
  package as its absolute name."""
  names = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      names |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom):
      module = _absolute(path, node) if node.level else node.module
      if module:
        names |= {module, *(f"{module}.{alias.name}" for alias in node.names)}
  return names


def _absolute(path: pathlib.Path, node: ast.ImportFrom) -> str | None:
  try:
    package = ("imagesets", *path.relative_to(PACKAGE).parent.parts)
  except ValueError:
    return None
  base = package[:len(package) - node.level + 1]
  return ".".join(base + ((node.module,) if node.module else ()))


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
  assert BUILDERS == ["annotated", "class_folders", "flowers", "oxford17", "synthetic_images", "voc_segmentation"]
  for folder in ("building", "reading", "publishing", "cli"):
    assert _modules(folder), folder


# The layers, bottom to top: each folder (or flat module) and what it may import of the
# package besides itself. Nothing imports upward; `cli` (at the top) and the builders
# (checked below) may import any layer.
_BASE = ["imagesets.constants", "imagesets.registry", "imagesets.startup",
         "imagesets.tfds_internals", "imagesets.console"]
LAYERS = {
    "constants": [],
    "registry": [],
    "console": [],
    "startup": ["imagesets.console"],
    "tfds_internals": [],
    "annotations": ["imagesets.constants"],
    "analysis": [],
    "storage": _BASE,
    # (what the build writes beside a version needs storage's atomic writes and TFRecord
    # framing, not buckets)
    "reports": [*_BASE, "imagesets.annotations", "imagesets.analysis",
                "imagesets.storage.atomic_files"],
    "building": [*_BASE, "imagesets.annotations", "imagesets.analysis",
                 "imagesets.storage.atomic_files", "imagesets.storage.tfrecord_files",
                 "imagesets.reports", "imagesets.checksums"],
    "reading": [*_BASE, "imagesets.annotations", "imagesets.storage"],
    "publishing": [*_BASE, "imagesets.storage"],
    "verifying": [*_BASE, "imagesets.annotations", "imagesets.building", "imagesets.reading",
                  "imagesets.storage"],
}


def _layer_modules(layer: str) -> list[pathlib.Path]:
  flat = PACKAGE / f"{layer}.py"
  return [flat] if flat.exists() else _modules(layer)


def _outside_layer(layer: str) -> dict[str, list[str]]:
  """Modules of the package that `layer`'s modules import and its table does not allow."""
  own = f"imagesets.{layer}"
  allowed = [own, *LAYERS[layer]]
  found = {}
  for path in _layer_modules(layer):
    names = _imports(path)
    bad = sorted(name for name in names
                 if name.split(".")[0] in ("imagesets", "imagesets_testing")
                 and not _container(name, names)  # (`from x import y`: x.y is checked)
                 and not any(name == a or name.startswith(a + ".") for a in allowed))
    if bad:
      found[str(path.relative_to(REPO))] = bad
  return found


def _container(name: str, names: set[str]) -> bool:
  """`name` is a package that `names` holds only as the `from` part of an import."""
  package = name == "imagesets" or (name.startswith("imagesets.") and (
      PACKAGE / name.partition(".")[2].replace(".", "/") / "__init__.py").exists())
  return package and any(other.startswith(name + ".") for other in names)


def test_every_folder_and_flat_module_is_a_layer():
  present = {p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
  present |= {p.name for p in PACKAGE.iterdir()
              if p.is_dir() and (p / "__init__.py").exists() and p.name not in BUILDERS}
  assert present == set(LAYERS) | {"cli"}
  flat = sorted(p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
  assert len(flat) <= 4, flat


def test_no_layer_imports_upward():
  assert {layer: found for layer in LAYERS if (found := _outside_layer(layer))} == {}


def test_read_path_and_publishing_never_import_builders_or_build_machinery():
  assert _outside_layer("reading") == {} and _outside_layer("publishing") == {}


def test_build_machinery_never_imports_builders_read_path_publishing_or_cli():
  assert _outside_layer("building") == {}


def test_what_the_build_knows_of_its_data_never_imports_the_build_or_the_read_path():
  # (image analysis and the version's page: the build calls them as it writes)
  assert _outside_layer("analysis") == {} and _outside_layer("reports") == {}


def test_the_layer_rule_finds_an_upward_import(tmp_path, monkeypatch):
  folder = tmp_path / "datasets" / "storage"
  folder.mkdir(parents=True)
  (folder / "probe.py").write_text("from imagesets.reading import sources\n"
                                   "from imagesets.storage import bucket\n"
                                   "from imagesets import constants\n"
                                   "def late():\n"
                                   "  from ..building import incremental\n"
                                   "  from .. import cli\n")
  for package in ("", "storage", "reading", "building", "cli"):
    (tmp_path / "datasets" / package).mkdir(exist_ok=True)
    (tmp_path / "datasets" / package / "__init__.py").write_text("")
  monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "datasets")
  monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
  assert _outside_layer("storage") == {"datasets/storage/probe.py": [
      "imagesets.building.incremental", "imagesets.cli", "imagesets.reading.sources"]}


def test_modules_are_loaded_by_name_only_where_the_registry_or_tfds_says_which():
  # A module loaded by `importlib` shows in no import: only the package's `__init__` (a
  # builder on TFDS's first lookup, an export on first use), the door to TFDS's names and
  # `imagesets verify` (the builder a version names, for its ROUND_TRIP) may.
  users = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                 if "import_module" in path.read_text() or "__import__" in path.read_text())
  assert users == ["__init__.py", "tfds_internals.py", "verifying/round_trip.py"]


def test_the_package_has_no_import_cycle_even_inside_functions():
  graph = {}
  for path in PACKAGE.rglob("*.py"):
    if "dummy_data" in path.parts:
      continue
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    module = ".".join(("imagesets",) + (parts[:-1] if parts[-1] == "__init__" else parts))
    graph[module] = _imports(path)
  known = set(graph)

  def resolved(name):  # "imagesets.reading.sources.Source" -> "imagesets.reading.sources"
    while name and name not in known:
      name = name.rpartition(".")[0]
    return name
  edges = {m: {resolved(n) for n in names} - {"", "imagesets", m} for m, names in graph.items()}
  done, visiting = set(), []

  def visit(module):
    assert module not in visiting, f"import cycle: {' -> '.join(visiting + [module])}"
    if module in done:
      return
    visiting.append(module)
    for other in sorted(edges.get(module, ())):
      visit(other)
    visiting.pop()
    done.add(module)
  for module in sorted(edges):
    visit(module)


def test_builders_never_import_other_builders_or_the_cli():
  # class_folders also reads (its keras call serves its own builds through `reading/`).
  for name in BUILDERS:
    forbidden = [*(f"imagesets.{other}" for other in BUILDERS if other != name),
                 "imagesets.cli", "imagesets.publishing", "imagesets.storage",
                 "imagesets_testing"]
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


def _defined_private_names(paths) -> set[str]:
  """`_`-prefixed names (not dunder) that these files define: functions, classes, module and
  class globals, `self._x = ...` attributes, keyword names."""
  found = set()
  for path in paths:
    for node in ast.walk(ast.parse(path.read_text(errors="replace"))):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        found.add(node.name)
      elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        found.add(node.id)
      elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
        found.add(node.attr)
      elif isinstance(node, ast.arg):
        found.add(node.arg)
  return {name for name in found if name.startswith("_") and not name.endswith("__")}


def _tfds_private_names() -> set[str]:
  import tensorflow_datasets as tfds
  return _defined_private_names(pathlib.Path(tfds.__file__).parent.joinpath("core").rglob("*.py"))


# What TFDS's guide to writing a dataset has every builder define ("Writing custom datasets").
_BUILDER_PROTOCOL = {"_info", "_split_generators", "_generate_examples"}


def _own_object(node: ast.AST) -> bool:
  return ((isinstance(node, ast.Name) and node.id in ("self", "cls"))
          or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "super"))


def _private_tfds_attributes(path: pathlib.Path, ours: set[str], theirs: set[str]) -> list[str]:
  """`x._name` where `_name` is one of TFDS's private names: allowed only as self/cls/super()
  of a class of ours and only for a name our classes define (an override) that the door
  lists as a builder hook (tfds_internals.BUILDER_HOOKS, checked at import); and every
  TFDS private name that a class of ours overrides must be such a hook."""
  from imagesets import tfds_internals
  hooks = (set(tfds_internals.BUILDER_HOOKS) | set(tfds_internals.BUILDER_CLASS_PROPERTIES)
           | _BUILDER_PROTOCOL)
  found = []
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.ClassDef):
      found += [f"class {node.name} overrides TFDS's {item.name}" for item in node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                and item.name in theirs and item.name not in hooks and _builders_have(item.name)
                and item.name.startswith("_") and not item.name.endswith("__")]
    if (isinstance(node, ast.Attribute) and node.attr in theirs
        and not (_own_object(node.value) and (node.attr in hooks or node.attr not in theirs
                                               or _defines_only_ours(node.attr, ours)))):
      found.append(f"line {node.lineno}: .{node.attr}")
  return found


def _builders_have(name: str) -> bool:
  # Our classes that derive from TFDS's are builders: what they inherit is TFDS's builder's.
  import tensorflow_datasets as tfds
  return hasattr(tfds.core.GeneratorBasedBuilder, name)


def _defines_only_ours(name: str, ours: set[str]) -> bool:
  # A name TFDS also uses privately, but which a class of ours defines for its own state
  # (e.g. `self._pending`): ours when TFDS's builders, which ours derive from, lack it.
  return name in ours and not _builders_have(name)


def test_no_module_but_the_door_touches_tfds_private_attributes():
  modules = [path for path in PACKAGE.rglob("*.py") if path.name != "tfds_internals.py"]
  ours, theirs = _defined_private_names(PACKAGE.rglob("*.py")), _tfds_private_names()
  users = {str(path.relative_to(REPO)): _private_tfds_attributes(path, ours, theirs)
           for path in modules}
  assert {path: names for path, names in users.items() if names} == {}


def test_the_private_attribute_guard_finds_what_it_is_for(tmp_path):
  probe = tmp_path / "probe.py"
  probe.write_text(
      "import tensorflow_datasets as tfds\n"
      "class Builder(tfds.core.GeneratorBasedBuilder):\n"
      "  def _make_download_manager(self, download_dir, download_config):\n"  # not listed
      "    return download_dir\n"
      "  def _split_generators(self, dl_manager):\n"     # a hook the door checks: fine
      "    return self._generate_examples()\n"
      "def use(builder):\n"
      "  builder.info._info_proto\n"
      "  builder._build_data_dir\n"
      "  tfds.core.registered._DATASET_REGISTRY\n"
      "  tfds.core.GeneratorBasedBuilder._process_pipeline_result\n")
  ours, theirs = _defined_private_names(PACKAGE.rglob("*.py")), _tfds_private_names()
  found = _private_tfds_attributes(probe, ours, theirs)
  assert found == ["class Builder overrides TFDS's _make_download_manager", "line 8: ._info_proto",
                   "line 9: ._build_data_dir", "line 10: ._DATASET_REGISTRY",
                   "line 11: ._process_pipeline_result"], found


def _function_level_imports(path: pathlib.Path) -> list[str]:
  """Modules of the package imported inside a function of `path` (a hidden cycle)."""
  found = []
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      for inner in ast.walk(node):
        if isinstance(inner, ast.ImportFrom) and inner.module and inner.module.startswith(
            "imagesets"):
          found += [f"{inner.module}.{alias.name}" for alias in inner.names]
        elif isinstance(inner, ast.Import):
          found += [a.name for a in inner.names if a.name.startswith("imagesets")]
  return found


def test_the_read_path_imports_one_way_with_no_cycle_hidden_in_a_function():
  hidden = {str(p.relative_to(REPO)): _function_level_imports(p) for p in _modules("reading")}
  assert {k: v for k, v in hidden.items() if v} == {}
  graph = {p.stem: {name.split(".")[2] for name in _imports(p)
                    if name.startswith("imagesets.reading.") and name.count(".") >= 2}
           for p in _modules("reading")}
  done, visiting = set(), []

  def visit(module):
    assert module not in visiting, f"import cycle: {' -> '.join(visiting + [module])}"
    if module in done or module not in graph:
      return
    visiting.append(module)
    for other in sorted(graph[module]):
      visit(other)
    visiting.pop()
    done.add(module)
  for module in sorted(graph):
    visit(module)


def test_the_annotations_layer_imports_only_itself_and_constants_and_never_tensorflow():
  # It reads annotation files before TensorFlow loads (and in the builder's workers).
  allowed = ("imagesets.annotations", "imagesets.constants")
  assert _modules("annotations")
  found = {}
  for path in _modules("annotations"):
    bad = sorted(name for name in _imports(path)
                 if name.split(".")[0] in ("imagesets", "imagesets_testing", "tensorflow",
                                           "tensorflow_datasets", "keras")
                 and not any(name == a or name.startswith(a + ".") for a in allowed))
    if bad:
      found[str(path.relative_to(REPO))] = bad
  assert found == {}


def test_no_module_stores_state_on_a_tf_data_object():
  # An attribute set on a dataset is lost by the user's `.map` and shows in no import: what a
  # caller needs back is an object it holds (`mixing.Pipeline`, `streaming.Pipeline`), what
  # a pipeline's life holds is `streaming.keep_alive`'s.
  found = []
  for path in sorted(PACKAGE.rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
      name = None
      if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
        name = node.attr
      elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "setattr" and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)):
        name = node.args[1].value
      if isinstance(name, str) and name.startswith("_imagesets"):
        found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {name}")
  assert found == []
