"""A small keras `fit` on a mix of two folder datasets, with `keras_resume.BackupAndRestore`;
usage `keras_fit.py DATA_DIR BACKUP_DIR LOG KILL_AT [KILL_IN_SAVE]` (KILL_AT > 0: the
process kills itself with SIGKILL after training batch KILL_AT of this run; KILL_IN_SAVE > 0:
in backup number KILL_IN_SAVE, after the input position is written and before the weights
and keras' metadata). Appends to LOG one line per batch
trained (a digest of its images, labels and sources) and, at the end, the final weights'
digest."""

import hashlib
import os
import signal
import sys

import numpy as np
import tensorflow as tf
import keras

from imagesets.reading import input_pipeline, keras_resume, mixing

data_dir, backup_dir, log_path, kill_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
kill_in_save = int(sys.argv[5]) if len(sys.argv) > 5 else 0
keras.utils.set_random_seed(0)
tf.config.experimental.enable_op_determinism()

mix = mixing.mix([mixing.Part("pets:1.0.0", data_dir, weight=1),
                  mixing.Part("boats:1.0.0", data_dir, weight=2)], seed=5, labels="union")
train = input_pipeline.classification_train(mix, batch_size=4, image_size=24, seed=1,
                                            start=keras_resume.saved_start(backup_dir),
                                            with_position=True)


def log(text: str) -> None:
  with open(log_path, "a") as f:
    f.write(text + "\n")


def digest(image, label, source):
  return np.frombuffer(hashlib.sha256(image.tobytes() + label.tobytes() + source.tobytes())
                       .digest()[:8], np.int64)


class Logged(keras.Model):
  """Logs each batch it trains on (inside the train step: read-ahead batches are not)."""

  def train_step(self, data):
    (image, source), label = data
    tf.numpy_function(lambda *a: log(str(int(digest(*a)[0]))) or np.int64(0),
                      [image, label, source], tf.int64)
    return super().train_step((image, label))


inputs = keras.Input([24, 24, 3])
hidden = keras.layers.GlobalAveragePooling2D()(keras.layers.Rescaling(1 / 255)(inputs))
model = Logged(inputs, keras.layers.Dense(len(mix.classes))(hidden))
model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(True),
              jit_compile=False)


saves = 0


def save_weights(*args, **kwargs):
  global saves
  saves += 1
  if saves == kill_in_save:
    os.kill(os.getpid(), signal.SIGKILL)
  return keras.Model.save_weights(model, *args, **kwargs)


model.save_weights = save_weights


class KillAt(keras.callbacks.Callback):
  def __init__(self):
    super().__init__()
    self.trained = 0

  def on_train_batch_end(self, batch, logs=None):
    self.trained += 1
    if self.trained == kill_at:
      os.kill(os.getpid(), signal.SIGKILL)


backup = keras_resume.BackupAndRestore(backup_dir, train, save_freq=3)
model.fit(train.dataset.map(lambda b: ((b["image"], b["source"]), b["label"])), epochs=3,
          steps_per_epoch=5, callbacks=[backup, KillAt()], verbose=0)
weights = b"".join(np.asarray(w).tobytes() for w in model.get_weights())
log("weights " + hashlib.sha256(weights).hexdigest())
