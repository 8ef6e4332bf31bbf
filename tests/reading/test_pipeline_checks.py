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
