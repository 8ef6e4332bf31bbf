"""One registry of our datasets: the builder folders, TFDS's lookups, `imagesets list`,
`verify` and the README's dataset table all agree with it."""

import tensorflow_datasets as tfds

from conftest import REPO
from imagesets import registry
from imagesets.publishing import listing


def _readme_table() -> list[str]:
  lines = (REPO / "README.md").read_text().splitlines()
  start = lines.index("| name | source | card |") + 2
  end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
  return lines[start:end]


def test_the_readme_dataset_table_is_the_registry():
  expected = [f"| {d.shown_as or f'`{d.name}`'} | {d.source} | [{d.card}]({d.card}) |"
              for d in registry.DATASETS]
  assert _readme_table() == expected
  assert all((REPO / d.card).is_file() for d in registry.DATASETS)


def test_every_builder_folder_is_registered_and_every_entry_has_its_folder():
  folders = sorted(p.parent.name for p in (REPO / "datasets").glob("*/*_dataset_builder.py"))
  assert folders == sorted(registry.NAMES)


def test_tfds_finds_every_registered_name_by_its_module():
  for dataset in registry.DATASETS:
    builder_cls = tfds.builder_cls(dataset.name)
    assert (builder_cls.name, builder_cls.__module__) == (dataset.name, dataset.module)


def test_list_and_verify_read_the_registry():
  assert listing._is_ours({"moduleName": "imagesets.oxford17.oxford17_dataset_builder"}, {})
  assert not listing._is_ours({"moduleName": "their.oxford18.oxford18_dataset_builder"}, {})
  assert registry.no_round_trip("voc_segmentation", "train_aug")
  assert registry.no_round_trip("oxford17", None)
  assert registry.no_round_trip("flowers", "default") is None
  assert registry.no_round_trip("newcomer", None) is None  # a named build: features decide
