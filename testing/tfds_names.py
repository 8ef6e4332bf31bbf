"""For the tests of a name's lookup: names TFDS knows without importing its own builders (a
builder registered when this module is imported, once a process; an abstract one; another
package's builder provider, `tfds.core.add_dataset_builder_provider`), and the lookups a
test makes, counted (`count_lookups`)."""

import tensorflow_datasets as tfds

REGISTERED, ABSTRACT, PROVIDED = ("registered_lookup_parts", "abstract_lookup_parts",
                                  "provided_lookup_parts")


class RegisteredLookupParts(tfds.core.GeneratorBasedBuilder):
  VERSION = tfds.core.Version("1.0.0")

  def _info(self):
    return tfds.core.DatasetInfo(builder=self)

  def _split_generators(self, dl_manager):
    return {}

  def _generate_examples(self):
    yield from ()


class AbstractLookupParts(tfds.core.GeneratorBasedBuilder):
  """No _info: TFDS registers its name among the abstract builders."""


class Provider:
  """Another package's builders: it has PROVIDED only."""

  def has_dataset(self, name: str) -> bool:
    return name == PROVIDED

  def get_builder_cls(self, name: str):
    raise AssertionError(f"{name}: a lookup that asks whether it exists needs no class")


def with_provider(monkeypatch) -> None:
  """TFDS's builder providers, and `Provider` after them, for the test (monkeypatch)."""
  from tensorflow_datasets.core import registered  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(registered, "_DATASET_PROVIDER_REGISTRY",
                      [*registered._DATASET_PROVIDER_REGISTRY, Provider()])


def count_lookups(monkeypatch) -> list[str]:
  """The names looked up among every registered builder (`tfds.builder_cls`) from now on
  in the test, and "legacy import" for each other time TFDS's own builders were asked to
  be imported (a process does it once: 0.1-0.2 s)."""
  from tensorflow_datasets.core import registered  # pylint: disable=import-outside-toplevel
  looked = []
  real, legacy = tfds.builder_cls, registered._import_legacy_builders

  def counted(name):
    looked.append(name)
    with monkeypatch.context() as inside:  # (the lookup's own import is not counted twice)
      inside.setattr(registered, "_import_legacy_builders", legacy)
      return real(name)
  monkeypatch.setattr(tfds, "builder_cls", counted)
  monkeypatch.setattr(registered, "_import_legacy_builders",
                      lambda: looked.append("legacy import") or legacy())
  return looked
