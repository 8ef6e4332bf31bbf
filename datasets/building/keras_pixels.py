"""An image file's pixels exactly as `keras.utils.image_dataset_from_directory` returns them.

keras 3 (`keras/src/utils/image_dataset_utils.py`, `_load_image_tf`) decodes every file with
`tf.image.decode_image(channels=...)` and then resizes it every epoch: stretched
(`tf.image.resize`), cropped to the aspect ratio (`keras.utils.smart_resize`) or padded to
it (`tf.image.resize_with_pad`). `pixels` does the same with the same TensorFlow ops once,
at build time, and rounds to uint8 (keras' float32 values are off by at most 0.5, or by
more where bicubic/lanczos ringing leaves 0-255), so a cached build stores what keras
returns and every later epoch only reads it. keras' data_format is applied at read time
(a transpose of the stored channels-last pixels, as keras transposes its own).

TensorFlow runs here: builds that use it map their files on threads, not forked processes.
The keras cache's build (its files taken in listing order) gets them from a `PixelFeed`,
the same ops in a tf.data map, as keras runs them; `pixels` is then asked only about files
TensorFlow could not decode, to say why.
"""

import dataclasses
import os
import re

from absl import logging
import numpy as np

FITS = ("stretch", "crop", "pad")  # keras: default, crop_to_aspect_ratio, pad_to_aspect_ratio
CHANNELS = {"grayscale": 1, "rgb": 3, "rgba": 4}  # keras' color_mode


class UndecodableError(ValueError):
  """TensorFlow's decoder refuses the bytes (keras would fail mid-epoch on this file)."""


@dataclasses.dataclass(frozen=True)
class KerasImage:
  """What keras makes of each file: `image_size`, `interpolation`, the aspect-ratio fit and
  `color_mode`. As a dict (`as_option`) it is a build option (JSON, fingerprinted)."""

  height: int
  width: int
  interpolation: str = "bilinear"
  fit: str = "stretch"
  color_mode: str = "rgb"

  def __post_init__(self):
    if self.fit not in FITS:
      raise ValueError(f"fit must be one of {FITS}, not {self.fit!r}")
    if self.color_mode not in CHANNELS:
      raise ValueError(f"color_mode must be one of {tuple(CHANNELS)}, not {self.color_mode!r}")
    if min(self.height, self.width) < 1:
      raise ValueError(f"image size must be positive, not {(self.height, self.width)}")

  @property
  def shape(self) -> tuple[int, int, int]:
    return (self.height, self.width, CHANNELS[self.color_mode])

  def as_option(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_option(cls, option: dict | None) -> "KerasImage | None":
    return cls(**option) if option else None


def resized(image, spec: KerasImage):
  """keras' resize of one decoded image (channels last), as float32: `_load_image_tf`."""
  import tensorflow as tf  # only the builds that store keras' pixels load it here

  size = (spec.height, spec.width)
  if spec.fit == "crop":
    from keras.src.backend import tensorflow as tf_backend
    from keras.src.utils import image_utils
    return image_utils.smart_resize(image, size, interpolation=spec.interpolation,
                                    data_format="channels_last", backend_module=tf_backend)
  if spec.fit == "pad":
    return tf.image.resize_with_pad(image, spec.height, spec.width, method=spec.interpolation)
  return tf.image.resize(image, size, method=spec.interpolation)


def _reason(error) -> str:
  """TensorFlow's own line about the bytes, without the graph's call sites and op names."""
  lines = [line.strip() for line in str(error.message or "").splitlines()]
  lines = [line for line in lines if line and not line.startswith(
      ("[[", "File ", "Detected at node", "Graph execution error"))]
  text = lines[-1] if lines else type(error).__name__
  return re.sub(r"\{\{[^}]*\}\}\s*|\s*\[Op:\w+\]", "", text).strip()


def output_dtype(spec: KerasImage) -> str:
  """The dtype of keras' images: float32, but uint8 for "nearest" (TensorFlow's nearest
  resize keeps the input's dtype), for every fit (tested against keras' element_spec)."""
  return "uint8" if spec.interpolation == "nearest" else "float32"


def _graph_pixels(path, spec: KerasImage):
  """uint8 tensor of `spec.shape` for one file path: `pixels`' ops in a tf.data map
  (keras' own pipeline is one), rounded and clipped as `pixels` rounds (half to even)."""
  import tensorflow as tf

  image = tf.io.decode_image(tf.io.read_file(path), channels=CHANNELS[spec.color_mode],
                             expand_animations=False)
  image = tf.round(resized(image, spec))
  return tf.cast(tf.clip_by_value(image, 0, 255), tf.uint8)


def without_autotune():
  """tf.data's autotuning off, for the datasets of keras' one call: those it returns and
  the build's `PixelFeed`. Its optimisation thread wakes at waits that double after an
  iterator starts, and deleting the iterator (the end of every `for batch in ds` loop, of
  every keras epoch, of a build's decoding) waits for its next wake-up: wall time with no
  CPU, up to the whole epoch again (docs/performance.md, keras' one call). Without it, AUTOTUNE
  parallelism is the core count and prefetch(AUTOTUNE) grows its buffer while it runs
  empty (tf.data's defaults); the options hold for what a user chains after a dataset."""
  import tensorflow as tf

  options = tf.data.Options()
  options.autotune.enabled = False
  return options


_FEED_BATCH = 64
# Pixels made ahead of the workers: 128 MB, 850 images at 224x224, so that decoding never
# waits for the workers to take what it made.
_FEED_BYTES = 128 << 20


class PixelFeed:
  """`pixels` of a list of files, made ahead in that order by a tf.data map: decoding and
  resizing run on TensorFlow's threads with no Python per file (the same eager ops per
  file on our worker threads also pay each op's dispatch under the GIL:
  benchmarks/from_directory.py's stage line measures both). `take(path)` waits for its file's pixels; None:
  TensorFlow could not read or decode it (`pixels` on its bytes then says why). At most `ahead` images (and a batch)
  wait to be taken, unless a taker waits for a later one (taken out of order, they never
  deadlock). `after`: the feed of the split built before this one: this one starts when that
  one has made all of its pixels (one tf.data map decoding at a time, not one per split:
  review-29b finding 2), or at its own first take, whichever comes first."""

  def __init__(self, root: str, paths: list[str], spec: KerasImage, ahead: int | None = None,
               after: "PixelFeed | None" = None):
    import threading

    if ahead is None:  # far enough ahead that decoding never waits for the workers
      ahead = max(2 * _FEED_BATCH, _FEED_BYTES // int(np.prod(spec.shape)))

    self._ready: dict[str, np.ndarray | None] = {}
    self._pending = set(paths)
    self._waiting = 0  # takers waiting for a file not made yet
    self._ahead = ahead
    self._closed = self._done = self._full = False
    self._changed = threading.Condition()
    self._thread = threading.Thread(target=self._make, args=(root, list(paths), spec),
                                    name="pixel-feed", daemon=True)
    self._then = None  # the feed to start once this one has made everything
    if after is None or not after._start_after_me(self):
      self._start()

  def _start(self) -> None:
    with self._changed:
      if self._thread.ident is None and not self._closed:
        self._thread.start()

  def _start_after_me(self, feed: "PixelFeed") -> bool:
    """Has `feed` started when this one is done; False: this one is done already."""
    with self._changed:
      if self._done:
        return False
      self._then = feed
      return True

  def _make(self, root, paths, spec):
    import tensorflow as tf

    try:
      # In batches: one Python step and one copy per 64 images, not per image. A file TensorFlow cannot read or decode is left out of
      # its batch (ignore_errors) and handed over as None.
      ds = tf.data.Dataset.from_tensor_slices(
          (np.arange(len(paths)), [os.path.join(root, path) for path in paths]))
      # Plain TF ops: no AutoGraph conversion at each build.
      ds = ds.map(tf.autograph.experimental.do_not_convert(
          lambda i, path: (i, _graph_pixels(path, spec))),
                  num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
      made = 0
      for indices, images in ds.ignore_errors().batch(_FEED_BATCH).with_options(
          without_autotune()):
        batch = {}
        for i, image in zip(indices.numpy(), images.numpy()):
          batch.update((paths[j], None) for j in range(made, i))
          batch[paths[i]] = image
          made = i + 1
        if not self._hand_over(batch):
          return
      self._hand_over({path: None for path in paths[made:]})
    except Exception as error:  # pylint: disable=broad-except
      # e.g. keras refusing the options: the takers' own `pixels` raises it, in the build;
      # otherwise the build goes on per file, slower: say so.
      logging.warning("decoding ahead stopped (%s): the build decodes file by file",
                      str(error).splitlines()[0] if str(error) else type(error).__name__)
    finally:
      with self._changed:  # takers of files never made compute them themselves
        self._done = True
        self._changed.notify_all()
        then = self._then
      if then is not None:
        then._start()

  def _hand_over(self, batch: dict) -> bool:
    with self._changed:
      self._full = True  # takers wake this thread only then (a wake-up per image cost)
      self._changed.wait_for(lambda: self._closed or self._waiting
                             or len(self._ready) < self._ahead)
      self._full = False
      if self._closed:
        return False
      self._ready.update(batch)
      self._changed.notify_all()
      return True

  def take(self, path: str) -> np.ndarray | None:
    """The file's pixels (None: undecodable). KeyError for a file not in the feed's list
    or already taken: the caller computes it itself."""
    self._start()  # taken before the feed before it is done (splits taken out of order)
    with self._changed:
      if self._closed or path not in self._pending:
        raise KeyError(path)
      self._pending.discard(path)
      if path not in self._ready:
        self._waiting += 1
        self._changed.notify_all()
        self._changed.wait_for(lambda: path in self._ready or self._done)
        self._waiting -= 1
        if path not in self._ready:
          raise KeyError(path)
      image = self._ready.pop(path)
      if self._full:
        self._changed.notify_all()
      return image

  def close(self) -> None:
    """Stops making pixels nobody will take (a build that stopped early)."""
    with self._changed:
      self._closed = True
      self._changed.notify_all()


def pixels(data: bytes, spec: KerasImage) -> np.ndarray:
  """uint8 array of `spec.shape`: keras' float32 output for these file bytes, rounded."""
  import tensorflow as tf

  # Eager ops, as keras' pipeline computes them: a tf.function of the same ops pads
  # differently (resize_with_pad with unknown shapes; tested).
  try:
    image = tf.io.decode_image(data, channels=CHANNELS[spec.color_mode],
                               expand_animations=False)
  except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as error:
    raise UndecodableError(f"TensorFlow cannot decode it: {_reason(error)}") from None
  # Rounded in numpy: one pass, not three more eager TF ops.
  return np.clip(np.rint(resized(image, spec).numpy()), 0, 255).astype(np.uint8)
