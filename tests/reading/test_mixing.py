"""mixing (+ input_pipeline and grain_pipeline on a mix): folder datasets of real-photo crops
(TFRecord and ArrayRecord, local and in a bucket) read as one, by weight: every example
is a record of its part with the mix's label, proportions hold, labels are refused or
mapped in one line, positions resume exactly (same readers: the same examples; other
readers: every record of each part's epoch once), and bucket parts share one cache limit
with each shard downloaded once a pass (downloads counted at the bucket)."""

import collections
import hashlib
import threading

import numpy as np
import pytest
import tensorflow as tf

from imagesets.publishing import publish
from imagesets.reading import input_pipeline as ip
from imagesets.reading import mix_order
from imagesets.reading import mixed_records
from imagesets.reading import mixing
from imagesets.reading import order as order_lib
from imagesets.reading import split_runs
from imagesets_testing import photo_datasets


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  """pets (cat, dog: 60, TFRecord), boats (boat, ship: 40, ArrayRecord), more_pets (cat,
  dog: 30, TFRecord), 4 shards each."""
  data_dir = tmp_path_factory.mktemp("mix") / "tfds"
  photo_datasets.build(data_dir, "pets", ["cat", "dog"], 60, seed=1, size=(64, 48))
  photo_datasets.build(data_dir, "boats", ["boat", "ship"], 40, seed=2, size=(64, 48),
                       file_format="array_record")
  photo_datasets.build(data_dir, "more_pets", ["dog", "cat"], 30, seed=3, size=(64, 48))
  return data_dir


def records_of(data_dir, spec) -> dict[bytes, str]:
  """{image digest: class name} of every record of a part."""
  from imagesets.reading import sources
  import tensorflow_datasets as tfds
  source = sources.open_source(spec, str(data_dir))
  names = source.builder.info.features["label"].names
  out = {}
  for shard in split_runs.split_shards(source.builder, "train"):
    reader = mixing.shard_reads.open_records(source.folder / shard.name, source.file_format)
    for record in reader.read(range(shard.skip, shard.skip + shard.take)):
      example = tfds.core.example_parser.ExampleParser(
          source.builder.info.features.get_serialized_info()).parse_example(record)
      out[hashlib.sha256(example["image"].numpy()).digest()] = names[int(example["label"])]
    reader.close()
  return out


def raw(run, reader, count, start=0) -> list[tuple[int, bytes, int]]:
  """(part, image digest, label) of the reader's positions [start, start + count)."""
  out = []
  for e in mixed_records.records(run, reader).skip(start).take(count).as_numpy_iterator():
    out.append((int(e["source"]), hashlib.sha256(e["image"]).digest(), int(e["label"])))
  return out


def test_every_example_is_a_record_of_its_part_with_the_mix_label(data_dir):
  mix = mixing.mix([mixing.Part("pets:1.0.0", str(data_dir), weight=1),
                    mixing.Part("boats:1.0.0", str(data_dir), weight=2)], labels="union")
  assert mix.classes == ("boat", "cat", "dog", "ship")
  assert mix.label_ids == ((1, 2), (0, 3))   # pets: cat, dog; boats: boat, ship
  # The fingerprint positions are saved under, as earlier releases made it: they resume.
  assert mix.fingerprint == "32a293cc6f1b8b47"
  truth = [records_of(data_dir, "pets:1.0.0"), records_of(data_dir, "boats:1.0.0")]
  seen = raw(mix.run(), 0, 150)
  for part, image, label in seen:
    assert mix.classes[label] == truth[part][image]
  # A mixed epoch is the parts' 100 records, 1:2: exactly 33 and 67 of them.
  assert mix.per_epoch == (33, 67) and mix.examples_per_epoch == 100
  assert collections.Counter(part for part, _, _ in seen[:100]) == {0: 33, 1: 67}
  # Each part is read in its own epochs: boats (40) twice and more, each record once an epoch.
  boats = [image for part, image, _ in seen if part == 1]
  assert sorted(boats[:40]) == sorted(truth[1]) == sorted(boats[40:80])


def test_different_classes_are_refused_in_one_line_unless_the_call_says_how(data_dir):
  parts = [mixing.Part("pets:1.0.0", str(data_dir)), mixing.Part("boats:1.0.0", str(data_dir))]
  with pytest.raises(ValueError) as error:
    mixing.mix(parts)
  message = str(error.value)
  assert "\n" not in message and "pets:1.0.0[train] has 2 (cat, dog)" in message
  assert "boats:1.0.0[train] has 2 (boat, ship)" in message and "labels='union'" in message
  # Same class names (in another folder order) mix as they are: by name.
  same = mixing.mix([mixing.Part("pets:1.0.0", str(data_dir)),
                     mixing.Part("more_pets:1.0.0", str(data_dir))])
  assert same.classes == ("cat", "dog") and same.label_ids == ((0, 1), (0, 1))
  # A per-part map: boats become "vehicle", pets "animal".
  mapped = mixing.mix([
      mixing.Part("pets:1.0.0", str(data_dir), label_map={"cat": "animal", "dog": "animal"}),
      mixing.Part("boats:1.0.0", str(data_dir), label_map={"boat": "vehicle", "ship": "vehicle"})],
      labels="union")
  assert mapped.classes == ("animal", "vehicle") and mapped.label_ids == ((0, 0), (1, 1))
  with pytest.raises(ValueError, match="label_map names 'horse', which is not one of its"):
    mixing.mix([mixing.Part("pets:1.0.0", str(data_dir), label_map={"horse": "x"})])


def test_shares_by_weight_repeat_or_choose_and_refusals(data_dir):
  d = str(data_dir)
  by_repeat = mixing.mix([mixing.Part("pets:1.0.0", d), mixing.Part("more_pets:1.0.0", d,
                                                                    repeat=2)])
  assert by_repeat.per_epoch == (60, 60) and by_repeat.examples_per_epoch == 120
  chosen = mixing.mix([mixing.Part("pets:1.0.0", d, choose=10),
                       mixing.Part("more_pets:1.0.0", d, repeat=0.5)])
  assert chosen.per_epoch == (10, 15) and chosen.proportions == (0.4, 0.6)
  seen = raw(chosen.run(), 0, 25)
  assert collections.Counter(part for part, _, _ in seen) == {0: 10, 1: 15}
  for parts, match in (
      ([mixing.Part("pets:1.0.0", d, weight=1, repeat=2)], "give one of weight, repeat"),
      ([mixing.Part("pets:1.0.0", d, weight=1), mixing.Part("more_pets:1.0.0", d)],
       "give every part a weight"),
      ([mixing.Part("pets:1.0.0", d, choose=0)], "choose a positive whole number"),
      ([mixing.Part("pets:1.0.0", d, weight=-1)], "a weight is a positive number")):
    with pytest.raises(ValueError, match=match):
      mixing.mix(parts)
  with pytest.raises(ValueError, match="cache_limit='1GB'.*only a bucket read has a cache"):
    mixing.mix([mixing.Part("pets:1.0.0", d)], cache_limit="1GB")


def test_the_training_pipeline_of_a_mix_resumes_record_for_record(data_dir):
  mix = mixing.mix([mixing.Part("pets:1.0.0", str(data_dir), weight=1),
                    mixing.Part("boats:1.0.0", str(data_dir), weight=2)], labels="union")
  common = dict(batch_size=4, image_size=24, seed=7)
  train = ip.classification_train(mix, with_position=True, **common)
  batches = list(train.dataset.take(9).as_numpy_iterator())
  assert batches[0]["image"].shape == (4, 24, 24, 3) and set(batches[0]) == {
      "image", "label", "source"}
  start = mixing.position(train, [5 * 4])
  resumed = list(ip.classification_train(mix, start=start, **common).take(4).as_numpy_iterator())
  assert len(resumed) == 4
  for want, got in zip(batches[5:], resumed):
    for key in want:
      np.testing.assert_array_equal(want[key], got[key])
  # A position of another mix, or a damaged one, is refused.
  other = mixing.mix([mixing.Part("pets:1.0.0", str(data_dir), weight=2),
                      mixing.Part("boats:1.0.0", str(data_dir), weight=2)], labels="union")
  with pytest.raises(mix_order.MixedPositionError, match="another mix"):
    ip.classification_train(other, start=start, **common)
  with pytest.raises(ValueError, match="start= resumes a mixed pipeline"):
    ip.classification_train("pets:1.0.0", data_dir=str(data_dir), start=start, **common)
  with pytest.raises(ValueError, match="shuffle_buffer=64 with a mix"):
    ip.classification_train(mix, shuffle_buffer=64, **common)


def test_a_mapped_pipeline_keeps_its_position_and_resumes_to_the_end_of_the_epoch(data_dir):
  mix = mixing.mix([mixing.Part("pets:1.0.0", str(data_dir), weight=1),
                    mixing.Part("boats:1.0.0", str(data_dir), weight=2)], labels="union")
  common = dict(batch_size=10, image_size=8, seed=3, num_epochs=1)

  def mapped(ds):
    return ds.map(lambda b: (b["image"], b["label"], b["source"])).as_numpy_iterator()
  whole = list(mapped(ip.classification_train(mix, **common)))
  assert len(whole) == mix.examples_per_epoch // 10
  pipeline = ip.classification_train(mix, with_position=True, **common)
  assert isinstance(pipeline, mixing.Pipeline) and pipeline.batch_size == 10
  batches = mapped(pipeline.dataset)
  taken = [next(batches) for _ in range(4)]
  start = mixing.position(pipeline, [4 * 10])
  assert start == pipeline.position([4 * 10])
  rest = list(mapped(ip.classification_train(mix, start=start, **common)))
  assert len(taken) + len(rest) == len(whole)
  for want, got in zip(whole, taken + rest):
    for a, b in zip(want, got):
      np.testing.assert_array_equal(a, b)
  # A dataset, the pipeline's own or mapped, has no position; one dataset has none either.
  for plain in (pipeline.dataset, pipeline.dataset.map(lambda b: b)):
    with pytest.raises(ValueError, match="with_position=True"):
      mixing.position(plain, [4 * 10])
  with pytest.raises(ValueError, match="with_position=True.*a mix of one part"):
    ip.classification_train("pets:1.0.0", data_dir=str(data_dir), with_position=True,
                            **common)


def part_epoch_zero(run, reads_by_reader) -> dict[int, list[bytes]]:
  """Per part, the records the readers read in their first pass of it (its epoch's
  leftovers for a resumed run)."""
  out = collections.defaultdict(list)
  for reader, reads in enumerate(reads_by_reader):
    for k, part_run in enumerate(run.runs):
      first = len(part_run.reader_pass(0, reader))
      mine = [image for part, image, _ in reads if part == k]
      assert len(mine) >= first   # (the test reads past every first pass)
      out[k] += mine[:first]
  return out


def test_a_position_resumes_on_another_number_of_readers_each_part_record_once(data_dir):
  # 2 input pipelines read a little, stop; 3 resume: of each part, the records read before
  # and the resumed readers' first pass (the epoch's leftovers) are the part, each once.
  mix = mixing.mix([mixing.Part("pets:1.0.0", str(data_dir), weight=1),
                    mixing.Part("boats:1.0.0", str(data_dir), weight=1),
                    mixing.Part("more_pets:1.0.0", str(data_dir), weight=1)], labels="union")
  before = mix.run(2)
  taken = [7, 11]
  first = [raw(before, r, n) for r, n in enumerate(taken)]
  # The training pipelines of two input pipelines read what the readers read.
  for r in range(2):
    pipeline = ip.classification_train(mix, batch_size=1, image_size=8,
                                       input_context=tf.distribute.InputContext(2, r, 1))
    got = [(int(b["source"][0]), int(b["label"][0]))
           for b in pipeline.take(taken[r]).as_numpy_iterator()]
    assert got == [(part, label) for part, _, label in first[r]]
  after = mix.run(3, start=before.position(taken).to_json())
  assert after.offsets == [0, 0, 0]
  assert after.first_index == before.position(taken).next_index()
  second = [raw(after, r, 90) for r in range(3)]
  leftovers = part_epoch_zero(after, second)
  for k, spec in enumerate(("pets:1.0.0", "boats:1.0.0", "more_pets:1.0.0")):
    read_before = [image for reads in first for part, image, _ in reads if part == k]
    assert sorted(read_before + leftovers[k]) == sorted(records_of(data_dir, spec))
  # The same readers resume record for record.
  again = mix.run(2, start=before.position(taken).to_json())
  assert [raw(again, r, 5) for r in range(2)] == [raw(before, r, 5, start=n)
                                                   for r, n in enumerate(taken)]
  # Every example of the job has its own count (its augmentation's seed), across resumes.
  counts = [int(before.global_index(r, j)) for r, n in enumerate(taken) for j in range(n)]
  counts += [int(after.global_index(r, j)) for r in range(3) for j in range(90)]
  assert len(set(counts)) == len(counts)


def test_a_forged_position_is_refused_in_one_line_not_read_forever(data_dir):
  mix = mixing.mix([mixing.Part("pets:1.0.0", str(data_dir)),
                    mixing.Part("more_pets:1.0.0", str(data_dir))])
  saved = mix.run(2).position([3, 4]).to_json()
  # More readers than a part has shards (each part has 4): one would read nothing, ever.
  with pytest.raises(order_lib.PositionError, match="reads no shard"):
    mix.run(2, start={**saved, "readers": 5, "at": [0, 0, 0, 0, 7]})
  # A position millions of epochs into a part: refused before any work.
  with pytest.raises(mix_order.MixedPositionError, match="mixed epochs into its run"):
    mix.run(1, start={**saved, "at": [2**39, 0]})


def test_grain_reads_a_mix_and_resumes_on_another_worker_count(data_dir):
  from imagesets.reading import grain_pipeline as gp
  mix = mixing.mix([mixing.Part("pets:1.0.0", str(data_dir), weight=1),
                    mixing.Part("boats:1.0.0", str(data_dir), weight=2)], labels="union")
  common = dict(batch_size=4, image_size=24)
  iterator = iter(gp.classification_train(mix, **common))
  batches = [next(iterator) for _ in range(6)]
  sources = np.concatenate([b["source"] for b in batches]).tolist()
  assert sources == [part for part, _, _ in raw(mix.run(), 0, 24)]
  labels = np.concatenate([b["label"] for b in batches]).tolist()
  assert labels == [label for _, _, label in raw(mix.run(), 0, 24)]
  # Grain's own state resumes exactly; the position resumes on two worker processes.
  iterator = iter(gp.classification_train(mix, **common))
  for _ in range(3):
    next(iterator)
  state = iterator.get_state()
  restored = iter(gp.classification_train(mix, **common))
  restored.set_state(state)
  np.testing.assert_array_equal(next(restored)["image"], batches[3]["image"])
  loader = gp.classification_train(mix, **common)
  start = gp.position(loader, state)
  assert start == mix.run().position([12]).to_json()
  two = gp.classification_train(mix, worker_count=2, start=start, **common)
  run = mix.run(2, start=start)
  two_batches = iter(two)
  for reader in range(2):   # (each Grain worker batches its own reader's examples)
    got = next(two_batches)
    assert [got["source"].tolist(), got["label"].tolist()] == [
        [part for part, _, _ in raw(run, reader, 4)], [label for _, _, label in raw(run, reader, 4)]]


def cached_bytes(cache_dir) -> int:
  total = 0
  for path in cache_dir.rglob("shards/*"):
    try:
      total += path.stat().st_size if path.is_file() else 0
    except FileNotFoundError:   # (renamed or evicted while we looked)
      pass
  return total


def test_bucket_parts_share_one_cache_limit_each_shard_downloaded_once_a_pass(
    data_dir, tmp_path, bucket_reads):
  url, local = f"file://{tmp_path}/bucket", tmp_path / "tfds"
  # Three parts of 40 photos in 4 shards each, shards of about one size.
  specs = tuple(photo_datasets.build(local, name, ["a", "b"], 40, seed=seed, size=(64, 48))
                for seed, name in enumerate(("north", "south", "east")))
  for spec in specs:
    publish.publish(spec, str(local), url, progress=False)
  parts = [mixing.Part(spec, url) for spec in specs]   # each part's records once an epoch
  probe = mixing.mix(parts, cache_dir=tmp_path / "c")
  largest = max(s.largest_shard for s in probe.sources)
  shards = sum(len(s.shards) for s in probe.sources)
  limit = 6 * largest   # a window of one shard of each part, and the next: not all 12
  assert shards == 12 and sum(sum(s.size for s in src.shards.values())
                              for src in probe.sources) > limit
  mix = mixing.mix(parts, cache_dir=tmp_path / "c2", cache_limit=limit)
  run = mix.run(num_epochs=1)   # (an endless run's batched reads go on into the next pass)
  assert run.windows == (1, 1, 1)
  opened = bucket_reads(url)   # (downloads counted at the bucket: `bucket_reads`)
  peak, reading = [0], threading.Event()

  def watch():   # the cache's bytes on disk while it is read (downloads at their size)
    while not reading.is_set():
      peak[0] = max(peak[0], cached_bytes(tmp_path / "c2"))
  watcher = threading.Thread(target=watch)
  watcher.start()
  try:
    seen = raw(run, 0, mix.examples_per_epoch)   # one epoch: each part's records once
  finally:
    reading.set()
    watcher.join()
  assert 0 < peak[0] <= limit
  assert collections.Counter(part for part, _, _ in seen) == {0: 40, 1: 40, 2: 40}
  for k, spec in enumerate(specs):
    assert sorted(image for part, image, _ in seen if part == k) == sorted(
        records_of(local, spec))
  downloaded = {name: n for name, n in opened.items() if "train" in name}
  assert len(downloaded) == 12 and set(downloaded.values()) == {1}, downloaded
  with pytest.raises(ValueError, match="is smaller than"):
    mixing.mix(parts, cache_dir=tmp_path / "c3", cache_limit=2 * largest).run()


def epochs_of(run, reader, start, count) -> list[int]:
  """The mixed epoch of each of the reader's positions [start, start + count)."""
  return [run.order.epoch(run.order.place(reader, j)[0]) for j in range(start, start + count)]


def test_every_mixed_epoch_reads_each_parts_count_on_any_readers_and_resumes(data_dir):
  # Random shares of the three parts (60, 40 and 30 real-photo crops in 4 shards each), 1 to
  # 4 input pipelines, 1 to 3 epochs, stopped at a random point and resumed on another
  # count: each mixed epoch holds exactly each part's count, every record of a part once a
  # part epoch (its images), read through the tf.data records of every reader to the end.
  specs = ("pets:1.0.0", "boats:1.0.0", "more_pets:1.0.0")
  truth = [records_of(data_dir, spec) for spec in specs]
  rng = np.random.default_rng(5)
  for case in range(4):
    shares = [dict(repeat=1), dict(choose=int(rng.integers(1, 70))),
              dict(repeat=float(rng.choice([0.5, 1.5, 2])))]
    if case % 2:
      shares = [dict(weight=float(w)) for w in rng.uniform(0.5, 3, 3)]
    mix = mixing.mix([mixing.Part(spec, str(data_dir), **share)
                      for spec, share in zip(specs, shares)], labels="union")
    readers, then = rng.choice(np.arange(1, 5), 2, replace=False).tolist()
    num_epochs = int(rng.integers(1, 4))
    first = mix.run(readers, num_epochs=num_epochs)
    taken = [int(rng.integers(0, first.length(r) + 1)) for r in range(readers)]
    reads = collections.defaultdict(list)   # (epoch, part): image digests
    for r, count in enumerate(taken):
      for (part, image, _), epoch in zip(raw(first, r, count), epochs_of(first, r, 0, count)):
        reads[(epoch, part)].append(image)
    second = mix.run(then, num_epochs=num_epochs, start=first.position(taken).to_json())
    for r in range(then):
      count = second.length(r)
      for (part, image, _), epoch in zip(raw(second, r, count), epochs_of(second, r, 0, count)):
        reads[(epoch, part)].append(image)
      assert len(raw(second, r, count + 5)) == count   # (the run ends there)
    assert {epoch for epoch, _ in reads} == set(range(num_epochs))
    for k, count in enumerate(mix.per_epoch):
      size, seen = len(truth[k]), collections.Counter()
      for epoch in range(num_epochs):
        assert len(reads[(epoch, k)]) == count, (case, epoch, k)
        seen.update(reads[(epoch, k)])
        stream = (epoch + 1) * count
        assert set(seen) <= set(truth[k]) and len(seen) == min(size, stream)
        assert set(seen.values()) <= {stream // size, -(-stream // size)}


def test_a_grain_padding_slot_reads_nothing(data_dir, monkeypatch):
  # Two readers of unequal lengths: the shorter one's last slot is padding. Grain reads a
  # slot's key modulo the source's length; the padding key must stay a padding key there
  # and cost no read (a key of -1 became the last key and placed a reader 2**61 records on).
  from imagesets.reading import grain_pipeline as gp
  import grain.python as grain
  mix = mixing.mix([mixing.Part("pets:1.0.0", str(data_dir)),
                    mixing.Part("boats:1.0.0", str(data_dir), choose=39)], labels="union")
  source = gp.MixedSource(mix, 2, num_epochs=1)
  sampler = gp.MixedSampler(source, 2, 0, 0)
  lengths = [source.run.length(r) for r in range(2)]
  assert sum(lengths) == 99 and lengths[0] != lengths[1]
  looked_up = collections.Counter()
  pass_length = order_lib.Run.pass_length

  def counted(self, q, reader):
    looked_up["passes"] += 1
    assert looked_up["passes"] < 1000, "a position far past the run's end was placed"
    return pass_length(self, q, reader)
  monkeypatch.setattr(order_lib.Run, "pass_length", counted)
  read_one = source.run.read_one
  reads = collections.Counter()

  def counted_read(reader, j):
    reads[reader] += 1
    return read_one(reader, j)
  monkeypatch.setattr(source.run, "read_one", counted_read)
  wrapped = grain.MapDataset.source(source)   # (as Grain's DataLoader reads the source)
  got = [wrapped[sampler[i].record_key] for i in range(len(sampler))]
  assert len(got) == 2 * max(lengths) and got.count(None) == 2 * max(lengths) - 99
  assert reads == {0: lengths[0], 1: lengths[1]}
  with pytest.raises(IndexError):
    sampler[len(sampler)]
  # A position at the end of 2 epochs continued with num_epochs=1: nothing left to read.
  two = mix.run(2, num_epochs=2)
  done = two.position([two.length(0), two.length(1)]).to_json()
  ended = gp.MixedSource(mix, 2, num_epochs=1, start=done)
  assert len(gp.MixedSampler(ended, 2, 0, 0)) == 0


def test_a_grain_mix_read_by_two_worker_processes_ends_with_each_record_once(data_dir):
  # Real worker processes, parts of unequal sizes, one epoch of repeat=1 parts, the last
  # batch partial: the loader ends, with each part's records once (their labels).
  from imagesets.reading import grain_pipeline as gp
  mix = mixing.mix([mixing.Part("pets:1.0.0", str(data_dir)),
                    mixing.Part("boats:1.0.0", str(data_dir)),
                    mixing.Part("more_pets:1.0.0", str(data_dir))], labels="union")
  loader = gp.classification_train(mix, batch_size=7, image_size=8, worker_count=2,
                                   num_epochs=1, drop_remainder=False)
  batches = list(loader)
  sources = np.concatenate([b["source"] for b in batches]).tolist()
  labels = np.concatenate([b["label"] for b in batches]).tolist()
  assert collections.Counter(sources) == {0: 60, 1: 40, 2: 30}
  for k, spec in enumerate(("pets:1.0.0", "boats:1.0.0", "more_pets:1.0.0")):
    want = collections.Counter(mix.classes.index(name)
                               for name in records_of(data_dir, spec).values())
    assert collections.Counter(l for s, l in zip(sources, labels) if s == k) == want


def test_input_pipelines_of_a_mix_each_give_a_batch_or_every_one_is_refused(data_dir):
  """An epoch of 10 examples of a part of 4 shards, read by 3 input pipelines, each its
  own shards: they read 5, 3 and 2. Batches of 3 would come from the first two only (the
  even share, 4, passed): each pipeline refuses, naming the short one; batches of 2 come
  from every pipeline."""
  mix = mixing.mix([mixing.Part("pets:1.0.0", str(data_dir), choose=10)])
  for pipeline in range(3):
    context = tf.distribute.InputContext(3, pipeline, 1)
    with pytest.raises(ValueError) as refused:
      ip.classification_train(mix, batch_size=3, image_size=8, num_epochs=1,
                              input_context=context)
    assert str(refused.value) == (
        "input pipeline 2 of 3 reads 2 of the mix's run (the pipelines read 2 to 5: each "
        "reads its own shards of each part), fewer than batch_size=3: with "
        "drop_remainder=True it would give not one batch; give batch_size=2 or less, or read it "
        "with fewer input pipelines (or drop_remainder=False)")
    batches = list(ip.classification_train(mix, batch_size=2, image_size=8, num_epochs=1,
                                           input_context=context))
    assert len(batches) == [2, 1, 1][pipeline]
    assert all(len(batch["label"]) == 2 for batch in batches)
  # A job resumed at its end: nothing left to read, nothing refused.
  run = mix.run(3, num_epochs=1)
  end = run.position([run.length(r) for r in range(3)]).to_json()
  for pipeline in range(3):
    assert not list(ip.classification_train(
        mix, batch_size=2, image_size=8, num_epochs=1, start=end,
        input_context=tf.distribute.InputContext(3, pipeline, 1)))


def test_grain_processes_of_a_mix_each_give_a_batch_or_every_one_is_refused(data_dir):
  """The same epoch read by 3 Grain processes of one worker each: 5, 3 and 2 examples.
  Batches of 3 came from two processes only: each refuses, naming the short one."""
  from imagesets.reading import grain_pipeline as gp
  mix = mixing.mix([mixing.Part("pets:1.0.0", str(data_dir), choose=10)])
  for process in range(3):
    common = dict(image_size=8, num_epochs=1, shard_index=process, shard_count=3)
    with pytest.raises(ValueError) as refused:
      gp.classification_train(mix, batch_size=3, **common)
    assert str(refused.value) == (
        "process shard_index=2 of shard_count=3: its workers read at most 2 each of the "
        "mix's run (each worker reads its own shards of each part), fewer than batch_size=3: "
        "with drop_remainder=True it would give not one batch; give batch_size=2 or less, or "
        "read it with fewer processes (or drop_remainder=False)")
    assert [len(b["label"]) for b in gp.classification_train(mix, batch_size=2, **common)
            ] == [2] * [2, 1, 1][process]
