"""Keras `fit` killed mid-epoch and resumed trains on exactly the batches it would have.

    from imagesets.reading import input_pipeline, keras_resume, mixing
    start = keras_resume.saved_start(backup_dir)              # None on a fresh run
    train = input_pipeline.classification_train(mix, batch_size=64, seed=0, start=start)
    backup = keras_resume.BackupAndRestore(backup_dir, train, save_freq=100)
    model.fit(train.map(lambda b: (b["image"], b["label"])), epochs=10,
              steps_per_epoch=1000, callbacks=[backup])

`BackupAndRestore` is keras' own (weights, optimizer and epoch saved every `save_freq`
batches; `double_checkpoint`, `delete_checkpoint` as keras'), plus the input pipeline's
position (`mixing`: a mixed pipeline's state is its position) saved with each backup, in
`input_position.json` beside keras' `training_metadata.json`, and the count of batches
trained. Keras resumes a backup made mid-epoch by running that epoch again from its first
step; the pipeline, started at the saved position, gives the batches that came next, and
the callback ends training when the run has trained on as many batches as one that was
never stopped (`epochs * steps_per_epoch`): the model sees the same batches in the same
order, only keras' epoch boundaries (and so its per-epoch logs) come later by the steps
done before the backup in that epoch. A position is written before keras' metadata and
the one matching keras' metadata is used, so a kill between the two writes resumes from
the backup keras resumes from.
"""

import json
import os
import pathlib
import uuid

import keras

POSITION_FILE = "input_position.json"
_METADATA = "training_metadata.json"   # keras' BackupAndRestore's


def _read_json(path: pathlib.Path, what: str):
  try:
    return json.loads(path.read_text())
  except FileNotFoundError:
    return None
  except (OSError, ValueError) as error:
    raise ValueError(f"{path} is not readable {what} ({error}): remove the backup folder to "
                     "train from the start") from None


def _saved(backup_dir) -> dict | None:
  """The saved entry ({"epoch", "batch", "batches", "position"}) matching keras' metadata
  in `backup_dir`, or None (no backup)."""
  folder = pathlib.Path(backup_dir).expanduser()
  metadata = _read_json(folder / _METADATA, "keras training metadata")
  if metadata is None:
    return None
  saved = _read_json(folder / POSITION_FILE, "input position")
  entries = saved.get("saves", []) if isinstance(saved, dict) else []
  for entry in reversed(entries):
    if isinstance(entry, dict) and [entry.get("epoch"), entry.get("batch")] == [
        metadata.get("epoch"), metadata.get("batch")]:
      if type(entry.get("batches")) is not int or entry["batches"] < 0:
        break
      return entry
  raise ValueError(f"{folder} holds a keras backup but no input position saved with it "
                   f"({POSITION_FILE}): it was made by keras' own BackupAndRestore; remove "
                   "the folder to train from the start")


def saved_start(backup_dir):
  """The input position saved with the last backup in `backup_dir`, to give as `start=`
  to the training pipeline; None when there is none (a fresh run)."""
  entry = _saved(backup_dir)
  return None if entry is None else entry["position"]


class BackupAndRestore(keras.callbacks.BackupAndRestore):
  """keras' `BackupAndRestore` that also saves and restores `dataset`'s position (the
  pipeline `input_pipeline.classification_train` returned for a mix, made with
  `start=saved_start(backup_dir)`); see the module docstring."""

  def __init__(self, backup_dir, dataset, save_freq="epoch", double_checkpoint=False,
               delete_checkpoint=True):
    super().__init__(str(backup_dir), save_freq=save_freq,
                     double_checkpoint=double_checkpoint, delete_checkpoint=delete_checkpoint)
    run = getattr(dataset, "_imagesets_mix_run", None)
    if run is None or run.readers != 1:
      raise ValueError("give the pipeline input_pipeline.classification_train returned for "
                       "a mixing.mix(...) (one input pipeline; a single dataset: a mix of one "
                       "part), before any .map of yours")
    self._run, self._batch_size = run, dataset._imagesets_batch_size
    entry = _saved(backup_dir)
    expected = None if entry is None else entry["position"]
    if run.position([0]).to_json() != (expected or run.mix.run(1).position([0]).to_json()):
      raise ValueError(f"the pipeline does not start where the backup in {backup_dir} left "
                       "off: make it with start=keras_resume.saved_start(backup_dir)")
    self._before = 0 if entry is None else entry["batches"]   # batches trained before
    self._taken = 0                                           # batches trained in this fit
    self._seen_batch = -1

  def on_epoch_begin(self, epoch, logs=None):
    # (keras' counts epochs from 0 again in a resumed fit until an epoch ends: a backup made
    # then would name epoch 0)
    self._current_epoch = epoch
    super().on_epoch_begin(epoch, logs)

  def on_train_batch_end(self, batch, logs=None):
    # (batch: the last step of the call; several with steps_per_execution)
    self._taken += batch - self._seen_batch if batch > self._seen_batch else batch + 1
    self._seen_batch = batch
    super().on_train_batch_end(batch, logs)
    total = self.params.get("epochs", 0) * (self.params.get("steps") or 0)
    if self._before and total and self._before + self._taken >= total:
      self.model.stop_training = True   # as many batches as a run never stopped

  def on_epoch_end(self, epoch, logs=None):
    self._seen_batch = -1
    super().on_epoch_end(epoch, logs)

  def _save_model(self):
    folder = pathlib.Path(self.backup_dir)
    folder.mkdir(parents=True, exist_ok=True)
    old = _read_json(folder / POSITION_FILE, "input position")
    entries = old.get("saves", [])[-1:] if isinstance(old, dict) else []
    entries.append({"epoch": self._current_epoch, "batch": self._last_batch_seen,
                    "batches": self._before + self._taken,
                    "position": self._run.position([self._taken * self._batch_size]).to_json()})
    part = folder / f".{POSITION_FILE}.{uuid.uuid4().hex}"
    part.write_text(json.dumps({"saves": entries}))
    os.replace(part, folder / POSITION_FILE)   # (before keras' metadata: see the docstring)
    super()._save_model()
