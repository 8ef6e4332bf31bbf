"""The base class every imagesets builder derives from.

It holds the rules that all our builders share, so each builder stays a thin
description of its source:

* Registration: only the canonical module `imagesets.<name>.<name>_dataset_builder`
  registers the dataset name. `tfds build datasets/<name>` (and Beam workers that
  unpickle it) import the same file a second time under another module name; that
  copy stays unregistered instead of failing with "already registered".
* Sharding: never fewer than `sharding.MIN_SHARDS` shards per split, so
  multi-worker input sharding works on every split.
* Records: every tf.train.Example is written in protobuf's deterministic form, so two
  builds of the same data give byte-identical shards (`deterministic_writer`), through
  TFDS's own `_example_writer` hook: nothing changes for other datasets.
* One build per version: a build locks its version and removes what killed builds of it
  left behind; a second concurrent build stops with one line (`build_lock`).
* Checksums: download checksums live in the top-level `checksums/<name>.txt`
  (also where `tfds build --register_checksums` writes them). A line with size 0 is a
  published sha256 whose size is not yet known: `registered_files` has it, TFDS's
  `url_infos` does not (`downloads` checks those files itself).
* The page: a local build writes the version's HTML page (`report_page`) beside its card.
* Record index: a builder with RECORD_INDEX writes what each shard holds (`record_index`),
  so that a later version can be built on this one (`incremental`).
* Generation: `self.generation` runs per-example work locally (worker pool) or on
  Beam when the build has Beam options, and gathers the problems and notes of the
  whole build; `_finish_generation` raises them as one error or records them.
  Locally, the workers also make the finished records, which are written in the order
  they come by a SplitBuilder of this build's own (`prepared_records.RecordSplitBuilder`):
  TFDS's writer thread neither serializes nor shuffles, and memory stays flat in the
  number of images. Nothing of TFDS is replaced: the hooks we override are TFDS's
  builder methods, reached through `tfds_internals` (which checks them at import).
"""

import bisect
import concurrent.futures
import contextlib
import dataclasses
import functools
import itertools
import json
import logging
import pathlib


from etils import epath
import tensorflow_datasets as tfds

import imagesets.tfds_internals as tfds_internals
from imagesets.annotations import schema
from imagesets.checksums import DIRECTORY as CHECKSUMS_DIRECTORY
from imagesets.building import build_lock
from imagesets.building import class_folders_tree
from imagesets.building import deterministic_writer
from imagesets.building import downloads
from imagesets.building import duplicate_report
from imagesets.building import generation
from imagesets.building import incremental
from imagesets.building import parallel_map
from imagesets.building import prepared_records
from imagesets.building import record_index
from imagesets.building import problems
from imagesets.building import shard_hashes
from imagesets.building import sharding
from imagesets.console.progress_lines import log_friendly_stderr
from imagesets.reports import page_pictures
from imagesets.reports import report_page
from imagesets.reports import version_examples
from imagesets.reports import version_report
import imagesets.console.cli_process as cli_process
from imagesets.startup import verbose

CANONICAL_PACKAGE = "imagesets."

tfds_internals.check_builder_hooks()  # a TFDS that changed them fails here, by name


def _uses_beam(download_config) -> bool:
  return download_config.beam_options is not None or download_config.beam_runner is not None


_LOCAL_RUNNERS = (None, "DirectRunner", "direct", "SwitchingDirectRunner",
                  "BundleBasedDirectRunner")


@contextlib.contextmanager
def _beam_info_off(download_config):
  """A command-line build on Beam's local runner (`tfds build ... --beam_pipeline_options=
  direct_num_workers=2,...`) prints hundreds of Beam INFO lines (every stage, every worker's
  start, each worker's own lines relayed): in that block, Beam logs warnings and errors
  only, in this process and in its workers (`default_sdk_harness_log_level`, unless given).
  Elsewhere (a script's process, a remote runner's workers), or with -v or
  IMAGESETS_VERBOSE=1, nothing changes."""
  options = download_config.beam_options if download_config is not None else None
  if (download_config is None or not _uses_beam(download_config) or verbose()
      or not cli_process.is_cli_process()):
    yield
    return
  from apache_beam.options import pipeline_options  # (a Beam build: Beam is there)
  runner = options.view_as(pipeline_options.StandardOptions).runner if options else None
  if download_config.beam_runner is not None or runner not in _LOCAL_RUNNERS:
    yield
    return
  workers = options.view_as(pipeline_options.WorkerOptions) if options else None
  if workers is not None and workers.default_sdk_harness_log_level is None:
    workers.default_sdk_harness_log_level = "WARNING"
  beam_logger = logging.getLogger("apache_beam")
  level = beam_logger.level
  beam_logger.setLevel(logging.WARNING)
  try:
    yield
  finally:
    beam_logger.setLevel(level)


def _image_of(read, key: str, label_id: int | None) -> bytes:
  """The stored image bytes of the example `read` gives, once its file name and label id
  are those its index row says (a record read at a wrong place is an error, never another
  photo's picture under this one's name)."""
  name, label, image = record_index.example_fields(read())
  if (name, label) != (key, label_id):
    raise record_index.RecordIndexError(
        f"the record read for {key} is {name} (label {label}): the version's record index "
        "does not describe its shards")
  return image


def _located(folder: pathlib.Path, split: str, rows: list, labels: list, classes: list,
             shard_names: list, starts: list[int], offsets: list[int], file_format: str,
             held: schema.Schema, digests: dict[str, str], position: int
             ) -> "version_examples.Located":
  """The `Located` of the example at `position` of `split` (`_page_catalog`'s): its record
  in its shard (`starts`: each shard's first position), at its offset there; `digests`:
  the SHA-256 of the shards whose bytes this build knows (its `record`: that, where it
  is read (position, the shard's records, offset) and its index row's key, size and label
  id)."""
  shard = bisect.bisect_right(starts, position) - 1
  read = record_index.record_reader(
      folder, shard_names[shard], file_format, position - starts[shard],
      starts[shard + 1] - starts[shard], rows[position][1], offsets[position])
  key, (label, label_id) = rows[position][0], labels[position]
  marked = held.task == schema.DETECTION or held.mask is not None
  digest = digests.get(shard_names[shard])
  return version_examples.Located(
      split, key, label, functools.partial(_image_of, read, key, label_id),
      functools.cache(functools.partial(_marks_of, read, held)) if marked else None,
      classes[position],
      # (with every input of its read and its check: a picture found by this was made
      # from a read of that very place that checked that very row; a row that no longer
      # describes its record misses, and is read)
      json.dumps([digest, position - starts[shard], starts[shard + 1] - starts[shard],
                  offsets[position], key, rows[position][1], label_id])
      if digest and not marked else None)


def _marks_of(read, held: schema.Schema) -> tuple[tuple, bytes | None]:
  """(the `report_page.Box`es, the stored class-id mask or None) of the example `read`
  gives: what its page picture draws over it."""
  record = read()
  boxes = (tuple((*bbox, held.name(label)) for bbox, label in record_index.example_objects(record))
           if held.task == schema.DETECTION else ())
  return boxes, record_index.example_bytes(record, held.mask) if held.mask else None


class _InfoOfOurs(tfds.core.DatasetInfo):
  """The `DatasetInfo` of a builder of ours. TFDS's own catalogue (gs://tfds-data) holds
  none of our datasets, and TFDS looks a version not built yet up there through a
  temporary folder it never removes: one empty folder left in /tmp by every build."""

  def initialize_from_bucket(self) -> None:
    pass


class Metadata(tfds.core.MetadataDict):
  """TFDS's metadata dict (metadata.json), written by json's C encoder: TFDS's `json.dump`
  into the file goes through the pure-Python one, and a version's metadata lists every
  file of its tree (0.03 s at 20,000 photos). The same bytes."""

  def save_metadata(self, data_dir) -> None:
    (epath.Path(data_dir) / "metadata.json").write_text(json.dumps(self))


class ImageSetBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """GeneratorBasedBuilder with imagesets' registration and shard-count rules."""

  # Write `record_index` beside the shards: what a later version is built on (`incremental`).
  RECORD_INDEX = False
  # A version built on another (named builds): what it keeps of that one, what it makes.
  PLAN: incremental.Plan | None = None
  # The worker processes the caller started for this build (`parallel_map.executor`, warm
  # by the time the build needs them: named builds); None: the build starts its own.
  POOL = None
  # The caller's work that needs nothing of the build, done while the workers group its
  # images (`duplicate_report.finish`'s `meanwhile`: named builds encode their file-hash
  # cache); None: none.
  WHILE_GROUPING = None
  # `imagesets verify`'s check of a version against its source (`round_trips`); None: none.
  ROUND_TRIP = None
  # Whether an example's key is its file name and `_page_label` / `_page_classes` say what
  # it shows from the key alone: the page then reads only the records it pictures.
  KEYS_NAME_EXAMPLES = False

  def __init_subclass__(cls, skip_registration=False, **kwargs):
    canonical = cls.__module__.startswith(CANONICAL_PACKAGE)
    super().__init_subclass__(
        skip_registration=skip_registration or not canonical, **kwargs
    )

  @property
  def info(self) -> tfds.core.DatasetInfo:
    info = super().info   # (made once per builder, by `_info`)
    if type(info) is tfds.core.DatasetInfo:  # pylint: disable=unidiomatic-typecheck
      info.__class__ = _InfoOfOurs   # (a subclass without state of its own)
    return info

  @tfds_internals.classproperty
  @classmethod
  def _checksums_path(cls) -> epath.Path:
    return epath.Path(CHECKSUMS_DIRECTORY) / f"{cls.name}.txt"

  def download_and_prepare(self, **kwargs):
    with _beam_info_off(kwargs.get("download_config")):
      return self._prepare(**kwargs)

  def _prepare(self, **kwargs):
    config = kwargs.get("download_config")
    overwrite = config is not None and config.download_mode.overwrite_dataset
    # A prepared version is only read (and may sit in a read-only folder): no lock.
    if self.data_path.exists() and not overwrite:
      self._check_prepared()
      return super().download_and_prepare(**kwargs)
    if (config is not None and config.max_examples_per_split is not None
        and _uses_beam(config)):
      # TFDS's Beam split writer ignores the cap (a TODO of its own): the whole source would
      # be built under the name of a capped build.
      raise problems.one_line_if_uncaught(ValueError(
          f"{self.info.full_name}: max_examples_per_split (--max_examples_per_split) is not "
          "applied by Beam builds, which would write every example of the source; build "
          "locally (no Beam options) to cap each split, or drop the cap."))
    if class_folders_tree.is_remote(self.data_path):
      return super().download_and_prepare(**kwargs)
    # Logs (CI, nohup) get a line per bar every few seconds, not carriage returns.
    with build_lock.hold(self.data_path, name=f"{self.info.full_name}"), \
        log_friendly_stderr():
      if self.data_path.exists() and not overwrite:  # (made while this build waited)
        self._check_prepared()
      return super().download_and_prepare(**kwargs)

  def _check_prepared(self) -> None:
    """Raises unless the existing version folder is a finished version this build may
    take as its own: TFDS would take any folder there as prepared (an empty one too) and
    the build would return without a word. Builders whose versions record what they were
    built from also check that it is this build's (`named_versions`)."""
    if not (self.data_path / "dataset_info.json").exists():
      raise problems.one_line_if_uncaught(FileExistsError(
          f"{self.data_path} exists but is not a finished version (no dataset_info.json): "
          "delete it and build again"))

  def _download_and_prepare(self, dl_manager, download_config):
    self.generation = None  # this build's `generation.Generation`, once it runs one
    self.found = None  # what its reports hold (`duplicate_report.Found`), once written
    # shard file name -> the SHA-256 of its bytes, for the shards the build indexed (kept or
    # written: `_write_record_index`)
    self.shard_digests: dict[str, str] = {}
    super()._download_and_prepare(dl_manager, download_config)
    if (self._writes_page() and self._leakage() != "off"
        and not class_folders_tree.is_remote(self.data_path)):
      self._write_page()

  def _write_page(self) -> None:
    """The version's page (`report_page.PAGE_FILE`) beside its card, from the records just
    written and the reports the build stored, as it holds them (one read of the version;
    docs/know_your_data.md says what it costs; none with leakage "off", which asks for no
    extra work). Written in TFDS's unfinished folder (`data_path` until the build returns),
    before dataset_info.json and the rename that commits the version: a version never
    exists without its page."""
    folder = pathlib.Path(self.data_path)
    found = self.found
    pictures = page_pictures.Cache(page_pictures.beside(self.data_path),
                                   reuse=self.PLAN is not None)  # (as the file hashes)
    page = version_report.content(
        version_examples.Folder(self, folder, catalog=self._page_catalog(folder)),
        images=self._page_images(),
        found=(found.groups, found.findings, found.num_images) if found is not None and (
            version_examples.has_file_names(self.info.features)) else None,
        pictures=pictures.picture)
    size = version_report.write(page, folder / report_page.PAGE_FILE)
    pictures.save()
    logging.info("%s: %s (%.1f MiB)", self.info.full_name, report_page.PAGE_FILE,
                 size / 2**20)

  def is_prepared(self) -> bool:
    # TFDS's check warns "Variant folder .../1.0.0 has no dataset_info.json" for a version
    # folder that does not exist yet (`tfds build`, `tfds.load` and our pipelines ask
    # before a build): not prepared, nothing to warn about.
    if not self.data_path.exists():
      return False
    return super().is_prepared()

  def _log_download_bytes(self) -> None:
    # TFDS prints "Downloading and preparing dataset Unknown size (download: Unknown
    # size, ...)" here: no builder of ours registers sizes. Say what is built, and where.
    print(f"building {self.info.full_name} ({self.info.file_format.value}) into {self.data_dir}")

  def _example_writer(self):
    return deterministic_writer.DeterministicExampleWriter(file_format=self.info.file_format)

  def _generate_splits(self, dl_manager, download_config):
    use_beam = _uses_beam(download_config)
    with self._workers() as pool:
      self.generation = generation.Generation(use_beam=use_beam, data_dir=self.data_path,
                                              pool=pool, features=self.info.features,
                                              leakage=self._leakage(),
                                              title=self.info.full_name,
                                              keep_order=getattr(self, "KEEP_ORDER", False),
                                              progress=getattr(self, "PROGRESS", ""),
                                              beam_kept=(
                                                  incremental.kept_images_on_workers(self.PLAN)
                                                  if self.PLAN and use_beam else None),
                                              beam_rows_kept=use_beam and self._indexes_on_beam())
      try:
        split_infos = self._generate_all_splits(
            dl_manager, sharding.with_min_shards(download_config, self._min_shards()),
            use_beam)
      except Exception as stopped:
        # TFDS can stop before every split ran (e.g. a split without one good example).
        # If bad items caused it, check the rest too, so that one error names every bad
        # item of the source (or, when they are skipped, every split left empty); any other
        # failure is re-raised without more work.
        if self.generation.report().problems:
          empty = self.generation.check_unfinished()
          try:
            self._finish_generation(self.generation.report())
          except problems.InvalidSourceError as error:
            raise error from None  # the whole story: not after what stopped TFDS
          if isinstance(stopped, generation.EmptySplitError) and empty:
            raise stopped.joined(empty) from None
        said = self.generation.beam_stop(stopped)
        if said is not None:
          raise said from None
        raise
      finally:
        self.generation.close_progress()  # (before the summary or the error is printed)
    report = self._with_kept(self.generation.report())
    self._finish_generation(report)
    self.found = duplicate_report.finish(
        report, self.data_path, action=self._leakage(), title=self.info.full_name,
        pool=self.POOL, meanwhile=functools.partial(self._while_grouping, split_infos, use_beam))
    if self.found is not None and self.info.metadata is not None:
      self.info.metadata["duplicates"] = self.found.summary
    return split_infos

  def _while_grouping(self, split_infos, use_beam: bool) -> None:
    """What needs no groups: the record index, the caller's `WHILE_GROUPING`."""
    if self.RECORD_INDEX and not use_beam:
      self._write_record_index(split_infos)
    if self.WHILE_GROUPING is not None:
      self.WHILE_GROUPING()  # pylint: disable=not-callable

  def _workers(self):
    """The pool of this build's per-example work: the caller's (`POOL`) when processes do
    it, else one of its own."""
    threads = self._reads_remote_files()
    if self.POOL is not None and not threads:
      return contextlib.nullcontext(self.POOL)
    return parallel_map.executor(threads=threads)

  def _planned_split(self, name: str, paths: list[str], make):
    """What `_split_generators` returns for split `name` of `paths`: `make(paths)` gives
    (work items, process) of the paths to make, every one, or, built on a base (`PLAN`),
    those the base has no record of (its kept records are written beside them)."""
    plan = self.PLAN and self.PLAN.splits[name]
    items, process = make(plan.new if plan else paths)
    split = self.generation.examples(name, items, process, kept=plan.kept if plan else 0)
    if plan and self.generation.use_beam:  # (joined to the kept shards once written)
      return split if plan.new else None  # (None: no new record, no writer)
    if plan:
      split.writer = incremental.writer(self.PLAN, name, lambda: self.generation.written(name))
    return split

  def _with_kept(self, report: generation.Report) -> generation.Report:
    """The build's report with what it kept of the version it was built on (`PLAN`)."""
    if self.PLAN is None:
      return report
    return dataclasses.replace(  # (on Beam, the workers' report holds the kept images)
        report, images=[*report.images, *(self.PLAN.kept_images() if report.known is None
                                          else ())],
        notes=dict(sorted({**self.PLAN.kept_notes(), **report.notes}.items())))

  def _page_catalog(self, folder: pathlib.Path) -> dict | None:
    """Every example of the version (`version_examples.Catalog`: names, labels, where each
    record is), when its keys name its examples (`KEYS_NAME_EXAMPLES`) and this build listed
    the records of every split (`_index_rows`: a local build, whether or not it keeps them
    as a record index): its page then reads only the records it pictures. None otherwise:
    the page reads the version."""
    file_format = self.info.file_format.value
    if (not self.KEYS_NAME_EXAMPLES or (self.generation is None and self.PLAN is None)
        or file_format not in record_index.READABLE_FORMATS):
      return None  # (keys that do not name examples, no rows, or records not read here)
    held = schema.of(self.info.features)
    catalog = {}
    for split, info in self.info.splits.items():
      rows = self._index_rows(split)
      if len(rows) != info.num_examples:
        return None
      names = [row[0] for row in rows]
      labels = [self._page_label(key) for key in names]
      classes = [self._page_classes(key) for key in names]
      starts = list(itertools.accumulate(info.shard_lengths, initial=0))
      offsets = [offset for start, end in zip(starts, starts[1:])  # (in its shard)
                 for offset in record_index.offsets([row[1] for row in rows[start:end]])]
      catalog[split] = version_examples.Catalog(
          names, [label for label, _ in labels], classes,
          functools.partial(_located, folder, split, rows, labels, classes, info.filenames,
                            starts, offsets, file_format, held, self.shard_digests))
    return catalog

  def _page_images(self) -> list | None:
    """(member named as the page names it, fingerprint) of every example, split by split in
    stored order, from this build's own fingerprints: for a version without file names,
    whose stored report cannot name its examples for the page (which would otherwise decode
    the version again). None where the page reads the stored report, or where this build
    did not fingerprint every example it wrote (on Beam, built on another version, or its
    splits generated otherwise)."""
    if (self.generation is None or self.PLAN is not None
        or version_examples.has_file_names(self.info.features)):
      return None
    keyed = self.generation.keyed_images()
    images = []
    for split, info in self.info.splits.items():
      rows = self.generation.written(split)
      if len(rows) != info.num_examples:
        return None
      for position, (key, _, written) in enumerate(rows):
        member, fingerprint = keyed.get((split, key), (None, None))
        if fingerprint is None or fingerprint.to_json() != written:  # (not this record's)
          return None
        images.append((dataclasses.replace(
            member, file_name=version_examples.position_name(split, position)), fingerprint))
    return images

  def _page_label(self, key: str) -> tuple[str | None, int | None]:
    """(label the page shows, label id) for the example of `key`: its class name and id as
    its record's "label" holds them; id None for examples without one label. Builders
    whose `KEYS_NAME_EXAMPLES` say it."""
    raise NotImplementedError(f"{type(self).__name__} does not name its examples by key")

  def _page_classes(self, key: str) -> tuple[str, ...] | None:
    """The classes the example of `key` shows (`schema.Schema.classes`); None: its label."""
    return None

  def _index_rows(self, split: str) -> list[list]:
    """[key, size, fingerprint] of each record of `split`, in shard order (its json, or a
    base's kept record's `Fingerprint`: `record_index.write` takes both)."""
    if self.PLAN is None:
      return self.generation.written(split)
    return [row for rows in self.PLAN.splits[split].layout for row in rows]

  def _write_record_index(self, split_infos, download_config=None) -> None:
    """`record_index` of every shard of every split whose records this build listed, and
    the shards' hashes with their stats before (`shard_hashes`: the next version does not
    read them again). On Beam (`download_config`'s), the shards TFDS's writer made are
    indexed and hashed by the workers (`beam_index`), after the driver's stat of each."""
    on_beam = download_config is not None
    kept_checked = None if self.PLAN is None else self.PLAN.kept_checked
    checked = kept_checked.checked if kept_checked is not None else shard_hashes.now()
    local = not class_folders_tree.is_remote(self.data_path)
    written, on_workers, keys_on_workers = {}, [], {}
    for info in split_infos:
      rows = self._index_rows(info.name)
      if len(rows) != info.num_examples and not on_beam:  # (a split TFDS wrote itself)
        continue
      start = 0
      for position, (shard_name, length) in enumerate(zip(info.filenames, info.shard_lengths)):
        kept = None if self.PLAN is None else self.PLAN.kept_shard(info.name, position)
        if kept is None and start + length > len(rows):  # (on Beam: made by TFDS's writer)
          on_workers.append((info.name, shard_name))
          key = digest = None  # (hashed by the workers)
          if local:  # (its stat before the workers hash it)
            keys_on_workers[shard_name] = shard_hashes.key_of(
                pathlib.Path(self.data_path) / shard_name)
        elif kept is None:
          # (its stat before its hash: a change after either shows in the next build's stat)
          key = shard_hashes.key_of(pathlib.Path(self.data_path) / shard_name) if local else None
          digest = record_index.write(self.data_path, shard_name, info.name,
                                      rows[start:start + length])
        else:  # (a base's shard kept whole keeps its index: the same bytes)
          record_index.write(self.data_path, shard_name, info.name, rows[start:start + length],
                             same_as=record_index.path_of(self.PLAN.base.version_dir, kept.name),
                             same_digest=kept.index_sha256)
          # (the base file's stat: a link has it; a copy, where links are refused, does not,
          # and is read by the next build)
          key, digest = kept_checked.keys.get(kept.name), kept.sha256
        if key is not None:  # (a shard without a stat is read by the next build)
          written[shard_name] = key, digest
        if digest is not None:
          self.shard_digests[shard_name] = digest
        start += length
    if on_beam:
      from imagesets.building import beam_index  # (Beam builds only: it imports Beam)
      digests = beam_index.write(self.data_path, on_workers, self.generation.beam_rows(),
                                 self.info.file_format.value, self.generation.beam_work_dir(),
                                 options=download_config.beam_options,
                                 runner=download_config.beam_runner)
      self.generation.drop_beam_rows()
      written.update((name, (key, digests[name])) for name, key in keys_on_workers.items())
      self.shard_digests.update(digests)
    if written and local:
      shard_hashes.save(self.data_path, str(self.info.version), written, checked)

  def _generate_examples(self):
    # Abstract in TFDS; every builder of ours makes its splits with `self.generation` in
    # its _split_generators, so TFDS never calls it.
    raise NotImplementedError

  def _process_pipeline_result(self, pipeline_result) -> None:
    # (TFDS's hook, once a Beam build's pipeline finished: its groups must be final)
    super()._process_pipeline_result(pipeline_result)
    self.generation.check_pipeline(pipeline_result)

  def _generate_all_splits(self, dl_manager, download_config, use_beam: bool):
    if use_beam:  # TFDS's own split writer runs the pipeline
      plan = self.PLAN
      written = tfds_internals.generate_splits_on_beam(
          self, dl_manager, download_config, before_writers=self.generation.beam_work,
          shard_config_of=lambda split: plan and incremental.shard_config_on_beam(plan, split))
      infos = [info if plan is None else incremental.joined_on_beam(
          plan, split, template, info, self.info.file_format.value)
               for split, template, info in written]
      if self._indexes_on_beam():
        # (bad files or a leak stop the build before the index's pipeline, and before the
        # shards' hashes are recorded: the record of the last version built stays)
        report = self.generation.report()
        self._finish_generation(report)
        if self._leakage() == "error":
          duplicate_report.raise_if_leaking(report, self.info.full_name)
        self._write_record_index(infos, download_config)
      return infos
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="shards") as shard_writer:
      split_builder = prepared_records.RecordSplitBuilder(
          shard_writer=shard_writer,
          split_dict=self.info.splits, features=self.info.features,
          dataset_size=self.info.dataset_size,
          max_examples_per_split=download_config.max_examples_per_split,
          beam_options=None, beam_runner=None,
          shard_config=download_config.get_shard_config(),
          example_writer=self._example_writer(),
          ignore_duplicates=download_config.ignore_duplicates)
      return tfds_internals.generate_splits_locally(
          self, dl_manager, split_builder,
          nondeterministic_order=download_config.nondeterministic_order)

  def _indexes_on_beam(self) -> bool:
    """Whether a Beam build writes a record index: as a local build (`RECORD_INDEX`), of a
    version in a local folder in a format whose records are read back (`incremental`)."""
    return bool(self.RECORD_INDEX) and not class_folders_tree.is_remote(self.data_path) and (
        self.info.file_format.value in incremental.FORMATS)

  def _leakage(self) -> str:
    """What to do about images in more than one split (duplicates.LEAKAGE_ACTIONS)."""
    return "warn"

  def _min_shards(self) -> int:
    """The fewest shards per split (`sharding.floor`)."""
    return sharding.MIN_SHARDS

  def _writes_page(self) -> bool:
    """Whether a build writes the version's page: when its examples have an "image" stored
    as an image file (not keras' one-call caches of raw pixels: nobody reads a page of
    those, and their callers wait for the build)."""
    features = self.info.features
    return "image" in features and isinstance(features["image"], tfds.features.Image)

  def _reads_remote_files(self) -> bool:
    """True when per-example work reads a bucket: threads then, not forked processes."""
    return False

  def _finish_generation(self, report: generation.Report) -> None:
    """Raises one error for every problem; builders say where the source is and the fix."""
    problems.raise_if_any(report.problems, source=self.name,
                          fix="repair or remove the items named above.")

  @tfds_internals.classproperty
  @classmethod
  def url_infos(cls) -> dict:
    """What TFDS checks its downloads against: the registered files whose size is known.

    Read on every call (TFDS memoizes its own), so a test can point `_checksums_path`
    at its own file."""
    path = cls._checksums_path
    found = tfds_internals.load_url_infos(path) if path.exists() else {}
    return downloads.with_known_size(found)

  @tfds_internals.classproperty
  @classmethod
  def registered_files(cls) -> dict:
    """Every registered file, {url: UrlInfo}; size 0: published sha256, size not yet known.

    Built on `url_infos`, so that a test that replaces `url_infos` replaces these too."""
    path = cls._checksums_path
    found = tfds_internals.load_url_infos(path) if path.exists() else {}
    return {**{url: info for url, info in found.items() if not int(info.size)},
            **cls.url_infos}
