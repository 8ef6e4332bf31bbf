"""imagesets.image_dataset_from_directory against keras.utils.image_dataset_from_directory.

    python benchmarks/from_directory.py [--photos 3000] [--crops 0] [--phone 300]
        [--work /tmp/fromdir_bench] [--content-check] [--compare-with CHECKOUT]

Trees made once with PIL (imagesets_testing.sample_images: smooth colour fields, soft
shapes and grain, so they compress and decode like photos; photo_crops: real photos):

* photos: `--photos` JPEGs of 500x375 (quality 90), 5 classes;
* crops:  `--crops` real-photo crops, JPEGs of 500x333 (quality 90, ~23 KB: cheaper for
  keras to decode than the photos), 5 classes;
* phone:  `--phone` JPEGs of 4032x3024 (quality 90, ~3 MB each), 5 classes.

For each tree, each run in a fresh process (TensorFlow started, both functions imported and
the heap collected before the clock, the disk's writeback of the run before done:
`os.sync()`; the full garbage collections during a run are counted): keras'
first call + one epoch, keras' second call + one epoch (keras has no cache: the same
work), ours first call (build into an empty cache + one epoch), ours second call (reads
the build + one epoch); with `--content-check` also ours second call with
`content_check=True` (every file hashed and compared with the build's content fingerprint);
with `--compare-with CHECKOUT` also ours second call with the code of that copy of the
repository (before/after a change in the same rounds). The epoch is a `for` loop over an
iterator, deleted at its end as the loop's own would be; "end wait" is the time from the
last batch to that deletion's return (tf.data's autotune thread made it wait, see
keras_pixels.without_autotune).
224x224, batch 64, shuffle on, seed 1. `--photos 0` / `--phone 0` skip a tree. Reported: wall seconds,
images/s and CPU ms per image (user + system of the whole process, all threads and
worker processes; split into the call, which for ours 1st is the build, and its epoch), medians of `--repeats` interleaved rounds, and the goals' ratios
from this one run, by wall clock and by CPU time (the first call + first epoch against
keras' first call + first epoch also as the median of each round's own ratio); then how far the stored pixels are from
keras' own output for the same files (we store keras' output rounded to uint8; keras
resizes the originals every epoch). `--phone 0` leaves the phone photos out (the machine is shared: wall clock swings
by up to 2x between identical runs, CPU time per image barely moves).
"""

import argparse
import contextlib
import gc
import json
import os
import pathlib
import resource
import shutil
import statistics
import tempfile
import time

import numpy as np

import child_runs

CLASSES = ["daisy", "dandelion", "roses", "sunflowers", "tulips"]
SIZE, BATCH, SEED = (224, 224), 64, 1
RUNS = ["keras 1st", "keras 2nd", "ours 1st", "ours 2nd"]
CONTENT_CHECK_RUN = "ours 2nd, content check"
OTHER_CODE_RUN = "ours 2nd, --compare-with code"
PIXEL_FILES = 300  # files compared pixel by pixel with keras


def make_photos(root: pathlib.Path, count: int) -> None:
  from imagesets_testing import sample_images
  for i in range(count):
    path = root / CLASSES[i % 5] / f"{i:05d}.jpg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(sample_images.jpeg(375, 500, seed=i))


def make_crops(root: pathlib.Path, count: int) -> None:
  """Real-photo crops (imagesets_testing.photo_crops: 500x333 JPEGs, quality 90, of five
  real scenes, half of them in bursts of near copies)."""
  from imagesets_testing import photo_crops
  for i, (_, data) in enumerate(photo_crops.jpegs(count, seed=1)):
    path = root / CLASSES[i % 5] / f"{i:05d}.jpg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def make_phone(root: pathlib.Path, count: int) -> None:
  """12 MP photos: 6 base scenes (slow to draw), each shifted, mirrored and re-grained."""
  from imagesets_testing import sample_images
  bases = [sample_images.photo(3024, 4032, seed=s).astype(np.int16) for s in range(6)]
  rng = np.random.default_rng(0)
  for i in range(count):
    image = np.roll(bases[i % 6], (rng.integers(3024), rng.integers(4032)), axis=(0, 1))
    if i % 2:
      image = image[:, ::-1]
    grain = rng.integers(-4, 5, size=(3024, 4032, 1), dtype=np.int16)
    image = np.clip(image + grain, 0, 255).astype(np.uint8)
    path = root / CLASSES[i % 5] / f"IMG_{i:04d}.jpg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(sample_images.encode(image, "JPEG", quality=90))


def tree(work: pathlib.Path, kind: str, count: int) -> pathlib.Path:
  root = work / f"{kind}_{count}"
  done = root / ".complete"
  if not done.exists():
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    started = time.perf_counter()
    {"photos": make_photos, "crops": make_crops, "phone": make_phone}[kind](root, count)
    done.write_text("")
    print(f"made {count} {kind} JPEGs in {time.perf_counter() - started:.0f} s")
  return root


def one_run(which: str, root: str, cache: str) -> dict:
  """In a child process: one call of the function and one epoch over what it returns."""
  import tensorflow as tf
  if which.startswith("ours"):
    # Resolved before the clock, as `import keras` loads keras.utils: the first access
    # imports the module (and TFDS, 0.4 s), once a process.
    from imagesets import image_dataset_from_directory
    make = lambda: image_dataset_from_directory(  # noqa: E731
        root, image_size=SIZE, batch_size=BATCH, seed=SEED, cache_dir=cache, verbose=False,
        content_check=which == CONTENT_CHECK_RUN)
  else:
    import keras
    make = lambda: keras.utils.image_dataset_from_directory(  # noqa: E731
        root, image_size=SIZE, batch_size=BATCH, seed=SEED, verbose=False)
  tf.constant(0)  # TensorFlow's runtime up before the clock
  # Both functions start from a collected heap: the first full collection after importing
  # TensorFlow and keras (0.17 s of CPU over their ~340,000 objects) otherwise lands in
  # whichever call or epoch happens to allocate past the threshold, ours or keras'.
  gc.collect()
  full_collections = gc.get_stats()[2]["collections"]
  cpu_before = _cpu_seconds()
  started = time.perf_counter()
  images = 0
  dataset = make()
  call = {"call_wall": time.perf_counter() - started, "call_cpu": _cpu_seconds() - cpu_before}
  iterator = iter(dataset)
  for batch, _ in iterator:
    images += int(batch.shape[0])
  last_batch = time.perf_counter()
  del iterator  # what the end of a `for batch in dataset` loop does
  wall = time.perf_counter() - started
  return {"images": images, "wall": wall, "cpu": _cpu_seconds() - cpu_before,
          "end_wait": started + wall - last_batch,
          "full_gc": gc.get_stats()[2]["collections"] - full_collections, **call}


def _stored(cache: str, count: int):
  """(file name, stored uint8 pixels) of `count` examples of the cached build's train split."""
  import tensorflow_datasets as tfds
  (version_dir,) = pathlib.Path(cache).glob("*/1.0.0")
  ds = tfds.builder_from_directory(version_dir).as_dataset(split="train").take(count)
  return [(example["file_name"].decode(), example["image"]) for example in tfds.as_numpy(ds)]


def pixel_difference(root: str, cache: str) -> dict:
  """In a child process: the stored pixels (what a later call returns, cast to float32)
  against keras' own output for the same files (keras' `_load_image_tf`: read, decode,
  bilinear resize). Mean, 99th percentile and max absolute difference over 0-255 values."""
  from keras.src.utils import image_dataset_utils
  differences = []
  for name, image in _stored(cache, PIXEL_FILES):
    theirs = image_dataset_utils._load_image_tf(  # pylint: disable=protected-access
        os.path.join(root, name), SIZE, 3, "bilinear", "channels_last").numpy()
    differences.append(np.abs(image.astype(np.float32) - theirs))
  stacked = np.stack(differences)
  return {"mean": float(stacked.mean()), "max": float(stacked.max()),
          "p99": float(np.percentile(stacked, 99)), "files": len(differences),
          "stored_shape": list(differences[0].shape)}


def per_image_work(root: str, cache: str) -> dict:
  """In a child process: CPU ms per image of the per-image work alone, tf.data map in
  parallel: keras' (decode the original, bilinear resize to 224x224; and the decode alone,
  which the first call's build cannot skip) and ours (the stored raw pixels to a float32
  tensor of that shape), bytes in memory; and reading the cached train split's records
  from disk (page cache) with nothing done to them, the floor of any later epoch."""
  import tensorflow as tf
  stored = _stored(cache, PIXEL_FILES * 3)
  originals = [pathlib.Path(root, name).read_bytes() for name, _ in stored]
  raws = [image.tobytes() for _, image in stored]
  decode = lambda data: tf.io.decode_image(data, channels=3, expand_animations=False)  # noqa: E731
  resize = lambda data: tf.image.resize(decode(data), SIZE)  # noqa: E731
  raw = lambda data: tf.cast(tf.reshape(tf.io.decode_raw(data, tf.uint8), (*SIZE, 3)),  # noqa: E731
                             tf.float32)
  in_memory = lambda datas, fn: tf.data.Dataset.from_tensor_slices(datas).map(  # noqa: E731
      fn, num_parallel_calls=tf.data.AUTOTUNE).batch(BATCH)
  (version_dir,) = pathlib.Path(cache).glob("*/1.0.0")
  shards = sorted(str(path) for path in version_dir.glob("*-train.tfrecord-*"))
  count = sum(1 for _ in tf.data.TFRecordDataset(shards))
  work = {"keras: original, decode + resize": (len(originals), lambda: in_memory(originals, resize)),
          "ours: the same through PixelFeed (files from disk), taken in order": (
              len(originals), lambda: _fed([name for name, _ in stored], root)),
          "keras: decode alone": (len(originals), lambda: in_memory(originals, decode)),
          "ours: stored raw pixels to float32": (len(raws), lambda: in_memory(raws, raw)),
          "ours: read the cached records from disk": (
              count, lambda: tf.data.TFRecordDataset(shards).batch(BATCH))}
  times = {name: [] for name in work}
  for _ in range(5):
    for name, (images, make) in work.items():
      pipeline = make()
      before = _cpu_seconds()
      for _ in pipeline:
        pass
      times[name].append((_cpu_seconds() - before) / images * 1000)
  return {name: statistics.median(values) for name, values in times.items()}


def _fed(names: list[str], root: str):
  """The first call's decoding as its build runs it: keras' ops in a tf.data map ahead of
  the takers (`keras_pixels.PixelFeed`, files read from disk), every image taken in order."""
  from imagesets.building import keras_pixels
  feed = keras_pixels.PixelFeed(root, names, keras_pixels.KerasImage(*SIZE))
  return (feed.take(name) for name in names)


def _cpu_seconds() -> float:
  own = resource.getrusage(resource.RUSAGE_SELF)
  children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the build's worker processes
  return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _round_ratio(runs: dict, measure: str) -> float:
  """Median over the rounds of ours 1st / keras 1st, each round's pair measured together."""
  return statistics.median(ours[measure] / theirs[measure]
                           for ours, theirs in zip(runs["ours 1st"], runs["keras 1st"]))


@contextlib.contextmanager
def _code_of(checkout: pathlib.Path | None):
  """Child runs import `imagesets` (and `imagesets_testing`) from `checkout` (a copy of
  this repository, e.g. `git worktree add /tmp/before HEAD~1`), or as installed."""
  if checkout is None:
    yield
    return
  with tempfile.TemporaryDirectory() as packages:
    os.symlink(checkout.resolve() / "datasets", os.path.join(packages, "imagesets"))
    os.symlink(checkout.resolve() / "testing", os.path.join(packages, "imagesets_testing"))
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = packages + (os.pathsep + before if before else "")
    try:
      yield
    finally:
      if before is None:
        del os.environ["PYTHONPATH"]
      else:
        os.environ["PYTHONPATH"] = before


def bench(name: str, root: pathlib.Path, work: pathlib.Path, goal_second: float,
          repeats: int, content_check: bool, other_code: pathlib.Path | None = None) -> None:
  cache = work / f"cache_{name.split()[0]}"
  runs = {which: [] for which in RUNS + ([CONTENT_CHECK_RUN] if content_check else []) +
          ([OTHER_CODE_RUN] if other_code else [])}
  for _ in range(repeats):  # interleaved, so a load change hits every run alike
    shutil.rmtree(cache, ignore_errors=True)  # "ours 1st" builds into an empty cache
    for which in runs:
      # The 300 MB the build before wrote (or the cache removed) reach the disk now, not
      # during the next run's clock: a run right after a build otherwise shared the cores
      # with the kernel's writeback (ours 2nd 0.73 s of wall for 0.54 s of CPU, 0.37 s
      # in the round where it did not).
      os.sync()
      with _code_of(other_code if which == OTHER_CODE_RUN else None):
        runs[which].append(child_runs.run(__file__, which, root, cache))
  count = runs["keras 1st"][0]["images"]
  size = sum(p.stat().st_size for p in root.rglob("*.jpg")) / count / 1e6
  print(f"\n{name}: {count} images, {size:.2f} MB each; medians of {repeats} rounds")
  print("| run | wall s | img/s | CPU ms / image (the call, its epoch) | end wait s | full GCs |")
  print("|---|---|---|---|---|---|")
  wall, cpu, busy = {}, {}, {}
  for which, results in runs.items():
    assert all(r["images"] == count for r in results), (which, results)
    wall[which] = statistics.median(r["wall"] for r in results)
    busy[which] = statistics.median(r["wall"] - r["end_wait"] for r in results)
    cpu[which] = statistics.median(r["cpu"] for r in results) / count
    walls = ", ".join(f"{r['wall']:.2f}" for r in results)
    waits = ", ".join(f"{r['end_wait']:.2f}" for r in results)
    call_cpu = statistics.median(r["call_cpu"] for r in results) / count
    print(f"| {which} | {wall[which]:.2f} ({walls}) | {count / wall[which]:,.0f} | "
          f"{1000 * cpu[which]:.2f} (call {1000 * call_cpu:.2f}, epoch "
          f"{1000 * (cpu[which] - call_cpu):.2f}) | {waits} | "
          f"{', '.join(str(r['full_gc']) for r in results)} |")
  keras_wall = statistics.mean([wall["keras 1st"], wall["keras 2nd"]])
  keras_cpu = statistics.mean([cpu["keras 1st"], cpu["keras 2nd"]])
  pixels = child_runs.run(__file__, "pixels", root, cache)
  print(f"pixels against keras ({pixels['files']} files, stored "
        f"{pixels['stored_shape']} uint8): mean |difference| {pixels['mean']:.2f}, 99th "
        f"percentile {pixels['p99']:.1f}, max {pixels['max']:.1f} (of 255)")
  work = child_runs.run(__file__, "work", root, cache)
  print("per-image work alone (CPU ms, bytes in memory): " +
        ", ".join(f"{name} {ms:.3f}" for name, ms in work.items()))
  print(f"second call: {keras_wall / wall['ours 2nd']:.2f}x keras by wall, "
        f"{keras_cpu / cpu['ours 2nd']:.2f}x by CPU (goal >= {goal_second}x; keras: the mean "
        "of its two rows, the same work)")
  print(f"first call + first epoch (build included) against keras' first call + first epoch "
        f"(goal <= 1.5x): {wall['ours 1st'] / wall['keras 1st']:.2f}x by wall, "
        f"{cpu['ours 1st'] / cpu['keras 1st']:.2f}x by CPU; against the mean of keras' two "
        f"rows: {wall['ours 1st'] / keras_wall:.2f}x by wall, "
        f"{cpu['ours 1st'] / keras_cpu:.2f}x by CPU; median of the rounds' own ratios "
        f"(each round's two runs a few seconds apart): {_round_ratio(runs, 'wall'):.2f}x by "
        f"wall, {_round_ratio(runs, 'cpu'):.2f}x by CPU")
  keras_busy = statistics.mean([busy["keras 1st"], busy["keras 2nd"]])
  print(f"second call by wall without the end waits (each run's wall less its own end wait, "
        f"keras' too): {keras_busy / busy['ours 2nd']:.2f}x keras" + (
            f"; with the code of {other_code}: {keras_busy / busy[OTHER_CODE_RUN]:.2f}x"
            if OTHER_CODE_RUN in runs else ""))
  if OTHER_CODE_RUN in runs:
    print(f"second call with the code of {other_code}: {keras_wall / wall[OTHER_CODE_RUN]:.2f}x "
          f"keras by wall, {keras_cpu / cpu[OTHER_CODE_RUN]:.2f}x by CPU")
  if CONTENT_CHECK_RUN in runs:
    print(f"second call with content_check=True: {keras_wall / wall[CONTENT_CHECK_RUN]:.2f}x "
          f"keras by wall, {keras_cpu / cpu[CONTENT_CHECK_RUN]:.2f}x by CPU")


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--photos", type=int, default=3000)
  parser.add_argument("--crops", type=int, default=0,
                      help="a tree of real-photo crops (500x333) of this many JPEGs")
  parser.add_argument("--phone", type=int, default=300)
  parser.add_argument("--work", default="/tmp/fromdir_bench")
  parser.add_argument("--repeats", type=int, default=3, help="rounds; medians are reported")
  parser.add_argument("--content-check", action="store_true",
                      help="also time ours second call with content_check=True")
  parser.add_argument("--compare-with", type=pathlib.Path, metavar="CHECKOUT",
                      help="also time the second call with the code of another copy of this "
                      "repository (e.g. `git worktree add /tmp/before HEAD`), reading the same "
                      "build, in the same rounds")
  parser.add_argument("--child", nargs=3, metavar=("RUN", "ROOT", "CACHE"),
                      help="(internal) one run in this process")
  args = parser.parse_args()
  if args.child:
    which, root, cache = args.child
    child = {"pixels": pixel_difference, "work": per_image_work}.get(which, None)
    print(json.dumps(child(root, cache) if child else one_run(which, root, cache)))
    return
  work = pathlib.Path(args.work)
  print(f"load average before: {os.getloadavg()}, cores: {os.cpu_count()}")
  if args.photos:
    bench("photos 500x375", tree(work, "photos", args.photos), work, 2.5, args.repeats,
          args.content_check, args.compare_with)
  if args.crops:
    bench("real-photo crops 500x333", tree(work, "crops", args.crops), work, 2.5, args.repeats,
          args.content_check, args.compare_with)
  if args.phone:
    bench("phone 4032x3024", tree(work, "phone", args.phone), work, 30, args.repeats,
          args.content_check, args.compare_with)
  print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
  main()
