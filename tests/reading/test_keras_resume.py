"""keras_resume: a keras `fit` on a mix, killed (SIGKILL) mid-epoch and resumed from its
backup, trains on the same batches in the same order as a fit never stopped, and ends
with the same weights (tests/keras_fit.py logs each batch from inside the train step)."""

import json
import pathlib
import signal
import subprocess
import sys

import pytest

from imagesets.reading import input_pipeline as ip
from imagesets.reading import keras_resume
from imagesets.reading import mixing
from imagesets_testing import photo_datasets

SCRIPT = pathlib.Path(__file__).parents[1] / "keras_fit.py"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  data_dir = tmp_path_factory.mktemp("keras") / "tfds"
  photo_datasets.build(data_dir, "pets", ["cat", "dog"], 30, seed=1, size=(48, 36))
  photo_datasets.build(data_dir, "boats", ["boat", "ship"], 20, seed=2, size=(48, 36),
                       file_format="array_record")
  return data_dir


@pytest.fixture(scope="module")
def never(data_dir, tmp_path_factory) -> list[str]:
  """The log of a fit never stopped: its batches, then its weights."""
  folder = tmp_path_factory.mktemp("never")
  assert fit(data_dir, folder / "b", folder / "never.log") == 0
  return (folder / "never.log").read_text().splitlines()


def fit(data_dir, backup: pathlib.Path, log: pathlib.Path, kill_at: int = 0,
        kill_in_save: int = 0) -> int:
  done = subprocess.run([sys.executable, str(SCRIPT), str(data_dir), str(backup), str(log),
                         str(kill_at), str(kill_in_save)], capture_output=True, text=True,
                        timeout=600)
  assert done.returncode in (0, -signal.SIGKILL), done.stderr[-3000:]
  return done.returncode


def test_a_killed_fit_resumed_mid_epoch_sees_the_same_batches(data_dir, never, tmp_path):
  # 3 epochs of 5 steps, a backup every 3 batches: killed after batch 11 (epoch 2's first),
  # the last backup at batch 9 (mid-epoch 1: keras runs epoch 1 again from its first step).
  assert fit(data_dir, tmp_path / "b", tmp_path / "killed.log", kill_at=11) == -signal.SIGKILL
  metadata = json.loads((tmp_path / "b" / "training_metadata.json").read_text())
  assert metadata == {"epoch": 1, "batch": 3, "input_batches": 9}
  assert fit(data_dir, tmp_path / "b", tmp_path / "resumed.log") == 0
  killed = (tmp_path / "killed.log").read_text().splitlines()
  resumed = (tmp_path / "resumed.log").read_text().splitlines()
  assert len(never) == 15 + 1 and len(killed) == 11   # (batches, then the weights)
  # Batches 10 and 11 were trained after the last backup: lost with the process.
  assert killed[:9] + resumed == never
  assert not (tmp_path / "b").exists()   # (keras' delete_checkpoint at the end)


def test_a_fit_killed_inside_a_backup_resumes_from_the_backup_before(data_dir, never,
                                                                     tmp_path):
  # Killed in the third backup (batch 9) after its input position was written, before the
  # weights and keras' metadata: keras resumes the backup of batch 6, and so does the input.
  assert fit(data_dir, tmp_path / "b", tmp_path / "killed.log",
             kill_in_save=3) == -signal.SIGKILL
  saved = json.loads((tmp_path / "b" / keras_resume.POSITION_FILE).read_text())
  assert [entry["batches"] for entry in saved["saves"]] == [6, 9]
  assert fit(data_dir, tmp_path / "b", tmp_path / "resumed.log") == 0
  killed = (tmp_path / "killed.log").read_text().splitlines()
  resumed = (tmp_path / "resumed.log").read_text().splitlines()
  assert len(killed) == 9 and killed[:6] + resumed == never


def test_the_callback_refuses_a_pipeline_not_started_at_its_backup(data_dir, tmp_path):
  mix = mixing.mix([mixing.Part("pets:1.0.0", str(data_dir)),
                    mixing.Part("boats:1.0.0", str(data_dir))], labels="union")
  backup = tmp_path / "b"
  backup.mkdir()
  (backup / "training_metadata.json").write_text(json.dumps({"epoch": 1, "batch": 2}))
  with pytest.raises(ValueError, match="made by keras' own BackupAndRestore"):
    keras_resume.saved_start(backup)
  (backup / "training_metadata.json").write_text(json.dumps(
      {"epoch": 1, "batch": 2, "input_batches": 2}))
  start = mix.run().position([8]).to_json()
  for damaged in ('{"saves": 5}', "[" * 100000, "[]", '{"saves": [{"batches": 3}]}',
                  " " * (2 << 20)):
    (backup / keras_resume.POSITION_FILE).write_text(damaged)
    with pytest.raises(ValueError) as error:
      keras_resume.saved_start(backup)
    assert "\n" not in str(error.value) and "remove the" in str(error.value)
  (backup / keras_resume.POSITION_FILE).write_text(json.dumps({"saves": [
      {"batches": 2, "position": start}]}))
  assert keras_resume.saved_start(backup) == start
  # A resumed fit runs keras' epoch again: two backups can name one (epoch, batch). The
  # metadata names its position by the count of batches (a kill after the newer position
  # was written, before keras' metadata, leaves the older metadata).
  later = mix.run().position([12]).to_json()
  (backup / keras_resume.POSITION_FILE).write_text(json.dumps({"saves": [
      {"epoch": 1, "batch": 2, "batches": 2, "position": start},
      {"epoch": 1, "batch": 2, "batches": 3, "position": later}]}))
  assert keras_resume.saved_start(backup) == start
  fresh = ip.classification_train(mix, batch_size=4, image_size=8, with_position=True)
  with pytest.raises(ValueError, match="start=keras_resume.saved_start"):
    keras_resume.BackupAndRestore(backup, fresh)
  keras_resume.BackupAndRestore(backup, ip.classification_train(
      mix, batch_size=4, image_size=8, start=start, with_position=True))
  with pytest.raises(ValueError, match="mixing.mix"):
    keras_resume.BackupAndRestore(tmp_path / "c", fresh.dataset.map(lambda b: b))
