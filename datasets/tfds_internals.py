"""The one door to TFDS's non-public names.

Every name of `tensorflow_datasets` that is not public API (modules under
`tensorflow_datasets.core` other than the `tfds.core` / `tfds.features` /
`tfds.download` exports, protected names, private builder hooks) is reached through this
module and no other (tests/test_layout.py guards it), and each has a contract test on a
small example in tests/test_tfds_internals.py. When a TFDS release moves or changes one,
those tests fail, and a call to a name that is gone raises `TFDSInternalsChanged` naming
our function, the TFDS name it used and the fallback, instead of an AttributeError in the
middle of a build.

What we use and why (the fallbacks are what to switch to if TFDS takes one away):

* the record path of local builds (`prepared_records`): TFDS's feature-to-proto
  conversion, key hashing, shard boundaries and ArrayRecord index files, so our workers
  write exactly the records and shards TFDS's writer would. The public
  `FeaturesDict.serialize_example` plus a deterministic re-serialization gives the same
  bytes, at 0.064 against 0.031 ms CPU per class-folder example (500x375 JPEG, median of 5
  rounds of 200): about 10 % of a build's CPU, over our 5 % bar;
* the split writer and the hooks of `GeneratorBasedBuilder` our base class overrides
  (`_generate_splits`, `_example_writer`, `_get_filename_template`, `_log_download_bytes`,
  `_checksums_path`, `url_infos`);
* small utilities (`classproperty`, `flatten_nest_dict`, dtype checks, `ShardConfig`,
  checksum files).

Public names are used directly elsewhere (`tfds.core.ExampleWriter`, `SplitInfo`,
`ShardedFileTemplate`, `add_dataset_builder_provider`, `tfds.features.TensorInfo`,
`tfds.download.DownloadConfig`): the same objects the private module paths gave.
"""

import importlib
import inspect
import re
from typing import Any, Callable, Iterable

import tensorflow_datasets as tfds


class TFDSInternalsChanged(RuntimeError):
  """A non-public TFDS name we rely on is gone or changed."""


def _module(path: str):
  """The TFDS module `path`, or None if this TFDS has no such module."""
  try:
    return importlib.import_module(path)
  except ImportError:
    return None


def _require(found, ours: str, theirs: str, fallback: str):
  if found is None:
    raise TFDSInternalsChanged(
        f"imagesets.tfds_internals.{ours}: TFDS {tfds.__version__} has no {theirs}; "
        f"fallback: {fallback}")
  return found


_RECORDS_FALLBACK = ("let TFDS's own writer make and shuffle the records "
                     "(prepared_records.RecordSplitBuilder: hand every split to super())")

# --------------------------------------------------------------------------- modules
# Imported once, here; None when this TFDS has moved them (the functions below say so).
_example_serializer = _module("tensorflow_datasets.core.example_serializer")
_hashing = _module("tensorflow_datasets.core.hashing")
_writer = _module("tensorflow_datasets.core.writer")
_split_builder = _module("tensorflow_datasets.core.split_builder")
_file_adapters = _module("tensorflow_datasets.core.file_adapters")
_shard_utils = _module("tensorflow_datasets.core.utils.shard_utils")
_dtype_utils = _module("tensorflow_datasets.core.utils.dtype_utils")
_py_utils = _module("tensorflow_datasets.core.utils.py_utils")
_tqdm_utils = _module("tensorflow_datasets.core.utils.tqdm_utils")
_checksums = _module("tensorflow_datasets.core.download.checksums")
_registered = _module("tensorflow_datasets.core.registered")
_protos = _module("tensorflow_datasets.proto")
_tf_example_pb2 = getattr(_protos, "tf_example_pb2", None)
_tf_feature_pb2 = getattr(_protos, "tf_feature_pb2", None)

# ----------------------------------------------------------------- types and utilities
# tf.train.Example / Feature as TFDS's own protobuf copies (no TensorFlow needed).
Example = _require(_tf_example_pb2 and _tf_example_pb2.Example, "Example",
                   "tensorflow_datasets.proto.tf_example_pb2.Example",
                   "tf.train.Example (loads TensorFlow)")
Feature = _require(_tf_feature_pb2 and _tf_feature_pb2.Feature, "Feature",
                   "tensorflow_datasets.proto.tf_feature_pb2.Feature",
                   "tf.train.Feature (loads TensorFlow)")
# TFDS's shard-size policy (subclassed by `sharding` for its floor on the shard count).
ShardConfig = _require(_shard_utils and getattr(_shard_utils, "ShardConfig", None),
                       "ShardConfig", "core.utils.shard_utils.ShardConfig",
                       "pass num_shards explicitly (tfds.download.DownloadConfig(num_shards=...))")
# The split writer TFDS's GeneratorBasedBuilder uses (prepared_records subclasses it).
SplitBuilder = _require(_split_builder and getattr(_split_builder, "SplitBuilder", None),
                        "SplitBuilder", "core.split_builder.SplitBuilder", _RECORDS_FALLBACK)
classproperty = _require(_py_utils and getattr(_py_utils, "classproperty", None),
                         "classproperty", "core.utils.py_utils.classproperty",
                         "a metaclass property")


def known_without_importing(name: str) -> bool:
  """Whether a builder of `name` is registered, asking every builder provider as
  `tfds.builder_cls` does, but without importing TFDS's own legacy builders first (which
  costs 0.1-0.2 s): `named_versions.check_name`, whose record says those do not hold it."""
  fallback = "tfds.builder_cls(name) (imports TFDS's builders to look)"
  providers = _require(getattr(_registered, "_DATASET_PROVIDER_REGISTRY", None),
                       "known_without_importing", "core.registered._DATASET_PROVIDER_REGISTRY",
                       fallback)
  imported = _require(getattr(_registered, "RegisteredDatasetBuilderProvider", None),
                      "known_without_importing",
                      "core.registered.RegisteredDatasetBuilderProvider", fallback)
  registry = _require(getattr(_registered, "_DATASET_REGISTRY", None),
                      "known_without_importing", "core.registered._DATASET_REGISTRY", fallback)
  abstract = _require(getattr(_registered, "_ABSTRACT_DATASET_REGISTRY", None),
                      "known_without_importing", "core.registered._ABSTRACT_DATASET_REGISTRY",
                      fallback)
  for provider in providers:
    if isinstance(provider, imported):  # (its lookup imports the legacy builders first)
      if name in registry or name in abstract:
        return True
    elif provider.has_dataset(name):
      return True
  return False


def progress_bars_on() -> bool:
  """TFDS's switch for its progress bars (`tfds.display_progress_bar`,
  `tfds.disable_progress_bar`), which our build's bars follow too."""
  return bool(_require(_tqdm_utils and getattr(_tqdm_utils, "_active", None) is not None
                       and _tqdm_utils, "progress_bars_on", "core.utils.tqdm_utils._active",
                       "show our bars whatever TFDS's switch says")._active)


def flatten_nest_dict(nested: dict) -> dict:
  """{"a": {"b": 1}} -> {"a/b": 1}, TFDS's flattening of encoded features."""
  return _require(_py_utils and getattr(_py_utils, "flatten_nest_dict", None),
                  "flatten_nest_dict", "core.utils.py_utils.flatten_nest_dict",
                  "flatten with '/' joins ourselves")(nested)


def is_string_dtype(dtype) -> bool:
  return _require(_dtype_utils and getattr(_dtype_utils, "is_string", None), "is_string_dtype",
                  "core.utils.dtype_utils.is_string", "np.dtype(dtype).kind in 'OSU'")(dtype)


def is_integer_dtype(dtype) -> bool:
  return _require(_dtype_utils and getattr(_dtype_utils, "is_integer", None),
                  "is_integer_dtype", "core.utils.dtype_utils.is_integer",
                  "np.issubdtype(dtype, np.integer)")(dtype)


def load_url_infos(path) -> dict:
  """{url: UrlInfo(size, checksum, filename)} of a TFDS checksums file."""
  return _require(_checksums and getattr(_checksums, "load_url_infos", None), "load_url_infos",
                  "core.download.checksums.load_url_infos",
                  "parse the tab-separated url/size/sha256 lines ourselves")(path)


# ------------------------------------------------------------------------ record path
def flat_example_specs(features) -> dict:
  """{flat key: TensorInfo} of a FeaturesDict, as TFDS's ExampleSerializer holds them."""
  serializer_cls = _require(_example_serializer and getattr(
      _example_serializer, "ExampleSerializer", None), "flat_example_specs",
      "core.example_serializer.ExampleSerializer", _RECORDS_FALLBACK)
  specs = getattr(serializer_cls(features.get_serialized_info()), "_flat_example_specs", None)
  return _require(specs, "flat_example_specs", "ExampleSerializer._flat_example_specs",
                  _RECORDS_FALLBACK)


def dict_to_example(encoded: dict, specs: dict):
  """The tf.train.Example TFDS makes of flat encoded features (`_dict_to_tf_example`)."""
  return _require(_example_serializer and getattr(_example_serializer, "_dict_to_tf_example",
                                                  None), "dict_to_example",
                  "core.example_serializer._dict_to_tf_example", _RECORDS_FALLBACK)(
                      encoded, specs)


def item_to_feature(value, spec):
  """The tf.train.Feature TFDS makes of one flat value (ragged fields added as TFDS does)."""
  add_ragged = _require(_example_serializer and getattr(
      _example_serializer, "_add_ragged_fields", None), "item_to_feature",
      "core.example_serializer._add_ragged_fields", _RECORDS_FALLBACK)
  to_feature = _require(_example_serializer and getattr(
      _example_serializer, "_item_to_tf_feature", None), "item_to_feature",
      "core.example_serializer._item_to_tf_feature", _RECORDS_FALLBACK)
  return to_feature(*add_ragged(value, spec))


def key_hasher(salt: str) -> Callable[[Any], int]:
  """TFDS's shuffle hash of an example key (str, bytes or int) for a split (the salt)."""
  hasher_cls = _require(_hashing and getattr(_hashing, "Hasher", None), "key_hasher",
                        "core.hashing.Hasher", _RECORDS_FALLBACK)
  return hasher_cls(salt).hash_key


def shard_specs(num_examples: int, total_size: int, filename_template, shard_config) -> list:
  """TFDS's shards of one split: each with `path`, `index_path`, `examples_number`."""
  get = _require(_writer and getattr(_writer, "_get_shard_specs", None), "shard_specs",
                 "core.writer._get_shard_specs", _RECORDS_FALLBACK)
  return get(num_examples=num_examples, total_size=total_size, bucket_lengths=[num_examples],
             filename_template=filename_template, shard_config=shard_config)


def write_index_file(path, record_keys: Iterable) -> None:
  """The index TFDS writes next to a shard of a format that has one."""
  _require(_writer and getattr(_writer, "_write_index_file", None), "write_index_file",
           "core.writer._write_index_file", _RECORDS_FALLBACK)(path, list(record_keys))


def file_adapter(file_format):
  """TFDS's reader/writer class of a tfds.core.FileFormat (`write_examples(path, items)`)."""
  adapters = _require(_file_adapters and getattr(_file_adapters, "ADAPTER_FOR_FORMAT", None),
                      "file_adapter", "core.file_adapters.ADAPTER_FOR_FORMAT",
                      _RECORDS_FALLBACK)
  return adapters[tfds.core.FileFormat(file_format)]


# ------------------------------------------------------------------- builder hooks
# The methods of tfds.core.GeneratorBasedBuilder our base class overrides or calls, with
# the parameters we rely on (checked by `check_builder_hooks`, run by the contract tests
# and by `builder_base` when it is imported).
BUILDER_HOOKS = {
    "_download_and_prepare": ("self", "dl_manager", "download_config"),
    "_generate_splits": ("self", "dl_manager", "download_config"),
    "_example_writer": ("self",),
    "_get_filename_template": ("self", "split_name"),
    "_log_download_bytes": ("self",),
    "_log_download_done": ("self",),  # class_folders.named_build: the CLI sums a build up
    "_split_generators": ("self", "dl_manager"),
    # (a Beam build's finished pipeline: its groups of duplicates checked final)
    "_process_pipeline_result": ("self", "pipeline_result"),
}
BUILDER_CLASS_PROPERTIES = ("_checksums_path", "url_infos")


def check_builder_hooks() -> None:
  """Raises TFDSInternalsChanged if a hook our base class overrides is gone or changed."""
  base = tfds.core.GeneratorBasedBuilder
  for name, parameters in BUILDER_HOOKS.items():
    method = getattr(base, name, None)
    found = method and tuple(inspect.signature(method).parameters)[:len(parameters)]
    if found != parameters:
      raise TFDSInternalsChanged(
          f"imagesets.tfds_internals.check_builder_hooks: TFDS {tfds.__version__}'s "
          f"GeneratorBasedBuilder.{name} takes {found}, we override it as {parameters}; "
          "fallback: build with the stock GeneratorBasedBuilder (no shard floor, "
          "deterministic records or prepared-record writing)")
  for name in BUILDER_CLASS_PROPERTIES:
    if not hasattr(base, name):
      raise TFDSInternalsChanged(
          f"imagesets.tfds_internals.check_builder_hooks: TFDS {tfds.__version__}'s "
          f"GeneratorBasedBuilder has no {name}; fallback: register checksums with "
          "`tfds build --register_checksums` next to the builder")


_MISSING = object()
_EMPTY_SPLIT = re.compile(r"The total number of generated examples is 0 for split (\w+)\.")


def empty_split_in(error: BaseException) -> str | None:
  """The split TFDS's Beam writer refused as empty, when `error` (as the runner raised it:
  often a RuntimeError holding the worker's traceback) says so; else None."""
  found = _EMPTY_SPLIT.search(str(error))
  return found.group(1) if found else None


def filename_template(builder, split: str):
  """The ShardedFileTemplate a builder writes `split` with."""
  return builder._get_filename_template(split_name=split)  # pylint: disable=protected-access


def _split_generators(builder, dl_manager, split_builder) -> dict:
  """The builder's {split: generator}, as TFDS's `_generate_splits` takes them."""
  generators = builder._split_generators(dl_manager)  # pylint: disable=protected-access
  generators = split_builder.normalize_legacy_split_generators(
      split_generators=generators,
      generator_fn=builder._generate_examples,  # pylint: disable=protected-access
      is_beam=False)
  if "all" in generators:
    raise ValueError("`all` is a reserved keyword. Split cannot be named like this.")
  return generators


def _submitted(builder, split_builder, split, generator, nondeterministic_order):
  return split_builder.submit_split_generation(
      split_name=split, generator=generator, filename_template=filename_template(builder, split),
      disable_shuffling=builder.info.disable_shuffling,
      nondeterministic_order=nondeterministic_order)


def generate_splits_locally(builder, dl_manager, split_builder, *,
                            nondeterministic_order: bool = False) -> list:
  """What GeneratorBasedBuilder._generate_splits does for a build without Beam, with a split
  writer of our choosing (`split_builder`): the builder's splits, each submitted to it,
  then every SplitInfo (TFDS asks for them once all splits were generated)."""
  futures = [_submitted(builder, split_builder, split, generator, nondeterministic_order)
             for split, generator in _split_generators(builder, dl_manager, split_builder).items()]
  return [future.result() for future in futures]


def generate_splits_on_beam(builder, dl_manager, download_config, *,
                            before_writers: Callable, shard_config_of: Callable) -> list:
  """What GeneratorBasedBuilder._generate_splits does on Beam, with what a build on Beam
  needs besides: `before_writers(pipeline)` adds the builder's work once its splits are
  known, before any split's writer; a split whose generator is None is given to no writer
  (a version built on a base that keeps every record of it); `shard_config_of(split)` is
  the ShardConfig of the split's writer (None: the build's). Returns (split, filename
  template, SplitInfo or None) per split, once the pipeline ran and the builder's
  `_process_pipeline_result` saw it."""
  split_builder = SplitBuilder(
      split_dict=builder.info.splits, features=builder.info.features,
      dataset_size=builder.info.dataset_size,
      max_examples_per_split=download_config.max_examples_per_split,
      beam_options=download_config.beam_options, beam_runner=download_config.beam_runner,
      shard_config=download_config.get_shard_config(),
      example_writer=builder._example_writer(),  # pylint: disable=protected-access
      ignore_duplicates=download_config.ignore_duplicates)
  build_config = getattr(split_builder, "_shard_config", _MISSING)
  submitted = []
  with split_builder.maybe_beam_pipeline() as proxy:
    generators = _split_generators(builder, dl_manager, split_builder)
    before_writers(split_builder.beam_pipeline)
    for split, generator in generators.items():
      future = None
      if generator is not None:
        config = shard_config_of(split)
        if build_config is not _MISSING:
          # (TFDS's Beam writer takes the split builder's shard config as it is made here)
          split_builder._shard_config = config or build_config  # pylint: disable=protected-access
        elif config is not None:
          raise TFDSInternalsChanged(
              f"imagesets.tfds_internals.generate_splits_on_beam: TFDS {tfds.__version__}'s "
              "SplitBuilder keeps no _shard_config; fallback: build versions on a base locally")
        future = _submitted(builder, split_builder, split, generator,
                            download_config.nondeterministic_order)
      submitted.append((split, filename_template(builder, split), future))
  if proxy._beam_pipeline:  # pylint: disable=protected-access
    builder._process_pipeline_result(pipeline_result=proxy.result)  # pylint: disable=protected-access
  return [(split, template, future and future.result()) for split, template, future in submitted]
