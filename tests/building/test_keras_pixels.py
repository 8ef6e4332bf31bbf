"""keras_pixels.PixelFeed: the pixels of `keras_pixels.pixels`, made ahead by a tf.data map."""

import numpy as np
import pytest

from hang_guard import returns_within
from imagesets.building import keras_pixels
from imagesets_testing import sample_images


def _files(tmp_path) -> dict[str, bytes]:
  photo = sample_images.photo(21, 33, 3)
  rgba = np.dstack([photo, np.full(photo.shape[:2], 200, np.uint8)])
  files = {f"a/{i:02d}.jpg": sample_images.jpeg(17 + 3 * i, 40 - 2 * i, seed=i)
           for i in range(5)}
  files["a/grey.png"] = sample_images.encode(photo[:, :, 0], "PNG")
  files["b/rgba.png"] = sample_images.encode(rgba, "PNG")
  files["b/photo.gif"] = sample_images.encode(photo, "GIF")
  for name, data in files.items():
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_bytes(data)
  return files


@pytest.mark.parametrize("spec", [
    keras_pixels.KerasImage(24, 36),
    keras_pixels.KerasImage(24, 36, "nearest", "crop"),
    keras_pixels.KerasImage(40, 12, "lanczos5", "pad"),
    keras_pixels.KerasImage(7, 50, "bicubic", "stretch", "grayscale"),
    keras_pixels.KerasImage(24, 24, "area", "pad", "rgba"),
])
def test_the_feed_gives_each_file_the_pixels_of_pixels(tmp_path, spec):
  files = _files(tmp_path)
  feed = keras_pixels.PixelFeed(str(tmp_path), list(files), spec, ahead=3)
  made = 0
  for name, data in files.items():
    image = feed.take(name)
    try:
      expected = keras_pixels.pixels(data, spec)
    except keras_pixels.UndecodableError:  # a JPEG as rgba, a GIF as grayscale: as keras
      assert image is None, name
      continue
    assert image.dtype == np.uint8 and image.shape == spec.shape
    np.testing.assert_array_equal(image, expected)
    made += 1
  assert made >= 2


@pytest.mark.parametrize("batch", [2, 64])
def test_a_file_tensorflow_cannot_read_or_decode_is_none_and_the_rest_go_on(
    tmp_path, monkeypatch, batch):
  monkeypatch.setattr(keras_pixels, "_FEED_BATCH", batch)
  files = _files(tmp_path)
  (tmp_path / "a/empty.jpg").write_bytes(b"")
  (tmp_path / "a/text.png").write_bytes(b"not a picture")
  (tmp_path / "b/cut.jpg").write_bytes(sample_images.jpeg(30, 40)[:200])
  names = ["a/empty.jpg", *files, "a/text.png", "a/gone.jpg", "b/cut.jpg"]
  names.insert(3, names.pop())  # a bad file inside a batch, between good ones
  spec = keras_pixels.KerasImage(24, 36)
  feed = keras_pixels.PixelFeed(str(tmp_path), names, spec)
  for name in names:
    image = feed.take(name)
    if name in files:
      np.testing.assert_array_equal(image, keras_pixels.pixels(files[name], spec))
    else:
      assert image is None, name


def test_taken_in_any_order_it_never_waits_forever(tmp_path, monkeypatch):
  monkeypatch.setattr(keras_pixels, "_FEED_BATCH", 2)
  files = _files(tmp_path)
  names = list(files)
  spec = keras_pixels.KerasImage(24, 36)
  feed = keras_pixels.PixelFeed(str(tmp_path), names, spec, ahead=1)  # the last one first
  taken = returns_within(60, lambda: {name: feed.take(name) for name in reversed(names)},
                         what="takes in reverse order")
  assert len(taken) == len(names)
  for name, data in files.items():
    np.testing.assert_array_equal(taken[name], keras_pixels.pixels(data, spec))


def test_a_file_not_listed_or_taken_twice_is_the_callers_and_close_stops_it(tmp_path):
  files = _files(tmp_path)
  names = list(files)
  feed = keras_pixels.PixelFeed(str(tmp_path), names, keras_pixels.KerasImage(24, 36),
                                ahead=1)
  assert feed.take(names[0]) is not None
  for name in (names[0], "a/other.jpg"):
    with pytest.raises(KeyError):
      feed.take(name)
  feed.close()  # nothing more is handed over: a taker computes its file itself
  with pytest.raises(KeyError):
    feed.take(names[-1])


def test_when_decoding_ahead_stops_it_says_so_and_the_files_are_the_callers(
    tmp_path, monkeypatch):
  names = sorted(_files(tmp_path))
  warnings = []

  def broken(path, spec):
    raise ValueError("an op keras does not have\nsecond line")

  monkeypatch.setattr(keras_pixels, "_graph_pixels", broken)
  # (recorded where it is said: the CLI's tests may have turned absl's logger down)
  monkeypatch.setattr(keras_pixels.logging, "warning",
                      lambda message, *args: warnings.append(message % args))
  feed = keras_pixels.PixelFeed(str(tmp_path), names, keras_pixels.KerasImage(24, 36))
  with pytest.raises(KeyError):  # not made: the build computes it file by file
    feed.take(names[0])
  feed.close()
  (warning,) = [w for w in warnings if "decoding ahead" in w]
  assert "an op keras does not have" in warning and "\n" not in warning


def test_a_later_splits_feed_starts_when_the_one_before_is_done_or_at_its_first_take(
    tmp_path, monkeypatch):
  """One decoding map at a time (review-29b finding 2): the second split's feed starts only
  once the first has made all of its pixels; taken first (splits out of order), it starts
  at once, even with the first feed stuck full."""
  monkeypatch.setattr(keras_pixels, "_FEED_BATCH", 2)
  files = _files(tmp_path)
  names = list(files)
  first, second = names[:len(names) // 2], names[len(names) // 2:]
  spec = keras_pixels.KerasImage(24, 36)
  feed = keras_pixels.PixelFeed(str(tmp_path), first, spec, ahead=len(first) + 1)
  later = keras_pixels.PixelFeed(str(tmp_path), second, spec, after=feed)
  feed._thread.join(timeout=60)  # pylint: disable=protected-access  # made all, none taken
  later._thread.join(timeout=60)  # pylint: disable=protected-access  # started by the first
  assert not later._thread.is_alive()  # pylint: disable=protected-access
  for name in names:
    np.testing.assert_array_equal((feed if name in first else later).take(name),
                                  keras_pixels.pixels(files[name], spec))

  stuck = keras_pixels.PixelFeed(str(tmp_path), first, spec, ahead=1)  # full, never taken
  out_of_order = keras_pixels.PixelFeed(str(tmp_path), second, spec, after=stuck)
  assert out_of_order._thread.ident is None  # pylint: disable=protected-access  # not started
  taken = returns_within(60, lambda: {name: out_of_order.take(name) for name in second},
                         what="takes of a feed started after another")
  assert len(taken) == len(second)
  for name in second:
    np.testing.assert_array_equal(taken[name], keras_pixels.pixels(files[name], spec))
  stuck.close()


def test_the_feeds_decoding_runs_without_tf_datas_autotune_thread(tmp_path, monkeypatch):
  # Issue 53: with autotuning on, the end of the feed's iterator waited for the optimisation
  # thread's next wake-up (up to the decoding's own time, no CPU), and the next split's feed
  # starts only then. Every tf.data iterator the feed starts is counted here.
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  started, iterate = [], tf.data.Dataset.__iter__

  def counted(ds):
    started.append(ds.options().autotune.enabled)
    return iterate(ds)

  monkeypatch.setattr(tf.data.Dataset, "__iter__", counted)
  files = {f"{i}.jpg": sample_images.jpeg(30, 40, seed=i) for i in range(5)}
  for name, data in files.items():
    (tmp_path / name).write_bytes(data)
  feed = keras_pixels.PixelFeed(str(tmp_path), list(files), keras_pixels.KerasImage(24, 36))
  assert all(feed.take(name) is not None for name in files)
  feed._thread.join(timeout=60)  # pylint: disable=protected-access
  assert started == [False]
