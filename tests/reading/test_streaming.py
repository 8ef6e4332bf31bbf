"""streaming: a split's records as tf.data, local or streamed from a bucket, and positions."""

import collections
import gc
import hashlib
import json
import subprocess
import sys
import weakref

import pytest
import tensorflow as tf

from bucket_reads import AUDIT
from imagesets.reading import input_pipeline
from imagesets.reading import sources
from imagesets.reading import streaming
from streamed_versions import (FOLDER, ONE_FORMAT, SPEC, local_examples, published_to,
                               streamed_examples, train_bytes)


@pytest.mark.parametrize("scheme", ["s3", "gs", "file"])
def test_streamed_examples_are_the_local_builds(scheme, built, bucket_servers, tmp_path):
  url = published_to(built, scheme, tmp_path)
  for split in ("train", "test"):
    local = local_examples(built, split)
    # In stored order without shuffling; a shuffled epoch is the same multiset.
    assert streamed_examples(url, split, tmp_path / "cache") == local
    shuffled = streamed_examples(url, split, tmp_path / "cache", shuffle=True, seed=3)
    assert shuffled != local and sorted(shuffled) == sorted(local)
  # Every worker's part together is the split, each example once.
  parts = [streamed_examples(url, "train", tmp_path / "cache", shuffle=True, seed=1,
                             input_context=tf.distribute.InputContext(3, i, 1))
           for i in range(3)]
  assert sorted(sum(parts, [])) == sorted(local_examples(built, "train"))


def test_a_tf_data_position_resumes_on_another_number_of_input_pipelines(built, tmp_path,
                                                                         bucket_reads):
  # 4 input pipelines stopped part-way through epoch 0, resumed on 2, stopped in epoch 1,
  # resumed on 3: every record of the two epochs exactly once; the resumed jobs download
  # nothing they do not read.
  url = published_to(built, "file", tmp_path)
  source = sources.open_source(SPEC, url, cache_dir=tmp_path / "c")

  def pipelines(count, start=None):
    return [streaming.records(source, "train", shuffle=True, seed=2, num_epochs=2,
                              start=start, input_context=tf.distribute.InputContext(count, i, 1),
                              with_position=True)
            for i in range(count)]

  def take(started, counts, read):
    taken = []
    for pipeline, count in zip(started, counts):
      got = [hashlib.sha256(r).hexdigest()
             for r in pipeline.dataset.take(count).as_numpy_iterator()]
      read += got
      taken.append(len(got))
    return taken
  read = []
  first = pipelines(4)
  position = streaming.position(first[0], take(first, [10, 3, 25, 0], read))
  position = json.loads(json.dumps(position.to_json()))  # saved with a checkpoint, loaded
  second = pipelines(2, position)
  taken = take(second, [100, 70], read)   # reader 0 into epoch 1
  position = streaming.position(second[0], taken).to_json()
  opened = bucket_reads(url)
  source = sources.open_source(SPEC, url, cache_dir=tmp_path / "fresh")  # (counted)
  rest = pipelines(3, position)
  take(rest, [10**6] * 3, read)
  everything = collections.Counter(read)
  assert len(everything) == 160 and set(everything.values()) == {2}
  run = rest[0].run
  needed = {run.order.shards[s].name for q in range(run.num_passes) for r in range(3)
            for s in run.reader_pass(q, r).rows[:, 0].tolist()}
  assert set(opened) == needed and set(opened.values()) == {1}   # what it reads, once


def test_a_mapped_pipelines_position_resumes_the_rest_and_a_dataset_has_none(built):
  source = sources.open_source(SPEC, built)

  def records(**more):
    return streaming.records(source, "train", shuffle=True, seed=2, **more)
  whole = [hashlib.sha256(r).hexdigest() for r in records().as_numpy_iterator()]
  pipeline = records(with_position=True)
  mapped = pipeline.dataset.map(lambda r: {"record": r})
  taken = [hashlib.sha256(e["record"]).hexdigest()
           for e in mapped.take(30).as_numpy_iterator()]
  position = streaming.position(pipeline, [30])
  assert position.to_json() == pipeline.position([30]).to_json()
  rest = [hashlib.sha256(r).hexdigest()
          for r in records(start=position).as_numpy_iterator()]
  assert sorted(taken + rest) == sorted(whole)   # the rest of the epoch, each record once
  for plain in (pipeline.dataset, mapped):
    with pytest.raises(ValueError, match="with_position=True"):
      streaming.position(plain, [30])


def test_a_pipelines_keep_alive_entry_goes_with_it_and_its_iterators(built):
  source = sources.open_source(SPEC, built)
  gc.collect()
  held = len(streaming._HELD)
  ds = streaming.records(source, "test", shuffle=True, seed=1)
  reads = weakref.ref(streaming._HELD[ds][0])
  iterator = iter(ds.map(tf.strings.length))
  next(iterator)
  del ds
  gc.collect()
  # The iterator holds its dataset, and so the reads.
  assert len(streaming._HELD) == held + 1 and reads() is not None
  assert sum(1 for _ in iterator) == 39
  del iterator
  gc.collect()
  assert len(streaming._HELD) == held and reads() is None


def test_training_pipelines_read_a_bucket_like_a_local_build(built, tmp_path):
  url = published_to(built, "file", tmp_path)
  kwargs = dict(batch_size=8, image_size=32)
  local = [b["label"].numpy().tolist() for b in input_pipeline.classification_eval(
      SPEC, data_dir=built, split="test", **kwargs)]
  streamed = [b["label"].numpy().tolist() for b in input_pipeline.classification_eval(
      SPEC, data_dir=url, split="test", cache_dir=tmp_path / "c", **kwargs)]
  assert streamed == local
  train = input_pipeline.classification_train(SPEC, data_dir=url, seed=0, num_epochs=2,
                                              cache_dir=tmp_path / "c", **kwargs)
  assert sum(b["label"].shape[0] for b in train) == 2 * 160
  with pytest.raises(ValueError, match="cache= keeps the split in memory"):
    input_pipeline.classification_train(SPEC, data_dir=url, seed=0, cache="encoded",
                                        cache_dir=tmp_path / "c", **kwargs)


RESUME = """
import json, sys
import tensorflow as tf
import tensorflow_datasets as tfds
import imagesets
%(audit)s
url, cache, mode, take = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
BucketReads.root = url[len("file://"):]
ds = imagesets.load("%(spec)s", "train", url, cache_dir=cache, shuffle=True, seed=5,
                    num_epochs=2, cache_limit=%(limit)d,
                    decoders={"image": tfds.decode.SkipDecoding()})
iterator = iter(ds)
state = tf.train.Checkpoint(iterator=iterator)
if mode != "start":
  state.read(mode).assert_consumed()
first = [next(iterator) for _ in range(take)]
path = state.write(cache + "-ckpt-" + mode.rsplit("-", 1)[-1] + "-" + str(take))
rest = [(e["image"].numpy().hex()[-40:], int(e["label"])) for e in iterator]
print(json.dumps({"rest": rest, "checkpoint": path, "opened": dict(BucketReads.opened)}))
"""


@ONE_FORMAT
def test_a_job_resumed_twice_reads_the_same_examples_and_downloads_only_what_it_reads(
    built, tmp_path):
  url = published_to(built, "file", tmp_path)
  limit = sum(train_bytes(built)) // 3
  script = RESUME % {"spec": SPEC, "limit": limit, "audit": AUDIT}
  # Which shard holds each example (the local build's shards, read one by one).
  shard_of = {}
  for path in (built / FOLDER).glob("*-train.*-of-*"):
    for record in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
      example = tf.train.Example.FromString(record).features.feature
      shard_of[(example["image"].bytes_list.value[0].hex()[-40:],
                example["label"].int64_list.value[0])] = path.name

  def run(cache, mode, take):
    result = subprocess.run([sys.executable, "-c", script, url, str(tmp_path / cache), mode,
                             str(take)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])

  uninterrupted = run("a", "start", 60)                   # mid-epoch 0
  assert len(uninterrupted["rest"]) == 2 * 160 - 60
  # Resumed on the same machine (a tf.data checkpoint names the cache's files; shards
  # evicted since are fetched again).
  # Checkpoints inside windows (shards hold 10 examples; a window whole shards): one
  # taken exactly at a window's end is restored by tf.data rebuilding that finished
  # window, whose shards are then pinned (and, if evicted, fetched) once more.
  once = run("a", uninterrupted["checkpoint"], 155)       # resumed: into epoch 1
  assert len(once["rest"]) == 2 * 160 - 215
  twice = run("a", once["checkpoint"], 20)                # resumed again
  expected = [tuple(e) for e in uninterrupted["rest"]]
  assert [tuple(e) for e in once["rest"]] == expected[155:]
  assert [tuple(e) for e in twice["rest"]] == expected[175:]
  # The twice-resumed job restored at example 55 of epoch 1: it downloaded only shards
  # holding examples it read (its first window's shards, then the ones after).
  read = {shard_of[tuple(e)] for e in expected[155:]}
  assert set(twice["opened"]) <= read, (set(twice["opened"]) - read)
  assert max(twice["opened"].values()) == 1


@ONE_FORMAT
def test_input_pipelines_of_a_bucket_read_are_refused_a_seed_each_draws_itself(built, tmp_path):
  """seed=None draws a fresh seed in each process: input pipelines of one job reading a
  bucket would each deal the shards in an order of their own, and read examples twice or
  never (measured: 160 examples read, other label counts than the split's). Refused, one
  line; one int seed for all deals each example once."""
  url = published_to(built, "file", tmp_path)
  common = dict(batch_size=8, image_size=16, data_dir=url, num_epochs=1,
                drop_remainder=False, cache_dir=str(tmp_path / "cache"))
  with pytest.raises(ValueError) as error:
    input_pipeline.classification_train(
        SPEC, seed=None, input_context=tf.distribute.InputContext(2, 0, 1), **common)
  assert str(error.value) == (
      "seed=None with 2 input pipelines reading a bucket: each would draw a seed of its own "
      "and deal the shards in its own order (examples read twice or never): give every "
      "input pipeline the same int seed")
  labels = collections.Counter()
  for i in range(2):
    for batch in input_pipeline.classification_train(
        SPEC, seed=5, input_context=tf.distribute.InputContext(2, i, 1), **common):
      labels.update(batch["label"].numpy().tolist())
  assert labels == collections.Counter(label for _, label in local_examples(built, "train"))
  # One pipeline draws its own seed, as a local read does: a fresh order each run.
  assert sum(len(batch["label"]) for batch in input_pipeline.classification_train(
      SPEC, seed=None, **common)) == 160
