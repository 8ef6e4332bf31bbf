"""What a new version costs when it is built on the last one: build, upload, download.

    python benchmarks/incremental_version.py [--images 20000] [--new 0.01]
                                             [--work /tmp/incremental_bench] [--repeat 1]

1. A tree of `--images` real-photo crops (500x333 JPEGs, bursts of near copies:
   imagesets_testing.photo_crops), built as bench:1.0.0 the way `imagesets build` builds
   it (`named_build.build(versioned=True)`).
2. `--new` of that many crops more (another seed) added to the tree, as a team adds photos
   to its folder: bench:1.1.0 built on 1.0.0 (with the file-hash cache 1.0.0's build left,
   and without it, into a copy of the data dir), and, for comparison, in full (`--full`)
   into another data dir. Each build in a fresh process, after `sync` (none pays
   for writing out the last one's files); the whole process's wall time
   (what `imagesets build` takes, TensorFlow's start included) and the build's own.
   `--repeat R`: R rounds of the two, alternated (1.1.0 removed and the caches 1.0.0 left
   put back between rounds), the medians reported and each round's ratio.
3. Both versions published to a folder bucket (1.0.0, then 1.1.0): the bytes uploaded for
   1.1.0 against its size, and the objects copied server-side.
4. A trainer that streamed 1.0.0 through its shard cache moves to 1.1.0: the shards it
   downloads for 1.1.0 against the shards 1.1.0 has that 1.0.0 had not.
"""

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import child_runs
from imagesets.building import stat_cache

NAME = "bench"


def child_build(tree: str, data_dir: str, version: str, full: str, leakage: str) -> dict:
  from imagesets.building import class_folders_builder
  from imagesets.class_folders import named_build

  options = class_folders_builder.ClassFoldersConfig(name=NAME, leakage=leakage)
  start = time.perf_counter()
  builder = named_build.build(tree, NAME, version=version, data_dir=data_dir, versioned=True,
                              from_version=named_build.FULL if full == "1" else named_build.LATEST,
                              log=lambda line: print(line, file=sys.stderr), progress=None,
                              options=options)
  made = sum(len(builder.generation.written(split)) for split in builder.info.splits)
  return {"build_s": time.perf_counter() - start, "made": made}


def child_stream(bucket: str, cache: str, version: str) -> dict:
  """Reads every split of NAME:version from the bucket through the shard cache; returns
  the shard downloads it made (counted at the checked download)."""
  import tensorflow_datasets as tfds
  from imagesets.storage import transfer
  from imagesets.reading import sources
  from imagesets.reading import streaming

  downloads = []
  real = transfer.checked_download

  def counted(bucket_, rel, path, entry, *args, **kwargs):
    downloads.append((rel, entry["size"]))
    return real(bucket_, rel, path, entry, *args, **kwargs)

  transfer.checked_download = counted
  source = sources.open_source(f"{NAME}:{version}", bucket, cache_dir=cache)
  for split in source.builder.info.splits:
    for _ in tfds.as_numpy(streaming.load(f"{NAME}:{version}", split, bucket, cache_dir=cache)):
      pass
  shards = [(rel, size) for rel, size in downloads if "tfrecord-" in rel]
  return {"shard_downloads": len(shards), "shard_bytes": sum(size for _, size in shards)}


def make_tree(root: pathlib.Path, count: int, seed: int, prefix: str) -> None:
  from imagesets_testing import photo_crops

  for index, (picture, data) in enumerate(photo_crops.jpegs(count, seed=seed, scenes=5)):
    path = root / picture.scene / f"{prefix}{index:05d}.jpg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def version_bytes(version_dir: pathlib.Path) -> int:
  return sum(p.stat().st_size for p in version_dir.rglob("*") if p.is_file())


def shard_digests(version_dir: pathlib.Path) -> dict[str, int]:
  import hashlib
  return {hashlib.sha256(p.read_bytes()).hexdigest(): p.stat().st_size
          for p in version_dir.glob("*.tfrecord-*")}


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--images", type=int, default=20000)
  parser.add_argument("--new", type=float, default=0.01)
  parser.add_argument("--work", default="/tmp/incremental_bench")
  parser.add_argument("--leakage", default="warn", choices=["warn", "off"],
                      help="off: no fingerprints, duplicate report nor page (their cost)")
  parser.add_argument("--repeat", type=int, default=1,
                      help="rounds of (1.1.0 on 1.0.0, 1.1.0 in full), alternated: medians")
  args = parser.parse_args()
  work = pathlib.Path(args.work)
  old_tree, new_tree = work / f"tree_{args.images}", work / f"tree_{args.images}_grown"
  if not old_tree.exists():
    make_tree(old_tree, args.images, seed=0, prefix="")
  shutil.rmtree(new_tree, ignore_errors=True)
  subprocess.run(["cp", "-al", str(old_tree), str(new_tree)], check=True)
  added = round(args.images * args.new)
  for name in ("data", "data_uncached", "data_full", "bucket", "cache"):
    shutil.rmtree(work / name, ignore_errors=True)
  data, data_full = work / "data", work / "data_full"
  script = __file__

  def timed(*child_args):
    # Each build starts with nothing of the last one's left to write: the kernel writes a
    # full build's ~450 MB out in the seconds after it, on the build that follows (on a
    # team's machine, a new version comes days after the last).
    os.sync()
    start = time.perf_counter()
    result = child_runs.run(script, *child_args)
    return {**result, "process_s": time.perf_counter() - start}

  # A team's photos were not all written in the seconds before a build (`cp -al` just gave
  # every file a new ctime): the file-hash cache trusts no file that was (stat_cache).
  time.sleep(stat_cache.RACY_SECONDS)
  base = timed("build", new_tree, data, "1.0.0", "0", args.leakage)
  make_tree(new_tree, added, seed=1, prefix="new_")
  uncached = work / "data_uncached"
  subprocess.run(["cp", "-al", str(data), str(uncached)], check=True)
  (uncached / NAME / ".file_hashes.json").unlink()
  # (what a build leaves beside the versions: put back before each round, as 1.0.0 left it)
  left = {p: p.read_bytes() for p in (data / NAME).glob(".*") if p.is_file()}
  without_cache = timed("build", new_tree, uncached, "1.1.0", "0", args.leakage)
  rounds = []
  for round_ in range(args.repeat):
    if round_:
      shutil.rmtree(data / NAME / "1.1.0")
      shutil.rmtree(data_full)
      for path, content in left.items():
        path.write_bytes(content)
    rounds.append((timed("build", new_tree, data, "1.1.0", "0", args.leakage),
                   timed("build", new_tree, data_full, "1.1.0", "1", args.leakage)))
  median = lambda runs: sorted(runs, key=lambda run: run["build_s"])[len(runs) // 2]
  incremental, full = median([i for i, _ in rounds]), median([f for _, f in rounds])
  v1, v2 = data / NAME / "1.0.0", data / NAME / "1.1.0"
  size = version_bytes(v2)

  from imagesets.publishing import publish
  bucket = f"file://{work / 'bucket'}"
  publish.publish(f"{NAME}:1.0.0", data, bucket, progress=False)
  published = publish.publish(f"{NAME}:1.1.0", data, bucket, progress=False)
  first = child_runs.run(script, "stream", bucket, work / "cache", "1.0.0")
  moved = child_runs.run(script, "stream", bucket, work / "cache", "1.1.0")
  old_shards, new_shards = shard_digests(v1), shard_digests(v2)
  unseen = {d: s for d, s in new_shards.items() if d not in old_shards}
  # 1.2.0: one photo relabelled (moved to another class folder), one removed.
  photos = sorted(new_tree.rglob("*.jpg"))
  other = next(p for p in sorted(new_tree.iterdir()) if p.name != photos[0].parent.name)
  photos[0].rename(other / photos[0].name)
  photos[len(photos) // 2].unlink()
  relabel = timed("build", new_tree, data, "1.2.0", "0", args.leakage)
  relabel_published = publish.publish(f"{NAME}:1.2.0", data, bucket, progress=False)
  relabel_size = version_bytes(data / NAME / "1.2.0")

  print(f"{args.images:,} photos + {added:,} new ({args.new:.0%}), leakage {args.leakage}, "
        f"{time.strftime('%Y-%m-%d %H:%M')} UTC, {os.cpu_count()} cores")
  print(f"  full build of 1.0.0:       {base['process_s']:7.1f} s process, "
        f"{base['build_s']:6.1f} s build, {base['made']:,} made")
  print(f"  1.1.0 built on 1.0.0:      {incremental['process_s']:7.1f} s process, "
        f"{incremental['build_s']:6.1f} s build, {incremental['made']:,} made")
  print(f"  the same, no hash cache:   {without_cache['process_s']:7.1f} s process, "
        f"{without_cache['build_s']:6.1f} s build, {without_cache['made']:,} made")
  print(f"  1.1.0 in full (--full):    {full['process_s']:7.1f} s process, "
        f"{full['build_s']:6.1f} s build, {full['made']:,} made")
  print(f"  built on / full: {incremental['process_s'] / full['process_s']:.1%} of the "
        f"process wall, {incremental['build_s'] / full['build_s']:.1%} of the build's "
        f"(no hash cache: {without_cache['process_s'] / full['process_s']:.1%}, "
        f"{without_cache['build_s'] / full['build_s']:.1%})")
  if args.repeat > 1:
    print(f"  {args.repeat} rounds (medians above): built on / full, build's "
          + ", ".join(f"{i['build_s'] / f['build_s']:.1%}" for i, f in rounds)
          + "; process " + ", ".join(f"{i['process_s'] / f['process_s']:.1%}" for i, f in rounds))
  print(f"  publish 1.1.0: {published.num_bytes / 2**20:.1f} MiB uploaded of "
        f"{size / 2**20:.1f} MiB ({published.num_bytes / size:.1%}), {published.uploaded} "
        f"objects uploaded, {published.copied} copied server-side")
  print(f"  trainer 1.0.0 -> 1.1.0: {moved['shard_downloads']} shard downloads "
        f"({moved['shard_bytes'] / 2**20:.1f} MiB); shards new in 1.1.0: {len(unseen)} "
        f"({sum(unseen.values()) / 2**20:.1f} MiB); 1.0.0 took {first['shard_downloads']}")
  print(f"  1.2.0 (a relabel and a removal) on 1.1.0: {relabel['process_s']:.1f} s process, "
        f"{relabel['build_s']:.1f} s build, {relabel['made']} made; publish: "
        f"{relabel_published.num_bytes / 2**20:.1f} MiB uploaded of {relabel_size / 2**20:.1f} "
        f"MiB ({relabel_published.num_bytes / relabel_size:.1%})")
  print(json.dumps({"base": base, "incremental": incremental, "uncached": without_cache,
                    "full": full, "rounds": rounds,
                    "uploaded": published.num_bytes, "version_bytes": size,
                    "moved": moved, "unseen": len(unseen)}))


if __name__ == "__main__":
  if sys.argv[1:2] == ["--child"]:
    kind, *rest = sys.argv[2:]
    print(json.dumps(child_build(*rest) if kind == "build" else child_stream(*rest)))
  else:
    main()
