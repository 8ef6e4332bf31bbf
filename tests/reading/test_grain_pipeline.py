"""grain_pipeline (+ numpy_ops): numpy batches over ArrayRecord builds, local or in a bucket."""

import collections
import itertools
import json
import os
import pathlib

import numpy as np
import pytest
import tensorflow_datasets as tfds

# grain is a test dependency (pyproject's `test` extra): without it this module fails to
# import and the suite fails; it is never skipped.
import grain.python  # noqa: F401

from imagesets.reading import grain_pipeline as gp
from imagesets.reading import input_pipeline as ip
from imagesets.reading import mixing
from test_input_pipeline import (NUM_CLASSIFICATION, PipelineClasses, PipelineSegments,
                                 _assert_same_batches, _check_segmentation_batches, _prepared)
from streamed_versions import NUM_SHARDS, SPEC, local_examples, published_to, train_bytes


@pytest.fixture(scope="module")
def classes(tmp_path_factory):
  return _prepared(PipelineClasses, tmp_path_factory, "array_record")


@pytest.fixture(scope="module")
def segments(tmp_path_factory):
  return _prepared(PipelineSegments, tmp_path_factory, "array_record")


def _take(loader, count):
  return list(itertools.islice(iter(loader), count))


def test_a_local_tfrecord_build_is_read_in_the_read_order_every_record_once(tmp_path_factory):
  """No random access: read as a bucket's version is, each worker its own shards, in a
  seeded order of shards and windows; every record once an epoch, on any worker count,
  resumed on another count from `position`. (`data_source`, random access, refuses it.)"""
  tfrecord = PipelineClasses(data_dir=tmp_path_factory.mktemp("tfds"), file_format="tfrecord")
  tfrecord.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=4))
  with pytest.raises(ValueError, match="--file_format array_record"):
    gp.data_source(tfrecord, "train")
  def loader(workers, **kwargs):
    return gp.classification_train(tfrecord, batch_size=4, image_size=16, seed=3,
                                   num_epochs=2, worker_count=workers, **kwargs)
  for workers in (0, 2):
    labels = [int(l) for batch in loader(workers) for l in batch["label"]]
    assert sorted(labels) == sorted(list(range(NUM_CLASSIFICATION)) * 2), workers
    assert labels[:NUM_CLASSIFICATION] != list(range(NUM_CLASSIFICATION))   # shuffled
  iterator = iter(loader(2))
  seen = [int(l) for _ in range(3) for l in next(iterator)["label"]]
  position = gp.position(loader(2), iterator.get_state())
  rest = [int(l) for batch in loader(1, start=position) for l in batch["label"]]
  assert sorted(seen + rest) == sorted(list(range(NUM_CLASSIFICATION)) * 2)
  evaluated = [int(l) for b in gp.classification_eval(tfrecord, split="train", batch_size=5,
                                                      image_size=16) for l in b["label"]]
  with pytest.raises(ValueError, match=r"^split 'train' has 24 examples, fewer than "
                     r"batch_size=64: .* give batch_size=24 or less"):
    gp.classification_train(tfrecord, batch_size=64, num_epochs=1)
  stored = [int(e["label"]) for e in tfds.as_numpy(tfrecord.as_dataset(split="train"))]
  assert evaluated == stored and sorted(stored) == list(range(NUM_CLASSIFICATION))


def test_training_batches_are_static_numpy_and_deterministic_for_a_seed(classes):
  run = lambda seed: _take(gp.classification_train(classes, batch_size=5, image_size=16,  # noqa: E731
                                                   seed=seed), 6)
  first = run(3)
  for batch in first:
    assert batch["image"].shape == (5, 16, 16, 3) and batch["image"].dtype == np.uint8
    assert batch["label"].shape == (5,) and batch["label"].dtype == np.int64
  _assert_same_batches(first, run(3))
  assert not all(np.array_equal(a["image"], b["image"]) for a, b in zip(first, run(4)))
  # Global shuffle: the first epoch's 20 labels are 20 distinct examples in a new order.
  labels = np.concatenate([b["label"] for b in first[:4]])
  assert len(set(labels.tolist())) == 20 and labels.tolist() != sorted(labels.tolist())


@pytest.mark.parametrize("worker_count", [0, 1])  # in this process; a worker process
def test_resuming_from_a_saved_state_gives_the_next_batch(classes, worker_count):
  def loader():
    return gp.classification_train(classes, batch_size=4, image_size=16, seed=7,
                                   worker_count=worker_count)
  uninterrupted = _take(loader(), 8)
  iterator = iter(loader())
  for _ in range(3):
    next(iterator)
  state = iterator.get_state()
  resumed = iter(loader())  # a new loader, as after a restart
  resumed.set_state(state)
  _assert_same_batches([next(resumed) for _ in range(5)], uninterrupted[3:8])
  # The check can fail: the state is not ignored (a fresh iterator starts elsewhere).
  assert not np.array_equal(next(iter(loader()))["label"], uninterrupted[3]["label"])


def test_worker_processes_are_deterministic_and_see_the_same_examples(classes):
  """Each worker batches its own records, so batches depend on the worker count; for a
  given count they are the same every run, and every epoch holds the same examples."""
  kwargs = dict(batch_size=4, image_size=16, seed=2, num_epochs=1)
  with_workers = _take(gp.classification_train(classes, worker_count=1, **kwargs), 6)
  _assert_same_batches(with_workers,
                       _take(gp.classification_train(classes, worker_count=1, **kwargs), 6))
  in_process = _take(gp.classification_train(classes, **kwargs), 6)
  assert (sorted(np.concatenate([b["label"] for b in with_workers]).tolist())
          == sorted(np.concatenate([b["label"] for b in in_process]).tolist()))


@pytest.mark.parametrize("pipeline", ["train", "eval"])
def test_two_processes_cover_every_example_exactly_once_per_epoch(classes, pipeline):
  labels = []
  for shard in range(2):
    if pipeline == "train":
      loader = gp.classification_train(classes, batch_size=5, image_size=8, seed=0,
                                       num_epochs=1, drop_remainder=False, shard_index=shard,
                                       shard_count=2)
    else:
      loader = gp.classification_eval(classes, split="train", batch_size=5, image_size=8,
                                      shard_index=shard, shard_count=2)
    shard_labels = np.concatenate([b["label"] for b in loader]).tolist()
    assert 0 < len(shard_labels) < NUM_CLASSIFICATION
    labels += shard_labels
  assert sorted(labels) == list(range(NUM_CLASSIFICATION))


@pytest.mark.parametrize("shard_count, worker_count", [(5, 0), (7, 0), (5, 2)])
def test_processes_that_do_not_divide_the_split_read_every_example_once_an_epoch(
    classes, shard_count, worker_count):
  """24 records over 5 or 7 processes (parts of 5 and 4, or 4 and 3), to the end of the
  run, with worker processes too: each example once an epoch, whatever each process's
  part (Grain's sharded sampler gave every process the same count: 20 of the 24 evaluated,
  some trained on thrice and others once)."""
  common = dict(batch_size=1, image_size=8, shard_count=shard_count, worker_count=worker_count)
  evaluated, trained = [], []
  for shard in range(shard_count):
    evaluated += [label for batch in gp.classification_eval(
        classes, split="train", shard_index=shard, **common) for label in batch["label"]]
    trained += [label for batch in gp.classification_train(
        classes, seed=0, num_epochs=2, shard_index=shard, **common) for label in batch["label"]]
  assert sorted(evaluated) == list(range(NUM_CLASSIFICATION))
  assert sorted(trained) == sorted(list(range(NUM_CLASSIFICATION)) * 2)


def test_more_processes_than_examples_is_one_line(classes):
  with pytest.raises(ValueError, match=r"^split 'train' has 24 examples, fewer than the "
                     r"shard_count=25 processes reading it, each its own part: give "
                     r"shard_count=24 or less$"):
    gp.classification_eval(classes, split="train", batch_size=1, image_size=8,
                           shard_index=0, shard_count=25)


def test_any_int_seed_shuffles_a_local_array_record_build(classes):
  """Seeds outside Grain's 32 bits (negative, 2**32 and up) are taken, as by every other
  loader; the same seed gives the same order, two seeds other orders."""
  orders = {seed: [b["label"].tolist() for b in gp.classification_train(
      classes, batch_size=4, image_size=8, seed=seed, num_epochs=1)]
            for seed in (-1, 2**32, 2**70, 3)}
  assert len({str(order) for order in orders.values()}) == 4
  assert all(sorted(sum(order, [])) == list(range(NUM_CLASSIFICATION))
             for order in orders.values())
  assert orders[-1] == [b["label"].tolist() for b in gp.classification_train(
      classes, batch_size=4, image_size=8, seed=-1, num_epochs=1)]


def test_eval_is_in_stored_order_and_matches_the_tf_data_pipeline(classes, segments):
  grain_batches = list(gp.classification_eval(classes, split="train", batch_size=6,
                                              image_size=16))
  tf_batches = list(ip.classification_eval(classes, split="train", batch_size=6,
                                           image_size=16).as_numpy_iterator())
  for ours, theirs in zip(grain_batches, tf_batches, strict=True):
    np.testing.assert_array_equal(ours["label"], theirs["label"])
    # The same central crops; PIL's and TensorFlow's bilinear resizers round differently.
    assert np.abs(ours["image"].astype(int) - theirs["image"].astype(int)).mean() < 4
  # No resampling in segmentation eval: pixel for pixel what tf.data gives (JPEG images).
  _assert_same_batches(list(gp.segmentation_eval(segments, batch_size=3, crop_size=(64, 80))),
        list(ip.segmentation_eval(segments, batch_size=3, crop_size=(64, 80)).as_numpy_iterator()))


@pytest.mark.parametrize("scale_range, min_alignment", [((1.0, 1.0), 1.0), ((0.5, 2.0), 0.7)])
def test_segmentation_masks_stay_aligned_and_are_padded_with_255(segments, scale_range,
                                                                 min_alignment):
  batches = _take(gp.segmentation_train(segments, split="train", batch_size=4,
                                        crop_size=(72, 64), scale_range=scale_range, seed=1), 8)
  for batch in batches:
    assert batch["image"].shape == (4, 72, 64, 3) and batch["mask"].shape == (4, 72, 64, 1)
  _check_segmentation_batches(batches, min_alignment)
  if scale_range[1] <= 1:  # 72 rows > every height: padding shows
    assert all((b["mask"] == 255).any() for b in batches)


def test_the_pytorch_recipe_without_torch(classes):
  """docs/array_record_and_grain.md's PyTorch lines, minus the DataLoader: a data source
  by index and a transform called with a record and a generator."""
  source = gp.data_source(classes, "train")
  crop = gp.TrainClassification(size=24, area_range=(0.08, 1.0), aspect_ratio_range=(3 / 4, 4 / 3),
                                flip=True, image_key="image", label_key="label")
  examples = [crop.random_map(source[i], np.random.default_rng([0, 0, i]))
              for i in range(len(source))]
  assert list(source) == [source[i] for i in range(len(source))]   # (iterable too)
  assert len(examples) == NUM_CLASSIFICATION
  assert sorted(int(e["label"]) for e in examples) == list(range(NUM_CLASSIFICATION))
  assert all(e["image"].shape == (24, 24, 3) and e["image"].dtype == np.uint8 for e in examples)


_OTHER_THREAD_LOGS = r"""
import logging, sys, threading, time
import tensorflow, tensorflow_datasets  # loaded first, as a training script would
seen = []
class Keep(logging.Handler):
  def emit(self, record):
    seen.append((record.thread, record.getMessage()))
logging.getLogger("absl").addHandler(Keep())
logging.getLogger("absl").setLevel(logging.INFO)
stop, sent = threading.Event(), []
def chatter():
  while not stop.is_set():
    sent.append(len(sent))
    logging.getLogger("absl").warning("tick %d", sent[-1])
    time.sleep(0.0005)
worker = threading.Thread(target=chatter)
worker.start()
time.sleep(0.05)
import imagesets.reading.grain_pipeline
time.sleep(0.05)
stop.set(); worker.join()
ticks = [m for t, m in seen if m.startswith("tick")]
jax = [m for t, m in seen if "jax" in m.lower()]
print(len(sent), len(ticks), len(jax))
"""


def test_importing_grain_pipeline_drops_only_grains_jax_notice_of_its_own_thread():
  # It used to filter every absl record below ERROR, from every thread, during the import.
  import subprocess
  import sys
  out = subprocess.run([sys.executable, "-c", _OTHER_THREAD_LOGS], capture_output=True,
                       text=True, timeout=300, check=True).stdout.split()
  sent, delivered, jax_notices = map(int, out[-3:])
  assert sent > 0 and delivered == sent
  assert jax_notices == 0


def test_a_missing_version_bucket_options_on_a_path_and_a_too_small_split_are_one_line(
    classes, tmp_path):
  # Issue 37, through the Grain pipelines: the same answers as the tf.data ones.
  with pytest.raises(ip.DatasetNotPreparedError) as error:
    gp.classification_eval("pets:9.9.9", batch_size=2, data_dir=str(tmp_path))
  assert str(error.value) == (
      f"pets:9.9.9 is not prepared in {tmp_path} (nothing is prepared there); build it: "
      f"imagesets build PATH --name pets --version 9.9.9 --data-dir {tmp_path}")
  with pytest.raises(ValueError, match=r"^cache_limit='1GB': only a bucket read has a cache"):
    gp.classification_train(classes, batch_size=4, cache_limit="1GB")
  with pytest.raises(ValueError, match=r"^split 'train' has 24 examples, fewer than "
                     r"batch_size=64: .* give batch_size=24 or less"):
    gp.classification_train(classes, batch_size=64, num_epochs=1)
  assert len(_take(gp.classification_train(classes, batch_size=24, num_epochs=1), 2)) == 1


_GRAIN_JOB = r"""
import sys
import tensorflow_datasets as tfds
from imagesets.reading import grain_pipeline as gp, mixing
path, url, spec, cache, tfrecord = sys.argv[1:]
local = tfds.builder_from_directory(path)
small = dict(batch_size=4, image_size=16, num_epochs=1)
streamed = dict(data_dir=url, cache_dir=cache)
mix = mixing.mix([mixing.Part(spec, data_dir=url), mixing.Part(spec, data_dir=url)],
                 cache_dir=cache)
loaders = [gp.classification_train(local, worker_count=1, **small),
           gp.classification_eval(local, split="train", batch_size=4, image_size=16),
           gp.classification_train(spec, worker_count=1, **streamed, **small),
           gp.classification_eval(spec, split="train", batch_size=4, image_size=16, **streamed),
           gp.classification_train(mix, worker_count=1, **small),
           gp.classification_train(tfds.builder_from_directory(tfrecord), worker_count=2,
                                   **small)]
print([sum(len(b["label"]) for b in loader) for loader in loaders])
print(sorted(m for m in sys.modules if m in ("tensorflow", "keras")))
"""


def test_a_grain_job_never_imports_tensorflow(classes, tmp_path):
  """A JAX job reads with Grain alone: making and reading loaders of a local build
  (ArrayRecord; TFRecord, read in place), of a version streamed from a bucket and of a mix
  imports no TensorFlow (7-8 s of CPU a process), in the job or in Grain's worker
  processes (which import only what unpickling the job's sources, samplers and transforms
  imports: a subset of the job's modules)."""
  import subprocess
  import sys
  from imagesets.publishing import publish
  spec, url = f"{classes.name}:{classes.version}", f"file://{tmp_path}/bucket"
  publish.publish(spec, classes.data_dir_root, url, progress=False)
  tfrecord = PipelineClasses(data_dir=tmp_path / "tfrecord", file_format="tfrecord")
  tfrecord.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=2))
  out = subprocess.run([sys.executable, "-c", _GRAIN_JOB, str(classes.data_path), url, spec,
                        str(tmp_path / "cache"), str(tfrecord.data_path)], capture_output=True,
                       text=True, timeout=300, check=True).stdout.splitlines()
  n = NUM_CLASSIFICATION
  assert out[-2:] == [f"[{n}, {n}, {n}, {n}, {2 * n}, {n}]", "[]"]


_WORKER_UNPICKLES = r"""
import pickle, sys
source, sampler, operations = pickle.loads(sys.stdin.buffer.read())
record = source[sampler[0].record_key]
print(len(source), type(record).__name__)
print(sorted(m for m in sys.modules if m in ("tensorflow", "keras") or m.startswith("test_")
             or m.startswith("imagesets.building.")))
"""


def test_grain_workers_open_what_they_read_without_the_builders_code(classes, tiny_data_dir):
  """What Grain sends its worker processes (the loader's source, sampler and transforms,
  cloudpickled), unpickled in a fresh interpreter that can import everything this one can:
  a loader of a builder of the user's own module (here a test module's class, which imports
  TensorFlow) and a mix of one of this package's datasets, built locally, are read
  without the builders' modules, so without TensorFlow."""
  import subprocess
  import sys
  import cloudpickle
  from imagesets.reading import mixing
  mix = mixing.mix([mixing.Part("synthetic_images/tiny", data_dir=str(tiny_data_dir)),
                    mixing.Part("synthetic_images/tiny:1.0.0", data_dir=str(tiny_data_dir))])
  for loader in (gp.classification_train(classes, batch_size=4, image_size=16, worker_count=1),
                 gp.classification_train(mix, batch_size=4, image_size=16, worker_count=1)):
    sent = cloudpickle.dumps((loader._data_source, loader._sampler, loader._operations))
    out = subprocess.run([sys.executable, "-c", _WORKER_UNPICKLES], input=sent,
                         capture_output=True, timeout=300, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.decode().splitlines()[-1] == "[]", out.stdout.decode()


@pytest.mark.parametrize("built", ["array_record"], indirect=True)  # Grain's usual format
def test_grain_pipelines_stream_a_bucket_and_resume(built, tmp_path, bucket_reads):
  from imagesets.reading import grain_pipeline
  url = published_to(built, "file", tmp_path)
  kwargs = dict(data_dir=url, batch_size=8, image_size=32, cache_dir=tmp_path / "c")
  labels = [int(l) for b in grain_pipeline.classification_eval(SPEC, split="test", **kwargs)
            for l in b["label"]]
  assert labels == [label for _, label in local_examples(built, "test")]
  opened = bucket_reads(url)
  train = grain_pipeline.classification_train(SPEC, seed=4, num_epochs=2, worker_count=1,
                                              **kwargs)
  iterator = iter(train)
  for _ in range(7):
    next(iterator)
  # The main process reads nothing (its worker does): it downloaded nothing either.
  assert sum(opened.values()) == 0
  state = iterator.get_state()
  rest = [b["image"].tobytes() for b in iterator]
  assert len(rest) == 2 * 160 // 8 - 7
  resumed = iter(grain_pipeline.classification_train(SPEC, seed=4, num_epochs=2,
                                                     worker_count=1, **kwargs))
  resumed.set_state(state)
  assert [b["image"].tobytes() for b in resumed] == rest


# The same count in processes started from here on (Grain's workers): each appends the
# names it opens to the file named by $BUCKET_LOG.
PROCESS_AUDIT = """
import os, sys
_root, _log = os.environ.get("BUCKET_ROOT"), os.environ.get("BUCKET_LOG")
def _hook(event, args):
  if event == "open" and isinstance(args[0], str) and isinstance(args[1], str):
    name = args[0].rsplit("/", 1)[-1]
    if args[0].startswith(_root) and "-of-" in name and "r" in args[1] and "+" not in args[1]:
      with open(_log, "a") as log:
        log.write(f"{os.getpid()}:{name}\\n")
if _root and _log:
  sys.addaudithook(_hook)
"""


@pytest.fixture
def process_bucket_reads(tmp_path, monkeypatch):
  """Counts shard downloads from the file:// bucket `url` given to `watch(url)` in the
  processes this one starts, by (pid, shard) (read the Counter after they end)."""
  hooks, log = tmp_path / "audit", tmp_path / "downloads.log"
  hooks.mkdir()
  (hooks / "sitecustomize.py").write_text(PROCESS_AUDIT)
  monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
      [str(hooks), *filter(None, [os.environ.get("PYTHONPATH")])]))
  monkeypatch.setenv("BUCKET_LOG", str(log))

  def watch(url):
    monkeypatch.setenv("BUCKET_ROOT", url[len("file://"):])
    return lambda: collections.Counter(tuple(line.split(":", 1)) for line in (
        log.read_text().split() if log.exists() else []))
  return watch


@pytest.mark.parametrize("built", ["array_record"], indirect=True)
def test_grain_worker_processes_each_read_their_own_shards_once_an_epoch_per_machine(
    built, tmp_path, process_bucket_reads):
  # Each of Grain's worker processes reads its own shards (the sampler deals them): under a
  # limit that holds each worker's window and the next (2 workers x 2 of the largest
  # shard, a third of the version), each shard is downloaded at most once an epoch on the
  # machine, whatever the number of workers.
  from imagesets.reading import grain_pipeline
  url = published_to(built, "file", tmp_path)
  downloads = process_bucket_reads(url)
  kwargs = dict(data_dir=url, batch_size=8, image_size=32, cache_dir=tmp_path / "c",
                cache_limit=2 * 2 * max(train_bytes(built)))
  labels = [int(label) for batch in grain_pipeline.classification_train(
      SPEC, seed=0, num_epochs=2, worker_count=2, **kwargs) for label in batch["label"]]
  assert len(labels) >= 2 * 160 - 2 * 7   # (each worker drops its last partial batch)
  opened = downloads()  # (counted in the workers)
  by_shard = collections.Counter()
  for (_, shard), count in opened.items():
    by_shard[shard] += count
  assert len(by_shard) == NUM_SHARDS and max(by_shard.values()) <= 2, opened
  assert len({pid for pid, _ in opened}) == 2
  with pytest.raises(ValueError, match=r"smaller than what 8 readers \(Grain's worker processes\)"
                     ) as error:
    grain_pipeline.classification_train(SPEC, seed=0, worker_count=8, **kwargs)
  assert "\n" not in str(error.value)


def _record_ids(loader, iterator=None, batches=None):
  """The records of `batches` batches (all: None) of a loader of `RecordIds`."""
  iterator = iterator or iter(loader)
  out = []
  for batch in iterator:
    out += batch["id"].tolist()
    if batches is not None and len(out) >= batches * 4:
      break
  return out, iterator


@pytest.mark.parametrize("built", ["array_record"], indirect=True)
def test_a_grain_position_resumes_on_another_worker_count_reading_the_rest_once(
    built, tmp_path, process_bucket_reads):
  # 4 workers stopped mid-epoch, resumed on 2, stopped again, resumed on 3: every record
  # of the two epochs exactly once, and the resumed jobs download no shard read whole.
  from imagesets.reading import grain_pipeline
  from imagesets_testing import record_ids
  url = published_to(built, "file", tmp_path)
  ids = {record_ids.record_id(r) for r in raw_records(built, "train")}
  kwargs = dict(batch_size=4, train=True, seed=5, num_epochs=2, drop_remainder=False,
                shard_index=0, shard_count=1, cache_dir=tmp_path / "c")

  def loader(workers, start=None):
    return grain_pipeline._loader(SPEC, "train", url, record_ids.RecordIds(), worker_count=workers,
                                  start=start, **kwargs)
  first = loader(4)
  read, iterator = _record_ids(first, batches=30)
  position = grain_pipeline.position(first, iterator.get_state())
  position = json.loads(json.dumps(position))   # saved with a checkpoint, loaded
  second = loader(2, position)
  more, iterator = _record_ids(second, batches=40)
  position = grain_pipeline.position(second, iterator.get_state())
  downloads = process_bucket_reads(url)
  kwargs["cache_dir"] = tmp_path / "fresh"   # (the resumed job's downloads, counted)
  third = loader(3, position)
  rest, _ = _record_ids(third)
  everything = collections.Counter(read + more + rest)
  assert set(everything) == ids and set(everything.values()) == {2}, everything
  assert len(read) >= 30 * 4 and len(more) >= 40 * 4
  run = third.read_by._source.run  # pylint: disable=protected-access
  needed = {run.order.shards[s].name for q in range(run.num_passes) for r in range(3)
            for s in run.reader_pass(q, r).rows[:, 0].tolist()}
  by_shard = collections.Counter()
  for (_, shard), count in downloads().items():
    by_shard[shard] += count
  assert set(by_shard) == needed and set(by_shard.values()) == {1}   # what it reads, once


@pytest.mark.parametrize("built", ["array_record"], indirect=True)
def test_a_source_read_is_planned_only_for_the_key_its_sampler_announced(built, tmp_path):
  from imagesets.reading import grain_pipeline
  url = published_to(built, "file", tmp_path)
  records = raw_records(built, "train")
  source = grain_pipeline.RecordSource(url, SPEC, "train", shuffle=True, seed=1, num_epochs=1,
                                       cache_dir=tmp_path / "c")
  assert len(source) == 160   # finite: the split's records (the sampler owns epochs)
  sampler = grain_pipeline.OrderSampler(source, 0, 1)
  planned = sampler[3]
  assert source[planned.record_key] == records[planned.record_key]
  other = sampler[5]   # announced, then a read of another key (a notebook's source[i])
  key = (other.record_key + 1) % len(source)
  assert source[key] == records[key]
  assert source[other.record_key] == records[other.record_key]
  # A loader's state names its start: a state of one resumed job is refused by another.
  position = source.run.position([(0, 3)]).to_json()
  assert repr(grain_pipeline.RecordSource(url, SPEC, "train", shuffle=True, seed=1,
                                          num_epochs=1, cache_dir=tmp_path / "c",
                                          start=position)) != repr(source)


def raw_records(data_dir, split):
  source = tfds.data_source(SPEC, split=split, data_dir=data_dir,
                            deserialize_method=tfds.decode.DeserializeMethod.RAW_BYTES)
  return [source[i] for i in range(len(source))]


def test_a_split_each_worker_batches_too_little_of_is_one_line_and_an_int_seed_is_asked(
    classes, tmp_path_factory):
  """Each Grain worker batches its own records: 24 examples read by 2 workers are 12 each,
  so batches of 16 would give nothing at all (TFRecord builds: their workers read whole
  shards, the same share here). A dataset's loader takes an int seed and a positive
  number of epochs."""
  tfrecord = _prepared(type(classes), tmp_path_factory, "tfrecord")
  for build in (classes, tfrecord):
    with pytest.raises(ValueError, match=r"^split 'train' has 24 examples \(at most 12 for "
                       r"each of 2 workers\), fewer than batch_size=16: .* give batch_size=12 "
                       r"or less"):
      gp.classification_train(build, batch_size=16, num_epochs=1, worker_count=2)
    assert len(list(gp.classification_train(build, batch_size=16, num_epochs=1))) == 1
    batches = list(gp.classification_train(build, batch_size=12, num_epochs=1, worker_count=2))
    assert [len(b["label"]) for b in batches] == [12, 12]
    with pytest.raises(ValueError, match=r"^seed=None: give an int seed"):
      gp.classification_train(build, batch_size=4, seed=None, num_epochs=1)
    labels = [[b["label"].tolist() for b in gp.classification_train(
        build, batch_size=4, seed=seed, num_epochs=1)] for seed in (3, np.int64(3))]
    assert labels[0] == labels[1] and len(labels[0]) == 6   # (numpy's ints are seeds)
    for epochs in (0, -1, 1.5):
      with pytest.raises(ValueError, match=rf"^num_epochs={epochs}: give a positive number"):
        gp.classification_train(build, batch_size=4, num_epochs=epochs)
  mix = mixing.mix([mixing.Part(f"{tfrecord.name}:{tfrecord.version}",
                                data_dir=str(pathlib.Path(tfrecord.data_dir).parents[1]))])
  labels = [[b["label"].tolist() for b in gp.classification_train(
      mix, batch_size=4, seed=seed, num_epochs=1)] for seed in (3, np.int64(3))]
  assert labels[0] == labels[1] and len(labels[0]) == 6   # (a mix's too)


@pytest.mark.parametrize("built", ["tfrecord", "array_record"], indirect=True)
def test_every_process_of_a_job_gives_a_batch_or_every_one_is_refused(built):
  """160 examples in 16 shards over 3 processes: a TFRecord build's processes read every
  third shard file (60, 50, 50), an ArrayRecord build's their parts (54, 53, 53). Batches
  of 52 (54) came from the first process only, unrefused (the even share, 54, passed):
  each process now refuses, naming a short one; one batch less comes from every one."""
  tfrecord = "tfrecord" in str(built)
  short, how = (50, "every shard_count-th shard file") if tfrecord else (53, "its own part")
  batch = short + (2 if tfrecord else 1)
  for process in range(3):
    common = dict(data_dir=built, num_epochs=1, seed=0, image_size=8, shard_index=process,
                  shard_count=3)
    with pytest.raises(ValueError) as refused:
      gp.classification_train(SPEC, batch_size=batch, **common)
    assert str(refused.value) == (
        f"process shard_index=1 of shard_count=3: its workers read at most {short} each of "
        f"split 'train' (each process reads {how}), fewer than batch_size={batch}: with "
        f"drop_remainder=True it would give not one batch; give batch_size={short} or less, "
        "or read it with fewer processes (or drop_remainder=False)")
    batches = list(gp.classification_train(SPEC, batch_size=short, **common))
    assert [len(b["label"]) for b in batches] == [short]
