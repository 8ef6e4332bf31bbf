"""Keras `fit` killed mid-epoch and resumed trains on exactly the batches it would have.

    from imagesets.reading import input_pipeline, keras_resume, mixing
    start = keras_resume.saved_start(backup_dir)              # None on a fresh run
    train = input_pipeline.classification_train(mix, batch_size=64, seed=0, start=start,
                                                with_position=True)
    backup = keras_resume.BackupAndRestore(backup_dir, train, save_freq=100)
    model.fit(train.dataset.map(lambda b: (b["image"], b["label"])), epochs=10,
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
done before the backup in that epoch. Each save writes the position, then the weights,
then keras' metadata naming that position by its count of batches (`input_batches`; the
last two positions are kept), each file through a temporary and a rename: a kill between
the writes resumes from the backup keras resumes from. The backup folder is a local path.
"""

import json
import os
import pathlib
import shutil

import keras

from imagesets.reading import mixing
from imagesets.storage import transfer

POSITION_FILE = "input_position.json"
_METADATA = "training_metadata.json"   # keras' BackupAndRestore's


_MAX_FILE = 1 << 20   # bytes of a position file read (untrusted: a backup folder's)


def _read_json(path: pathlib.Path, what: str):
  """The JSON object in `path`, None when there is none; a damaged one is one line."""
  try:
    with open(path, "rb") as f:
      text = f.read(_MAX_FILE + 1)
    if len(text) > _MAX_FILE:
      raise ValueError(f"over {_MAX_FILE} bytes")
    data = json.loads(text)
  except FileNotFoundError:
    return None
  except (OSError, ValueError, RecursionError) as error:
    raise ValueError(f"{path} is not readable {what} ({type(error).__name__}): remove the "
                     "backup folder to train from the start") from None
  if not isinstance(data, dict):
    raise ValueError(f"{path} is not {what} (a {type(data).__name__}): remove the backup "
                     "folder to train from the start")
  return data


def _saved(backup_dir) -> dict | None:
  """The saved entry ({"batches", "position"}) of the backup keras' metadata in
  `backup_dir` names (its "input_batches"), or None (no backup)."""
  folder = pathlib.Path(backup_dir).expanduser()
  metadata = _read_json(folder / _METADATA, "keras training metadata")
  if metadata is None:
    return None
  batches = metadata.get("input_batches")
  if type(batches) is not int:
    raise ValueError(f"{folder} holds a keras backup but no input position saved with it: "
                     "it was made by keras' own BackupAndRestore; remove the folder to train "
                     "from the start")
  saved = _read_json(folder / POSITION_FILE, "input position") or {}
  entries = saved.get("saves")
  for entry in entries if isinstance(entries, list) else []:
    if isinstance(entry, dict) and entry.get("batches") == batches and isinstance(
        entry.get("position"), dict):
      return entry
  raise ValueError(f"{folder / POSITION_FILE} holds no input position of the backup keras "
                   f"resumes (after {batches} batches): it was edited or damaged; remove the "
                   "folder to train from the start")


def saved_start(backup_dir):
  """The input position saved with the last backup in `backup_dir`, to give as `start=`
  to the training pipeline; None when there is none (a fresh run)."""
  entry = _saved(backup_dir)
  return None if entry is None else entry["position"]


class BackupAndRestore(keras.callbacks.BackupAndRestore):
  """keras' `BackupAndRestore` that also saves and restores `pipeline`'s position (the
  `mixing.Pipeline` `input_pipeline.classification_train(mix, ...,
  with_position=True)` returned, made with `start=saved_start(backup_dir)`; `fit` on its
  `.dataset`); see the module docstring."""

  def __init__(self, backup_dir, pipeline, save_freq="epoch", double_checkpoint=False,
               delete_checkpoint=True):
    super().__init__(str(backup_dir), save_freq=save_freq,
                     double_checkpoint=double_checkpoint, delete_checkpoint=delete_checkpoint)
    if not isinstance(pipeline, mixing.Pipeline) or pipeline.run.readers != 1:
      raise ValueError("give the mixing.Pipeline input_pipeline.classification_train(mix, "
                       "..., with_position=True) returned for a mixing.mix(...) (one input "
                       "pipeline; a single dataset: a mix of one part), and fit on its "
                       ".dataset")
    run = pipeline.run
    self._run, self._batch_size = run, pipeline.batch_size
    entry = _saved(backup_dir)
    expected = None if entry is None else entry["position"]
    if run.position([0]).to_json() != (expected or run.mix.run(1).position([0]).to_json()):
      raise ValueError(f"the pipeline does not start where the backup in {backup_dir} left "
                       "off: make it with start=keras_resume.saved_start(backup_dir)")
    self._before = 0 if entry is None else entry["batches"]   # batches trained before
    self._last_save = entry   # the position of the last backup (kept beside the next one)
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
    """keras' save (weights, then its metadata), the position first: the metadata names the
    position saved with the weights by its count of batches ("input_batches")."""
    folder = pathlib.Path(self.backup_dir)
    folder.mkdir(parents=True, exist_ok=True)
    batches = self._before + self._taken
    saving = {"batches": batches,
              "position": self._run.position([self._taken * self._batch_size]).to_json()}
    entries = [self._last_save, saving] if self._last_save is not None else [saving]
    transfer.write_atomically(folder / POSITION_FILE, json.dumps({"saves": entries}).encode())
    self._last_save = saving
    if self.double_checkpoint and os.path.exists(self._weights_path):
      shutil.copy(self._weights_path, self._prev_weights_path)
    if self.double_checkpoint and os.path.exists(self._training_metadata_path):
      shutil.copy(self._training_metadata_path, self._prev_training_metadata_path)
    self.model.save_weights(filepath=self._weights_path, overwrite=True)
    transfer.write_atomically(pathlib.Path(self._training_metadata_path), json.dumps({
        "epoch": self._current_epoch, "batch": self._last_batch_seen,
        "input_batches": batches}).encode())
