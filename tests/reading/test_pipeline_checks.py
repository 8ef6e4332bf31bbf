"""pipeline_checks: the pipelines' refusals, each one line, and only of what gives nothing."""

import pytest

from imagesets.reading import pipeline_checks as checks


@pytest.mark.parametrize("examples, workers, batch, refused", [
    (24, 5, 5, False),   # (records dealt in turn: the first four workers get 5)
    (24, 5, 6, True), (24, 2, 12, False), (24, 2, 13, True), (5, 8, 1, False),
    (4, 8, 1, False), (0, 1, 1, True)])
def test_a_pipeline_is_refused_only_when_no_worker_gets_a_batch(examples, workers, batch,
                                                                refused):
  call = lambda: checks.check_batches(examples, "train", batch, 1, True, workers)
  if refused:
    with pytest.raises(ValueError, match="not one batch would come out"):
      call()
  else:
    call()
  checks.check_batches(examples, "train", batch, 1, False, workers)  # (the last batch kept)
  checks.check_batches(examples, "train", batch, None, True, workers)  # (forever)


def test_epochs_are_one_run_dealt_to_the_workers():
  """Grain's sampler runs the epochs as one sequence dealt in turn: 5 records twice to 4
  workers give 3, 3, 2, 2 (not 2 an epoch, 4 in all), so batches of 4 give nothing."""
  with pytest.raises(ValueError, match=r"has 5 examples times num_epochs=2 \(at most 3 for "
                     r"each of 4 workers\), .* give batch_size=3 or less"):
    checks.check_batches(5, "train", 4, 2, True, 4)
  checks.check_batches(5, "train", 3, 2, True, 4)


def _read_by(source, split, pipelines, *, shuffle, seed, num_epochs):
  """The records each of `pipelines` input pipelines reads, counted by reading them."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from imagesets.reading import input_pipeline  # pylint: disable=import-outside-toplevel
  counts = []
  for pipeline in range(pipelines):
    context = tf.distribute.InputContext(pipelines, pipeline, 1)
    ds = input_pipeline.read(source, split, keys=["label"], encoded_keys=[], shuffle=shuffle,
                             seed=seed, input_context=context, num_epochs=num_epochs)
    # (a local build's read is one epoch: the pipeline repeats it)
    counts.append(sum(1 for _ in ds) * (1 if source.streamed else num_epochs))
  return counts


@pytest.mark.parametrize("streamed", [False, True])
def test_the_shares_are_what_each_input_pipeline_reads(built, streamed, tmp_path):
  """16 shards of 10 (and a slice ending inside one) over 3 pipelines, two epochs: each
  read path's dealing (a bucket's shards dealt anew each epoch, a local build's files or
  records dealt once) is what the pipelines read, to the record."""
  from imagesets.reading import sources  # pylint: disable=import-outside-toplevel
  from streamed_versions import SPEC, published_to  # pylint: disable=import-outside-toplevel
  source = (sources.open_source(SPEC, published_to(built, "file", tmp_path),
                                cache_dir=tmp_path / "cache") if streamed
            else sources.open_source(SPEC, str(built)))
  for split, shuffle, seed, epochs in (("train", True, 3, 2), ("train[:45%]", True, 0, 2),
                                       ("test", False, None, 1)):
    shares = checks.pipeline_shares(source, split, 3, epochs, shuffle, seed)
    assert shares == _read_by(source, split, 3, shuffle=shuffle, seed=seed, num_epochs=epochs)
    assert sum(shares) == source.builder.info.splits[split].num_examples * epochs


@pytest.mark.parametrize("built", ["tfrecord"], indirect=True)
def test_every_input_pipeline_gives_a_batch_or_every_one_is_refused(built):
  """160 examples in 16 files over 3 pipelines: they read 60, 50 and 50. Batches of 52
  would come from the first pipeline only (the others gave none, unrefused, while the
  even share, 54, passed): each pipeline now refuses, naming the short one; batches of 50
  come from every pipeline."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from imagesets.reading import input_pipeline  # pylint: disable=import-outside-toplevel
  from streamed_versions import SPEC  # pylint: disable=import-outside-toplevel
  common = dict(data_dir=str(built), image_size=16, seed=0, num_epochs=1)
  for pipeline in range(3):
    context = tf.distribute.InputContext(3, pipeline, 1)
    with pytest.raises(ValueError) as refused:
      input_pipeline.classification_train(SPEC, batch_size=52, input_context=context, **common)
    assert str(refused.value) == (
        "input pipeline 1 of 3 reads 50 of the 160 examples of split 'train' (the pipelines "
        "read 50 to 60: each reads whole shard files), fewer than batch_size=52: with "
        "drop_remainder=True it would give not one batch; give batch_size=50 or less, or read "
        "it with fewer input pipelines (or drop_remainder=False)")
    batches = list(input_pipeline.classification_train(SPEC, batch_size=50,
                                                       input_context=context, **common))
    assert [len(batch["label"]) for batch in batches] == [50]


def test_a_bucket_read_by_pipelines_without_a_seed_is_told_the_seed_first(built, tmp_path):
  """Their shares are dealt by the seed: without one, a batch size is not advised for the
  seed 0 the read would not use; the seed is asked for."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from imagesets.reading import input_pipeline  # pylint: disable=import-outside-toplevel
  from streamed_versions import SPEC, published_to  # pylint: disable=import-outside-toplevel
  url = published_to(built, "file", tmp_path)
  with pytest.raises(ValueError, match="^seed=None with 3 input pipelines reading a bucket"):
    input_pipeline.classification_train(
        SPEC, data_dir=url, cache_dir=tmp_path / "cache", batch_size=60, num_epochs=1,
        image_size=8, input_context=tf.distribute.InputContext(3, 1, 1))
