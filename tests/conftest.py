"""Shared test fixtures and helpers."""

import atexit
import collections
import functools
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

# The environment as the test run got it, before any test imported imagesets: a subprocess
# started with it shows whether importing imagesets changes the environment.
ENVIRONMENT_AT_START = dict(os.environ)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
_WARM_ENVIRONMENT = dict(os.environ)  # the warm server's: not that of the test that starts it
_TEMPORARY_AT_START = tempfile.gettempdir()  # (short: a unix socket's path fits in 108 bytes)

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_datasets as tfds  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent


def run(args, **kwargs) -> subprocess.CompletedProcess:
  """Runs a command from the repo root; fails the test with its output on error."""
  result = subprocess.run(args, cwd=kwargs.pop("cwd", REPO), capture_output=True,
                          text=True, **kwargs)
  assert result.returncode == 0, (
      f"{args} exited {result.returncode}\n--- stdout\n{result.stdout[-4000:]}"
      f"\n--- stderr\n{result.stderr[-4000:]}")
  return result


@pytest.fixture(scope="session", autouse=True)
def _temporary_files_inside_the_run(tmp_path_factory):
  """Whatever the run's code and its subprocesses (TensorFlow's autograph, TFDS, Beam, weed's
  sockets and logs) put in the temporary folder goes into this run's own base folder, which
  pytest removes (tmp_path_retention_*): none of it stays in /tmp."""
  folder = str(tmp_path_factory.mktemp("tmp"))
  saved = os.environ.get("TMPDIR"), tempfile.tempdir
  os.environ["TMPDIR"], tempfile.tempdir = folder, folder
  yield
  if saved[0] is None:
    del os.environ["TMPDIR"]
  else:
    os.environ["TMPDIR"] = saved[0]
  tempfile.tempdir = saved[1]


@functools.cache
def _warm_server():
  import warm_commands  # pylint: disable=import-outside-toplevel
  home = tempfile.mkdtemp(prefix="warm_home_")   # (see warm_commands: what the server reads)
  env = {k: v for k, v in _WARM_ENVIRONMENT.items()
         if k not in ("PYTHONPATH", "TFDS_DATA_DIR", "IMAGESETS_CACHE", "KERAS_HOME")}
  server = warm_commands.Server({**env, "HOME": home, "TMPDIR": tempfile.gettempdir()},
                                commands=("python", "tfds", "imagesets"),
                                folder_in=_TEMPORARY_AT_START)
  atexit.register(server.close)
  atexit.register(shutil.rmtree, home, True)
  return server


def warm(command: str) -> str:
  """Path of a stand-in for `python`, `tfds` or `imagesets` for subprocesses whose subject is not
  start-up: each command is its own process, forked from one interpreter (of this test
  process's environment) that has TensorFlow loaded: warm_commands.py. Real processes
  (`sys.executable`) are for what differs between processes: those started from one warm
  interpreter share its hash seed and protobuf's map order (a warm command's Beam workers
  too: they are commands of the same server), so a comparison of two runs needs real ones;
  and a process a test kills from outside must be real."""
  return str(_warm_server().bin_dir / command)


def warm_bin(*commands: str) -> pathlib.Path:
  """A folder holding only the warm stand-ins of `commands` (see `warm`), to put first on
  a PATH."""
  return _warm_server().bin_dir_of(*commands)


def tfds_cli(*args, fresh: bool = False, **kwargs) -> subprocess.CompletedProcess:
  """The stock `tfds` command of this environment: started warm, or a new interpreter
  (`fresh`) where the test compares what two runs wrote (see `warm`)."""
  return run([str(BIN / "tfds") if fresh else warm("tfds"), *args], **kwargs)


def shard_bytes(version_dir: pathlib.Path) -> dict[str, bytes]:
  """{file name: bytes} of every TFRecord shard in a prepared version folder."""
  return {p.name: p.read_bytes() for p in sorted(version_dir.glob("*.tfrecord-*"))}


# Bucket servers (S3 + GCS) and a fresh bucket URL per test: see bucket_servers.py.
from bucket_servers import bucket_servers, bucket_url, tensorflow_gcs_env  # noqa: E402,F401
# Shard downloads from a file:// bucket, counted where they happen: see bucket_reads.py.
from bucket_reads import bucket_reads  # noqa: E402,F401
# Beam's reading of a DoFn's signatures, once a function, and its workers' interpreter: see
# warm_commands.py.
from warm_commands import beam_workers_started_by, cache_beam_signatures  # noqa: E402
# synthetic_images/variable in 16 shards a split, built once a session in each file format,
# for the tests that stream it from a bucket: see streamed_versions.py.
from streamed_versions import built  # noqa: E402,F401


def build_synthetic(data_dir: pathlib.Path, config: str = "tiny") -> pathlib.Path:
  """Builds synthetic_images/<config>:1.0.0 with TFDS into data_dir; returns data_dir."""
  import imagesets  # noqa: F401
  tfds.builder(f"synthetic_images/{config}", data_dir=data_dir).download_and_prepare()
  return data_dir


@pytest.fixture(scope="session")
def tiny_data_dir(tmp_path_factory) -> pathlib.Path:
  """A local TFDS data_dir holding synthetic_images/tiny:1.0.0 (do not modify it)."""
  return build_synthetic(tmp_path_factory.mktemp("tiny_tfds"))


def warm_beam_workers() -> None:
  """Beam's DirectRunner (multi_processing) in this process starts its workers warm: each
  still its own process, which Beam waits for at the pipeline's end (see `warm`; the
  server starts at the first pipeline that asks)."""
  beam_workers_started_by(lambda: warm("python"))
  cache_beam_signatures()


@pytest.fixture(autouse=True)
def _beam_signatures_read_once():
  """(Once a test has imported Beam, the tests after it read signatures once.)"""
  if "apache_beam.typehints.decorators" in sys.modules:
    cache_beam_signatures()


def beam_download_config(*, multi_processing: bool = True, workers: int | None = None,
                         **kwargs):
  """DownloadConfig that makes TFDS generate on Beam's DirectRunner: `workers` processes
  (multi_processing, started warm: `warm_beam_workers`; every DoFn is pickled into another
  process), else threads. One process by default: each costs a build ~2.5 s of CPU (Beam's
  harness, each stage's DoFns unpickled), on the suite's 2 cores its largest cost; with
  one, Beam does not split a stage's bundles (one DoFn instance sees all its input). Tests
  whose point is work split over processes ask for 2: the Beam builds compared with a
  local one in docs/scaling.md and docs/voc_segmentation.md (voc_segmentation's, a drop
  decided by the workers), the versions built on another on Beam (test_incremental,
  test_annotated_build); class_folders' stock-CLI build, the command line's pipeline
  options, test_beam_duplicates and test_beam_report pass 2 in their own options. Threads
  (in_memory) cost little: 2 by default."""
  beam = pytest.importorskip("apache_beam")
  warm_beam_workers()
  workers = workers or (1 if multi_processing else 2)
  options = beam.options.pipeline_options.PipelineOptions(
      [f"--direct_num_workers={workers}",
       f"--direct_running_mode={'multi_processing' if multi_processing else 'in_memory'}"])
  return tfds.download.DownloadConfig(beam_options=options, **kwargs)


def records_by_split(version_dir) -> dict[str, list[bytes]]:
  """{split: sorted serialized records}, read straight from the shards of a version."""
  version_dir = pathlib.Path(version_dir)
  splits = {p.name.split("-")[1].split(".")[0] for p in version_dir.glob("*.tfrecord-*")}
  return {split: sorted(r.numpy() for r in tf.data.TFRecordDataset(
              sorted(str(p) for p in version_dir.glob(f"*-{split}.tfrecord-*"))))
          for split in splits}


def registered(*paths) -> dict:
  """`url_infos` naming test archives as a builder's registered files (size, sha256)."""
  import hashlib
  from tensorflow_datasets.core.download import checksums as tfds_checksums
  return {f"https://example.invalid/{pathlib.Path(p).name}": tfds_checksums.UrlInfo(
              size=pathlib.Path(p).stat().st_size, filename=pathlib.Path(p).name,
              checksum=hashlib.sha256(pathlib.Path(p).read_bytes()).hexdigest())
          for p in paths}


def offline_env(proxy_port: int = 9) -> dict:
  """Environment of a process without network: every HTTP(S) request goes to a local port
  (by default a closed one; a `silent_server(hang_up=True)`'s port counts the attempts)."""
  proxy = f"http://127.0.0.1:{proxy_port}"
  return {**os.environ, "HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy,
          "https_proxy": proxy, "NO_PROXY": "", "no_proxy": ""}


@pytest.fixture(autouse=True)
def _fresh_fingerprint_table(monkeypatch):
  """Each test fingerprints its bytes anew: the process-wide table of recent fingerprints
  (`image_hashes._SAME_BYTES`) would otherwise make what a test sees of decoding depend on
  the tests that ran before it in the same process. (Left alone where nothing imported it.)"""
  hashes = sys.modules.get("imagesets.analysis.image_hashes")
  if hashes is not None:
    monkeypatch.setattr(hashes, "_SAME_BYTES", collections.OrderedDict())
