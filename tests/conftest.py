"""Shared test fixtures and helpers."""

import os
import pathlib
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

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


def tfds_cli(*args, **kwargs) -> subprocess.CompletedProcess:
  """The stock `tfds` command of this environment."""
  return run([str(BIN / "tfds"), *args], **kwargs)


def shard_bytes(version_dir: pathlib.Path) -> dict[str, bytes]:
  """{file name: bytes} of every TFRecord shard in a prepared version folder."""
  return {p.name: p.read_bytes() for p in sorted(version_dir.glob("*.tfrecord-*"))}
