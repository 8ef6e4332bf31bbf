"""Training straight from a bucket against reading the same version from local disk.

Builds synthetic_images/default (800 + 200 PNG images, ~150 MB, 16 shards a split), publishes
it to the S3 test server (SeaweedFS on 127.0.0.1), optionally behind a proxy that caps its
bandwidth to a cloud-like figure, then runs `classification_train` for `--epochs` epochs in a
fresh process per configuration:

  local           data_dir = the local build
  bucket          data_dir = s3://..., cache_limit=None (cold cache, then everything cached)
  bucket, 1/4     data_dir = s3://..., cache_limit = a quarter of the version
  Grain, 2 workers, 1/4   grain_pipeline.classification_train(worker_count=2) from the
                  bucket under a quarter limit: the bytes its processes downloaded, per
                  epoch, against the version's train shards (each worker reads its own
                  shards: at most once an epoch per machine)

and reports, per configuration and epoch: images/s (ratio against local disk), the shard
downloads and bytes downloaded in that epoch; then time to the first batch, the cache
folder's peak size and the process's peak RSS; and the CPU seconds each epoch cost the
training process and the S3 server together: on this 2-core machine, where the server shares
the cores with training, their ratio to local disk's bounds what any cache could reach.

Run by hand (not a test):
  .venv/bin/python benchmarks/stream_from_bucket.py [--mbps 800] [--epochs 3]
"""

import argparse
import contextlib
import json
import os
import pathlib
import resource
import sys
import tempfile
import threading
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

SPEC = "synthetic_images/default:1.0.0"
SHARDS = 16


def folder_bytes(folder: pathlib.Path) -> int:
  total = 0
  for root, _, files in os.walk(folder):
    for name in files:
      with contextlib.suppress(FileNotFoundError):
        total += os.stat(os.path.join(root, name)).st_size
  return total


def server_cpu(pid: int | None) -> float:
  """CPU seconds the server process has used (0 without one)."""
  if not pid:
    return 0.0
  fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
  return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def cpu_now(args) -> tuple[float, float]:
  """CPU seconds so far of this process (all its threads), and of the server."""
  return time.process_time(), server_cpu(args.server_pid)


def child(args) -> None:
  """One configuration in this fresh process; prints one JSON line."""
  import imagesets
  from imagesets.reading import shard_cache
  cache = pathlib.Path(args.cache)
  peak, stop = [0], threading.Event()

  def poll():
    while not stop.is_set():
      peak[0] = max(peak[0], folder_bytes(cache) if cache.exists() else 0)
      time.sleep(0.01)

  threading.Thread(target=poll, daemon=True).start()
  start = time.perf_counter()
  if args.read_only:
    return read_only(args, cache)
  if args.grain_workers:
    return grain_row(args, cache)
  ds = imagesets.classification_train(
      SPEC, data_dir=args.data_dir, batch_size=args.batch_size, image_size=224, seed=0,
      num_epochs=args.epochs, shuffle_buffer=args.shuffle_buffer,
      # (a local data_dir is read in place: no cache options)
      **({"cache_dir": cache, "cache_limit": None if args.limit == "none" else int(args.limit)}
         if "://" in args.data_dir else {}))
  per_epoch = 800 // args.batch_size
  marks, first, counts, cpu = [], None, [shard_cache.process_stats()], []
  for step, _ in enumerate(ds, 1):
    if first is None:
      first = time.perf_counter() - start
      cpu.append(cpu_now(args))
    if step % per_epoch == 0:
      marks.append(time.perf_counter())
      counts.append(shard_cache.process_stats())
      cpu.append(cpu_now(args))
  stop.set()
  # Epoch 1 from its first batch (time to it: `first_batch_s`, mostly the shuffle buffer).
  epochs = [per_epoch * args.batch_size / (b - a) for a, b in zip([start + first] + marks, marks)]
  downloads = [b["downloads"] - a["downloads"] for a, b in zip(counts, counts[1:])]
  mib = [(b["bytes"] - a["bytes"]) / 2**20 for a, b in zip(counts, counts[1:])]
  whole = per_epoch * args.batch_size * len(marks) / (marks[-1] - start - first)
  print(json.dumps({"first_batch_s": first, "img_s": epochs, "img_s_all": whole, "downloads": downloads,
                    "cpu_s": [b[0] - a[0] + b[1] - a[1] for a, b in zip(cpu, cpu[1:])],
                    "server_cpu_s": [b[1] - a[1] for a, b in zip(cpu, cpu[1:])],
                    "mib": mib, "peak_cache": peak[0],
                    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def read_only(args, cache) -> None:
  """The read side alone (download, check, read the records; no decoding): the most a
  training pipeline on this machine can get from this bucket and limit."""
  from imagesets.reading import sources, streaming
  source = sources.open_source(SPEC, args.data_dir, cache_dir=cache,
                               cache_limit=None if args.limit == "none" else int(args.limit))
  ds = streaming.records(source, "train", shuffle=True, seed=0, num_epochs=args.epochs)
  start, marks, count = time.perf_counter(), [], 0
  for _ in ds:
    count += 1
    if count % 800 == 0:
      marks.append(time.perf_counter())
  epochs = [800 / (b - a) for a, b in zip([start] + marks, marks)]
  print(json.dumps({"img_s": epochs, "img_s_all": 800 * len(marks) / (marks[-1] - start)}))


def grain_row(args, cache) -> None:
  """Grain's loader with worker processes under the limit: bytes downloaded, counted by a
  proxy of this process that all of them (its workers inherit the endpoint) go through."""
  from imagesets.reading import grain_pipeline
  from imagesets_testing.fault_proxy import FaultProxy
  host, port = os.environ["AWS_ENDPOINT_URL"].split("//")[1].split(":")
  proxy = FaultProxy((host, int(port)))
  os.environ["AWS_ENDPOINT_URL"] = proxy.url
  loader = grain_pipeline.classification_train(
      SPEC, data_dir=args.data_dir, batch_size=args.batch_size, image_size=224, seed=0,
      num_epochs=args.epochs, worker_count=args.grain_workers, cache_dir=cache,
      cache_limit=None if args.limit == "none" else int(args.limit))
  start, images, marks, served = time.perf_counter(), 0, [], [0]
  for batch in loader:
    images += len(batch["label"])
    if images >= 800 * (len(marks) + 1):
      marks.append(time.perf_counter())
      served.append(proxy.served)
  marks.append(time.perf_counter())
  served.append(proxy.served)
  epochs = [800 / (b - a) for a, b in zip([start] + marks, marks)][:args.epochs]
  print(json.dumps({"img_s": epochs, "mib": [(b - a) / 2**20 for a, b in zip(served, served[1:])],
                    "mib_all": proxy.served / 2**20}))


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--child", action="store_true")
  parser.add_argument("--data-dir")
  parser.add_argument("--cache")
  parser.add_argument("--limit", default="none")
  parser.add_argument("--epochs", type=int, default=3)
  parser.add_argument("--batch-size", type=int, default=32)
  parser.add_argument("--read-only", action="store_true")
  parser.add_argument("--grain-workers", type=int, default=0)
  parser.add_argument("--server-pid", type=int, default=0)
  parser.add_argument("--rounds", type=int, default=1,
                      help="run the configurations this many times, interleaved, and print "
                           "the median of each round's ratios to local disk")
  # Small against the 800-image epoch: with the pipelines' default (2,048), filling the
  # buffer reads 2.5 epochs before the first batch, so "epoch 1" would time the reading
  # (and downloads) of three.
  parser.add_argument("--shuffle-buffer", type=int, default=128)
  parser.add_argument("--mbps", type=float, default=None,
                      help="cap the bucket's bandwidth (megabits/s), e.g. 800")
  args = parser.parse_args()
  if args.child:
    return child(args)

  import bucket_servers
  import child_runs
  import tensorflow_datasets as tfds
  import imagesets  # noqa: F401
  from imagesets.publishing import publish
  from imagesets_testing.fault_proxy import FaultProxy

  with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
    tmp = pathlib.Path(tmp)
    local = tmp / "tfds"
    tfds.builder("synthetic_images/default", data_dir=local).download_and_prepare(
        download_config=tfds.download.DownloadConfig(num_shards=SHARDS))
    version = local / "synthetic_images/default/1.0.0"
    size = sum(p.stat().st_size for p in version.iterdir())
    (tmp / "weed").mkdir()
    s3 = stack.enter_context(bucket_servers.seaweedfs_s3(tmp / "weed"))
    server = next(int(p.name) for p in pathlib.Path("/proc").iterdir() if p.name.isdigit()
                  and (p / "cmdline").read_bytes().startswith(b"/")
                  and b"weed\0mini" in (p / "cmdline").read_bytes()
                  and f"-dir={tmp / 'weed'}".encode() in (p / "cmdline").read_bytes())
    endpoint = s3
    if args.mbps:  # (a proxy relays every byte in this process: only when capping)
      host, port = s3.split("//")[1].split(":")
      proxy = FaultProxy((host, int(port)), bytes_per_second=args.mbps * 1e6 / 8)
      stack.callback(proxy.close)
      endpoint = proxy.url
    stack.enter_context(bucket_servers.environment(
        {**bucket_servers.STATIC_ENV, "AWS_ENDPOINT_URL": endpoint}))
    url = f"s3://{bucket_servers.BUCKET}/bench/tfds"
    publish.publish(SPEC, local, url, progress=False)
    train = sum(p.stat().st_size for p in version.glob("*-train.*"))
    shard = max(p.stat().st_size for p in version.glob("*-train.*"))
    print(f"{SPEC}: {size / 2**20:.1f} MiB, train {train / 2**20:.1f} MiB in {SHARDS} shards "
          f"(largest {shard / 2**20:.1f} MiB); bandwidth cap: "
          f"{f'{args.mbps:.0f} Mbit/s' if args.mbps else 'none'}; {args.epochs} epochs")
    def one_round(r):  # the configurations one after another, each with a cold cache
      return {
          name: child_runs.run(__file__, "--data-dir", data_dir, "--cache", tmp / f"c{r}-{i}",
                               "--limit", limit, "--epochs", args.epochs,
                               "--shuffle-buffer", args.shuffle_buffer, "--server-pid", server)
          for i, (name, data_dir, limit) in enumerate([
              ("local disk", local, "none"),
              ("bucket, cache_limit=None", url, "none"),
              ("bucket, cache_limit=1/4 of the version", url, size // 4)])
      }
    rounds = [one_round(r) for r in range(args.rounds)]
    rows = rounds[0]
    # The read side alone, cold, in the same run: a ceiling set by the bucket and the
    # machine (downloads, SHA-256 checks and the training's decoding share the cores).
    ceilings = {
        name: child_runs.run(__file__, "--data-dir", url, "--cache", tmp / f"r{i}",
                             "--limit", limit, "--epochs", args.epochs, "--read-only")
        for i, (name, limit) in enumerate([("cache_limit=None", "none"),
                                           ("cache_limit=1/4", size // 4)])}
    grain = child_runs.run(__file__, "--data-dir", url, "--cache", tmp / "g", "--limit",
                           size // 4, "--epochs", args.epochs, "--grain-workers", 2)
    base = rows["local disk"]["img_s"]
    epochs = range(args.epochs)
    print("\n| read from | " + " | ".join(f"epoch {e + 1}: img/s (vs local), downloads, MiB"
                                        for e in epochs)
          + " | all epochs: img/s (vs local) | first batch | peak cache | peak RSS |")
    print("|---|" + "---|" * (args.epochs + 4))
    for name, row in rows.items():
      cells = [f"{row['img_s'][e]:.0f} ({row['img_s'][e] / base[e]:.2f}x), "
               f"{row['downloads'][e]}, {row['mib'][e]:.1f}" for e in epochs]
      whole = f"{row['img_s_all']:.0f} ({row['img_s_all'] / rows['local disk']['img_s_all']:.2f}x)"
      print(f"| {name} | " + " | ".join(cells) + f" | {whole} | {row['first_batch_s']:.2f} s | "
            f"{row['peak_cache'] / 2**20:.1f} MiB | {row['peak_rss_mib']:.0f} MiB |")
    print("\nThe read side alone (records downloaded, checked and read; nothing decoded), "
          "cold cache, img/s per epoch:")
    for name, row in ceilings.items():
      print(f"  {name}: " + ", ".join(f"{x:.0f}" for x in row["img_s"])
            + f"; all epochs {row['img_s_all']:.0f}")
    print("\nGrain, worker_count=2, cache_limit=1/4, from the bucket: img/s per epoch "
          + ", ".join(f"{x:.0f}" for x in grain["img_s"])
          + "; MiB downloaded per epoch (as the main process saw them) "
          + ", ".join(f"{x:.1f}" for x in grain["mib"])
          + f"; in all {grain['mib_all']:.1f} MiB = {grain['mib_all'] * 2**20 / train / args.epochs:.3f}"
          f" x the train shards ({train / 2**20:.1f} MiB) an epoch")
    # The cores are busy in every configuration (training decodes on both), so an epoch
    # that costs more CPU cannot run faster than local disk's CPU over its own.
    print("\nCPU seconds per epoch, training process + S3 server (the most an epoch can "
          "reach on these cores: local's CPU / its CPU):")
    local_cpu = rows["local disk"]["cpu_s"]
    for name, row in rows.items():
      print(f"  {name}: " + ", ".join(
          f"{c:.2f} s ({local_cpu[e] / c:.2f}x; server {row['server_cpu_s'][e]:.2f} s; "
          f"cores busy {c * row['img_s'][e] / 800:.1f})" for e, c in enumerate(row["cpu_s"])))
    if len(rounds) > 1:  # each round's ratios (one machine state each), their median
      print(f"\nMedian over {len(rounds)} rounds of each round's ratio to local disk, "
            "img/s (CPU in brackets: local's CPU / its CPU):")
      print("\n| read from | " + " | ".join(f"epoch {e + 1}" for e in epochs)
            + " | epochs 2+ together (the cached ones) | all epochs |")
      print("|---|" + "---|" * (args.epochs + 2))
      for name in rows:
        def median(values):
          return float(np.median(values))
        cells = [f"{median([r[name]['img_s'][e] / r['local disk']['img_s'][e] for r in rounds]):.2f}x "
                 f"({median([r['local disk']['cpu_s'][e] / r[name]['cpu_s'][e] for r in rounds]):.2f}x)"
                 for e in epochs]
        whole = median([r[name]["img_s_all"] / r["local disk"]["img_s_all"] for r in rounds])
        # (per-epoch ratios swing with where a shuffle buffer refills; their sum does not)
        later = median([sum(1 / x for x in r["local disk"]["img_s"][1:])
                        / sum(1 / x for x in r[name]["img_s"][1:]) for r in rounds])
        print(f"| {name} | " + " | ".join(cells) + f" | {later:.2f}x | {whole:.2f}x |")


if __name__ == "__main__":
  main()
