"""box_ops (tf.data) and numpy_box_ops (Grain): boxes move with the pixels.

Checked against a box-at-a-time reference written here, against objects planted into real
photos (found again in the output by their colour), and against keras 3 (its converter,
its RandomFlip layer, a model's fit).
"""

import io

import keras
import numpy as np
import PIL.Image
import pytest
import tensorflow as tf

from imagesets.reading import box_ops, numpy_box_ops, numpy_ops, preprocess_ops
from imagesets_testing import real_photos

PHOTOS = real_photos.photos()
MAGENTA = np.array([255, 0, 255])  # no pixel of the real photos comes near it
f32 = np.float32


def _encode(pixels, fmt="JPEG"):
  out = io.BytesIO()
  PIL.Image.fromarray(pixels).save(out, format=fmt,
                                   **({"quality": 95, "subsampling": 0} if fmt == "JPEG" else {}))
  return out.getvalue()


def _objects(boxes, **extra):
  boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
  return {"bbox": boxes, "label": np.arange(len(boxes), dtype=np.int64), **extra}


def _example(image, objects, seed=(1, 2)):
  """A tf.data detection example: image bytes or pixels, per-object tensors, the seed."""
  return {"image": tf.constant(image), "objects": {k: tf.constant(v) for k, v in objects.items()},
          preprocess_ops.SEED_KEY: tf.constant(seed, tf.int64)}


def _numpy(tree):
  return tf.nest.map_structure(lambda t: t.numpy(), tree)


def _tf_window(shape, seed, area_range=box_ops.CROP_AREA_RANGE):
  """The window preprocess_ops' random crop takes in an image of `shape` for `seed`."""
  op_seed = preprocess_ops._op_seed({preprocess_ops.SEED_KEY: tf.constant(seed, tf.int64)},
                                    preprocess_ops._CROP_SALT)
  window = preprocess_ops._crop_window(tf.constant([*shape, 3]), op_seed, area_range,
                                       box_ops.CROP_ASPECT_RATIO_RANGE)
  return [int(v) for v in window]


# --- The reference: one box at a time, in the ops' float32 arithmetic. ---

def reference_crop(boxes, window, shape, min_visible):
  """(indices of the objects kept, their boxes in the window) for `window` (top, left,
  height, width) of an image of `shape`."""
  top, left, height, width = (f32(v) for v in window)
  image_height, image_width = f32(shape[0]), f32(shape[1])
  kept, moved = [], []
  for index, box in enumerate(np.asarray(boxes, np.float32).reshape(-1, 4)):
    ymin, ymax = box[0] * image_height, box[2] * image_height
    xmin, xmax = box[1] * image_width, box[3] * image_width
    inside_ymin, inside_xmin = max(ymin, top), max(xmin, left)
    inside_ymax, inside_xmax = min(ymax, top + height), min(xmax, left + width)
    if ymax > ymin and xmax > xmin:
      inside = max(inside_ymax - inside_ymin, f32(0)) * max(inside_xmax - inside_xmin, f32(0))
      if inside == 0 or inside / ((ymax - ymin) * (xmax - xmin)) < f32(min_visible):
        continue
    elif not (inside_ymin <= inside_ymax and inside_xmin <= inside_xmax):
      continue  # a point or a line that does not touch the window (or an inverted box)
    kept.append(index)
    moved.append([(inside_ymin - top) / height, (inside_xmin - left) / width,
                  (inside_ymax - top) / height, (inside_xmax - left) / width])
  return np.array(kept, int), np.array(moved, np.float32).reshape(-1, 4)


def reference_flip(boxes):
  return np.array([[ymin, 1 - xmax, ymax, 1 - xmin] for ymin, xmin, ymax, xmax in boxes],
                  np.float32).reshape(-1, 4)


def random_boxes(rng, count, shape, window):
  """Boxes of every kind: anywhere, tiny, on the image's edges, on the window's edges,
  points, wholly outside the window, the whole image."""
  height, width = shape
  top, left, window_height, window_width = window
  boxes = []
  for kind in rng.integers(0, 7, count):
    y0, y1 = np.sort(rng.uniform(0, 1, 2))
    x0, x1 = np.sort(rng.uniform(0, 1, 2))
    if kind == 1:  # under two pixels
      y1, x1 = y0 + rng.uniform(0, 2 / height), x0 + rng.uniform(0, 2 / width)
    elif kind == 2:  # on the image's edges
      y0, x1 = (0.0, 1.0) if rng.random() < 0.5 else (y0, x1)
      x0, y1 = (0.0, 1.0) if rng.random() < 0.5 else (x0, y1)
    elif kind == 3:  # sides on the window's sides
      y0 = top / height if rng.random() < 0.5 else y0
      x1 = (left + window_width) / width if rng.random() < 0.5 else x1
      y1, x0 = max(y0, y1), min(x0, x1)
    elif kind == 4:  # a point
      y1, x1 = y0, x0
    elif kind == 5 and left > 0:  # left of the window
      x0, x1 = np.sort(rng.uniform(0, left / width, 2))
    elif kind == 6:
      y0, x0, y1, x1 = 0.0, 0.0, 1.0, 1.0
    boxes.append([y0, x0, y1, x1])
  return np.array(boxes, np.float32).reshape(-1, 4)


def _random_case(rng):
  shape = tuple(int(v) for v in rng.integers(8, 260, 2))
  size = tuple(int(v) for v in rng.integers(5, 33, 2))
  count = int(rng.choice([0, 1, 3, 12]))
  pixels = rng.integers(0, 256, (*shape, 3), dtype=np.uint8)  # nothing symmetric
  min_visible = float(rng.choice([0.0, 0.3, 0.5, 0.9, 1.0]))
  return shape, size, count, pixels, min_visible


def _flipped(image, unflipped):
  """Whether `image` is `unflipped` mirrored (and that it is one of the two)."""
  if np.array_equal(image, unflipped):
    return False
  np.testing.assert_array_equal(image, unflipped[:, ::-1])
  return True


def test_tf_crop_and_flip_move_boxes_as_the_reference():
  rng = np.random.default_rng(0)
  flips = 0
  for case in range(60):
    shape, size, _, pixels, min_visible = _random_case(rng)
    seed = (case, 7)
    window = _tf_window(shape, seed)
    boxes = random_boxes(rng, int(rng.choice([0, 1, 3, 12])), shape, window)
    image = pixels if case % 3 else _encode(pixels, "PNG" if case % 2 else "JPEG")
    example = _example(image, _objects(boxes), seed)
    crop = box_ops.decode_and_random_crop(size, min_visible)
    cropped = _numpy(crop(example))
    both = _numpy(preprocess_ops.compose(crop, box_ops.random_flip_left_right())(example))

    kept, moved = reference_crop(boxes, window, shape, min_visible)
    assert cropped["image"].shape == (*size, 3)
    np.testing.assert_array_equal(cropped["objects"]["label"], kept)
    np.testing.assert_allclose(cropped["objects"]["bbox"], moved, atol=1e-5)
    flipped = _flipped(both["image"], cropped["image"])
    flips += flipped
    np.testing.assert_allclose(both["objects"]["bbox"],
                               reference_flip(moved) if flipped else moved, atol=1e-5)
  assert 10 < flips < 50


def test_numpy_crop_and_flip_move_boxes_as_the_reference():
  rng = np.random.default_rng(1)
  flips = 0
  for case in range(150):
    shape, size, count, pixels, min_visible = _random_case(rng)
    window = numpy_ops.crop_window(shape, np.random.default_rng(case), box_ops.CROP_AREA_RANGE,
                                   box_ops.CROP_ASPECT_RATIO_RANGE)
    boxes = random_boxes(rng, count, shape, window)
    image = pixels if case % 5 else _encode(pixels, "PNG")
    draws = np.random.default_rng(case)
    crop, objects = numpy_box_ops.decode_and_random_crop(image, _objects(boxes), size, draws,
                                                         min_visible)
    both, both_objects = numpy_box_ops.random_flip_left_right(crop, objects, draws)

    kept, moved = reference_crop(boxes, window, shape, min_visible)
    assert crop.shape == (*size, 3)
    np.testing.assert_array_equal(objects["label"], kept)
    np.testing.assert_allclose(objects["bbox"], moved, atol=1e-5)
    flipped = _flipped(both, crop)
    flips += flipped
    np.testing.assert_allclose(both_objects["bbox"],
                               reference_flip(moved) if flipped else moved, atol=1e-5)
  assert 40 < flips < 110


def test_tf_and_numpy_crop_the_same_window_to_the_same_objects():
  rng = np.random.default_rng(2)
  for _ in range(100):
    shape, _, count, _, min_visible = _random_case(rng)
    window = numpy_ops.crop_window(shape, rng, (0.05, 1.0), (0.5, 2.0))
    objects = _objects(random_boxes(rng, count, shape, window))
    ours = numpy_box_ops.crop_objects(objects, window, shape, min_visible)
    theirs = _numpy(box_ops.crop_objects({k: tf.constant(v) for k, v in objects.items()},
                                         tf.constant(window), tf.constant(shape), min_visible))
    np.testing.assert_array_equal(ours["label"], theirs["label"])
    np.testing.assert_allclose(ours["bbox"], theirs["bbox"], atol=1e-6)


def test_degenerate_boxes_stay_when_they_touch_the_window():
  window, shape = (10, 20, 30, 40), (100, 100)  # rows 10-40, columns 20-60
  boxes = [[0.25, 0.40, 0.25, 0.40],   # a point inside
           [0.10, 0.20, 0.10, 0.20],   # a point on the window's corner
           [0.05, 0.40, 0.05, 0.40],   # a point above it
           [0.25, 0.10, 0.25, 0.90],   # a horizontal line across it
           [0.30, 0.50, 0.20, 0.55],   # inverted
           [0.10, 0.20, 0.40, 0.60],   # the window itself
           [0.00, 0.00, 0.10, 0.20]]   # touching its corner from outside: nothing inside
  for crop_objects in (numpy_box_ops.crop_objects, box_ops.crop_objects):
    kept = np.asarray(crop_objects(_objects(boxes), window, shape, min_visible=0.0)["label"])
    np.testing.assert_array_equal(kept, [0, 1, 3, 5])
  _, moved = reference_crop(boxes, window, shape, 0.0)
  np.testing.assert_allclose(moved[[2, 3]], [[0.5, 0, 0.5, 1], [0, 0, 1, 1]], atol=1e-6)


def test_every_per_object_key_follows_its_box():
  rng = np.random.default_rng(3)
  shape, window = (120, 160), (20, 30, 60, 90)
  boxes = random_boxes(rng, 40, shape, window)
  objects = _objects(boxes, is_crowd=rng.integers(0, 2, 40), area=rng.uniform(0, 1, (40,)),
                     keypoints=rng.uniform(0, 1, (40, 2, 3)).astype(np.float32))
  tf_objects = {k: tf.constant(v) for k, v in objects.items()}
  for out in (numpy_box_ops.crop_objects(objects, window, shape),
              _numpy(box_ops.crop_objects(tf_objects, window, shape))):
    kept = out["label"]
    assert 0 < len(kept) < 40 and set(out) == set(objects)
    for key in ("is_crowd", "area", "keypoints"):
      np.testing.assert_array_equal(out[key], objects[key][kept])
  example = _example(_encode(PHOTOS["coffee"]), objects, seed=(4, 4))
  out = _numpy(box_ops.decode_and_random_crop(32, area_range=(0.1, 0.2))(example)["objects"])
  assert len(out["label"]) < 40 and set(out) == set(objects)
  np.testing.assert_array_equal(out["keypoints"], objects["keypoints"][out["label"]])


def test_the_pixels_are_those_of_the_image_ops():
  for index, (name, pixels) in enumerate(list(PHOTOS.items())[:5]):
    encoded = _encode(pixels, "JPEG" if index % 2 else "PNG")
    objects = _objects([[0.2, 0.2, 0.6, 0.7]])
    for seed in [(index, 1), (index, 2), (index, 3)]:
      example = _example(encoded, objects, seed)
      ours = box_ops.decode_and_random_crop(48)(example)["image"]
      theirs = preprocess_ops.decode_and_random_crop(48)(example)["image"]
      np.testing.assert_array_equal(ours, theirs)
      decoded = {**example, "image": tf.constant(pixels)}
      np.testing.assert_array_equal(box_ops.decode_and_random_crop(48)(decoded)["image"],
                                    preprocess_ops.random_resized_crop(48)(decoded)["image"])
      np.testing.assert_array_equal(box_ops.random_flip_left_right()(decoded)["image"],
                                    preprocess_ops.random_flip_left_right()(decoded)["image"])
      grain_seed = seed[0] * 10 + seed[1]
      image, _ = numpy_box_ops.decode_and_random_crop(
          encoded, objects, 48, np.random.default_rng(grain_seed))
      np.testing.assert_array_equal(
          image, numpy_ops.random_resized_crop(encoded, 48, np.random.default_rng(grain_seed)))
      flipped, _ = numpy_box_ops.random_flip_left_right(pixels, objects,
                                                        np.random.default_rng(grain_seed))
      np.testing.assert_array_equal(
          flipped, numpy_ops.random_flip(np.random.default_rng(grain_seed), pixels)[0])
    for fit in box_ops.FITS:
      example = _example(encoded, objects)
      np.testing.assert_array_equal(
          box_ops.decode_and_fit((40, 56), fit)(example)["image"],
          preprocess_ops.decode_and_fit((40, 56), fit=fit)(example)["image"])


# --- Planted objects: a magenta rectangle drawn into real photos, found again by colour. ---

def _planted(pixels, rect):
  """The photo with a magenta rectangle at rows/columns `rect` (top, left, bottom, right,
  ends excluded), and its normalised box."""
  top, left, bottom, right = rect
  pixels = pixels.copy()
  pixels[top:bottom, left:right] = MAGENTA
  height, width = pixels.shape[:2]
  return pixels, np.array([[top / height, left / width, bottom / height, right / width]],
                          np.float32)


def _found(image):
  """(top, left, bottom, right) in pixels of the magenta in `image`, None if none."""
  mask = np.abs(np.asarray(image, np.float32) - MAGENTA).sum(-1) < 150
  if not mask.any():
    return None
  rows, cols = np.nonzero(mask.any(1))[0], np.nonzero(mask.any(0))[0]
  return np.array([rows[0], cols[0], rows[-1] + 1, cols[-1] + 1])


def _assert_bounds(image, boxes, tolerance=2.0):
  height, width = np.asarray(image).shape[:2]
  found = _found(image)
  if len(boxes) == 0:  # dropped: little of it was left in the window
    return False
  assert found is not None
  np.testing.assert_allclose(found, boxes[0] * [height, width, height, width], atol=tolerance)
  return True


PLANTS = {"astronaut": (60, 110, 130, 170), "coffee": (20, 30, 70, 90),
          "chelsea": (70, 120, 120, 190), "rocket": (5, 5, 40, 60)}


def test_planted_objects_are_where_the_tf_ops_move_their_boxes():
  kept = 0
  for name, rect in PLANTS.items():
    pixels, box = _planted(PHOTOS[name], rect)
    encoded = _encode(pixels)
    for seed in range(6):
      example = _example(encoded, _objects(box), (seed, 5))
      out = preprocess_ops.compose(box_ops.decode_and_random_crop((56, 64), area_range=(0.3, 1)),
                                   box_ops.random_flip_left_right())(example)
      kept += _assert_bounds(out["image"], out["objects"]["bbox"].numpy())
    for fit in box_ops.FITS:
      out = box_ops.decode_and_fit((48, 80), fit)(example)
      _assert_bounds(out["image"], out["objects"]["bbox"].numpy())
    out = box_ops.decode_and_resize((70, 50))(example)
    _assert_bounds(out["image"], out["objects"]["bbox"].numpy())
  assert kept >= 12


def test_planted_objects_are_where_the_numpy_ops_move_their_boxes():
  kept = 0
  for name, rect in PLANTS.items():
    pixels, box = _planted(PHOTOS[name], rect)
    encoded = _encode(pixels)
    for seed in range(6):
      rng = np.random.default_rng(seed)
      image, objects = numpy_box_ops.decode_and_random_crop(encoded, _objects(box), (56, 64), rng,
                                                            area_range=(0.3, 1))
      image, objects = numpy_box_ops.random_flip_left_right(image, objects, rng)
      kept += _assert_bounds(image, objects["bbox"])
    for fit in numpy_box_ops.FITS:
      image, objects = numpy_box_ops.decode_and_fit(encoded, _objects(box), (48, 80), fit)
      _assert_bounds(image, objects["bbox"])
    image, objects = numpy_box_ops.decode_and_resize(encoded, _objects(box), (70, 50))
    _assert_bounds(image, objects["bbox"])
  assert kept >= 12


def test_letterbox_boxes_follow_the_image_into_the_padded_frame():
  """The image's place in resize_with_pad's frame, read off a white image's pixels."""
  rng = np.random.default_rng(4)
  for _ in range(12):
    shape = tuple(int(v) for v in rng.integers(5, 120, 2))
    size = tuple(int(v) for v in rng.integers(5, 60, 2))
    white = np.full((*shape, 3), 255, np.uint8)
    boxes = random_boxes(rng, 5, shape, (0, 0, *shape))
    out = box_ops.decode_and_fit(size, "pad")(_example(_encode(white, "PNG"), _objects(boxes)))
    rows = np.nonzero(out["image"].numpy()[:, :, 0].max(1) > 0)[0]
    cols = np.nonzero(out["image"].numpy()[:, :, 0].max(0) > 0)[0]
    top, left, height, width = rows[0], cols[0], len(rows), len(cols)
    expected = (boxes * [height, width, height, width] + [top, left, top, left]) / [*size, *size]
    np.testing.assert_allclose(out["objects"]["bbox"], expected, atol=1e-5)
    image, objects = numpy_box_ops.decode_and_fit(white, _objects(boxes), size, "pad")
    np.testing.assert_allclose(objects["bbox"], expected, atol=1e-5)
    np.testing.assert_array_equal(image > 0, out["image"].numpy() > 0)


def test_the_ops_trace_into_tf_data_with_any_number_of_objects():
  rng = np.random.default_rng(5)
  examples = []
  for index, count in enumerate([0, 3, 1, 7]):
    pixels = PHOTOS[list(PHOTOS)[index]]
    examples.append(_example(_encode(pixels), _objects(random_boxes(rng, count, (200, 200),
                                                                    (0, 0, 200, 200))),
                             (index, 9)))
  signature = tf.nest.map_structure(
      lambda t: tf.TensorSpec([None] * t.shape.rank, t.dtype), examples[0])
  dataset = tf.data.Dataset.from_generator(lambda: iter(examples), output_signature=signature)
  preprocess = preprocess_ops.compose(box_ops.decode_and_random_crop(32),
                                      box_ops.random_flip_left_right(),
                                      box_ops.to_keras(6, "center_xywh"))
  for graph, example in zip(dataset.map(preprocess), examples, strict=True):
    eager = preprocess(example)
    np.testing.assert_array_equal(graph["images"], eager["images"])
    np.testing.assert_array_equal(graph["bounding_boxes"]["labels"],
                                  eager["bounding_boxes"]["labels"])
    np.testing.assert_allclose(graph["bounding_boxes"]["boxes"],
                               eager["bounding_boxes"]["boxes"], atol=1e-6)
    assert graph["bounding_boxes"]["boxes"].shape == (6, 4)


# --- keras 3: its formats, its layers, its fit. ---

def test_boxes_to_format_agrees_with_keras_convert_format():
  rng = np.random.default_rng(6)
  corners = np.sort(rng.uniform(0, 1, (2, 7, 2)), axis=-1)  # rel_yxyx: ymin <= ymax ...
  rel_yxyx = np.stack([corners[0, :, 0], corners[1, :, 0], corners[0, :, 1], corners[1, :, 1]],
                      axis=-1).astype(np.float32)
  height, width = 37, 91
  for source in box_ops.FORMATS:
    boxes = np.asarray(keras.utils.bounding_boxes.convert_format(
        rel_yxyx, "rel_yxyx", source, height=height, width=width))
    for target in box_ops.FORMATS:
      expected = np.asarray(keras.utils.bounding_boxes.convert_format(
          boxes, source, target, height=height, width=width))
      atol = 1e-3 if not target.startswith("rel_") else 1e-5
      np.testing.assert_allclose(box_ops.boxes_to_format(boxes, source, target, height, width),
                                 expected, atol=atol, err_msg=f"{source} -> {target}")
      np.testing.assert_allclose(
          numpy_box_ops.boxes_to_format(boxes, source.upper(), target, height, width), expected,
          atol=atol, err_msg=f"{source} -> {target}")
  with pytest.raises(ValueError, match="height and width"):
    box_ops.boxes_to_format(rel_yxyx, "rel_yxyx", "xyxy")
  with pytest.raises(ValueError, match="format"):
    numpy_box_ops.boxes_to_format(rel_yxyx, "rel_yxyx", "rel_center_yxhw")


def test_to_keras_converts_pads_with_minus_one_and_keeps_the_first_max_boxes():
  rng = np.random.default_rng(7)
  pixels = rng.integers(0, 256, (30, 50, 3), dtype=np.uint8)
  boxes = random_boxes(rng, 5, (30, 50), (0, 0, 30, 50))
  objects = _objects(boxes, is_crowd=np.zeros(5, np.int64))
  example = _example(pixels, objects)
  for fmt in box_ops.FORMATS:
    expected = np.asarray(keras.utils.bounding_boxes.convert_format(
        boxes, "rel_yxyx", fmt, height=30, width=50))
    for max_boxes in (8, 3):
      out = _numpy(box_ops.to_keras(max_boxes, fmt)(example))
      grain = numpy_box_ops.to_keras(pixels, objects, max_boxes, fmt)
      for result in (out, grain):
        assert set(result) == {"images", "bounding_boxes"}
        kept = min(5, max_boxes)
        bounding_boxes = result["bounding_boxes"]
        assert bounding_boxes["boxes"].shape == (max_boxes, 4)
        assert bounding_boxes["boxes"].dtype == np.float32
        assert bounding_boxes["labels"].dtype == np.int32
        np.testing.assert_allclose(bounding_boxes["boxes"][:kept], expected[:kept], atol=1e-4)
        np.testing.assert_array_equal(bounding_boxes["labels"][:kept], np.arange(kept))
        assert (bounding_boxes["boxes"][kept:] == -1).all()
        assert (bounding_boxes["labels"][kept:] == -1).all()
        np.testing.assert_array_equal(result["images"], pixels)
  # Pixel formats refer to `size` when given (the size a later resize gives).
  out = box_ops.to_keras(8, "xyxy", size=(60, 100))(example)["bounding_boxes"]["boxes"]
  np.testing.assert_allclose(out[:5], boxes[:, [1, 0, 3, 2]] * [100, 60, 100, 60], atol=1e-4)
  np.testing.assert_allclose(
      numpy_box_ops.to_keras(pixels, objects, 8, "xyxy", size=(60, 100))["bounding_boxes"]
      ["boxes"], out, atol=1e-4)


def _keras_dataset(count, size, fmt, max_boxes=5, seed=8):
  """A batched tf.data dataset of to_keras examples cut from real photos."""
  rng = np.random.default_rng(seed)
  names = list(PHOTOS)
  examples = [_example(_encode(PHOTOS[names[i % len(names)]]),
                       _objects(random_boxes(rng, int(rng.integers(0, 4)), (200, 200),
                                             (40, 40, 120, 120))), (i, seed))
              for i in range(count)]
  signature = tf.nest.map_structure(
      lambda t: tf.TensorSpec([None] * t.shape.rank, t.dtype), examples[0])
  return tf.data.Dataset.from_generator(lambda: iter(examples), output_signature=signature).map(
      preprocess_ops.compose(box_ops.decode_and_random_crop(size, min_visible=0.0,
                                                            area_range=(0.5, 1.0)),
                             box_ops.to_keras(max_boxes, fmt))).apply(
      tf.data.experimental.assert_cardinality(count))


@pytest.mark.parametrize("fmt", ["xyxy", "rel_yxyx"])
def test_a_batch_goes_straight_into_keras_random_flip(fmt):
  layer = keras.layers.RandomFlip("horizontal", bounding_box_format=fmt, seed=3)
  batches = _keras_dataset(8, (24, 32), fmt).batch(4).map(
      lambda batch: (batch, layer({"images": batch["images"],
                                   "bounding_boxes": dict(batch["bounding_boxes"])})))
  flips = 0
  for before, after in batches:
    for index in range(4):
      image = before["images"][index].numpy().astype(np.float32)
      flipped = np.array_equal(after["images"][index].numpy(), image[:, ::-1])
      assert flipped or np.array_equal(after["images"][index].numpy(), image)
      flips += flipped
      labels = before["bounding_boxes"]["labels"][index].numpy()
      real = labels >= 0
      boxes = before["bounding_boxes"]["boxes"][index].numpy()[real]
      rel = numpy_box_ops.boxes_to_format(boxes, fmt, "rel_yxyx", 24, 32)
      if flipped:
        rel = numpy_box_ops.flip_objects({"bbox": rel})["bbox"]
      expected = numpy_box_ops.boxes_to_format(rel, "rel_yxyx", fmt, 24, 32)
      np.testing.assert_allclose(after["bounding_boxes"]["boxes"][index].numpy()[real], expected,
                                 atol=1e-4)
      np.testing.assert_array_equal(after["bounding_boxes"]["labels"][index].numpy()[~real], -1)
  assert 0 < flips < 8


def test_a_tiny_keras_model_fits_on_the_dataset():
  """Images -> the first object's box (rel_yxyx), examples without objects weighted 0."""
  dataset = _keras_dataset(12, (32, 32), "rel_yxyx", seed=9).map(
      lambda example: (tf.cast(example["images"], tf.float32) / 255,
                       example["bounding_boxes"]["boxes"][0],
                       tf.cast(example["bounding_boxes"]["labels"][0] >= 0, tf.float32))
  ).batch(4)
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.GlobalAveragePooling2D(),
                            keras.layers.Dense(4)])
  model.compile(optimizer="sgd", loss="mse")
  before = [w.copy() for w in model.get_weights()]
  history = model.fit(dataset, epochs=1, verbose=0, shuffle=False)
  assert np.isfinite(history.history["loss"][0])
  assert any(not np.array_equal(a, b) for a, b in zip(before, model.get_weights(), strict=True))


def test_multi_hot():
  op = box_ops.multi_hot(5)
  np.testing.assert_array_equal(op({"labels": tf.constant([3, 1, 3], tf.int64)})["labels"],
                                [0, 1, 0, 1, 0])
  np.testing.assert_array_equal(op({"labels": tf.zeros([0], tf.int64)})["labels"], np.zeros(5))
  np.testing.assert_array_equal(numpy_box_ops.multi_hot([3, 1, 3], 5), [0, 1, 0, 1, 0])
  np.testing.assert_array_equal(numpy_box_ops.multi_hot([], 5), np.zeros(5))
  assert numpy_box_ops.multi_hot([4], 5).dtype == np.float32
  assert op({"labels": tf.constant([4], tf.int64)})["labels"].dtype == tf.float32
  for bad in ([5], [-1]):
    with pytest.raises(tf.errors.InvalidArgumentError):
      op({"labels": tf.constant(bad, tf.int64)})
    with pytest.raises(ValueError):
      numpy_box_ops.multi_hot(bad, 5)


def test_bad_settings_are_refused():
  with pytest.raises(ValueError, match="min_visible"):
    box_ops.decode_and_random_crop(32, min_visible=1.5)
  with pytest.raises(ValueError, match="fit"):
    box_ops.decode_and_fit(32, fit="squash")
  with pytest.raises(ValueError, match="format"):
    box_ops.to_keras(4, "yxhw")
  with pytest.raises(ValueError, match="min_visible"):
    numpy_box_ops.decode_and_random_crop(b"", {}, 32, np.random.default_rng(0), min_visible=-0.1)


def test_numpy_box_ops_do_not_import_tensorflow():
  import subprocess
  import sys
  code = ("import sys; import imagesets.reading.numpy_box_ops; "
          "sys.exit('tensorflow' in sys.modules)")
  assert subprocess.run([sys.executable, "-c", code]).returncode == 0
