"""Our commands are quiet by default: TensorFlow's start-up noise is gone, errors are not."""

import os
import sys

from conftest import run
from imagesets import startup

TF_NOISE_FREE_ENV = {k: v for k, v in os.environ.items()
                     if k not in ("TF_CPP_MIN_LOG_LEVEL", "IMAGESETS_VERBOSE")}


def _demo(tmp_path, *extra, env=None):
  return run([sys.executable, "-m", "imagesets.cli.demo", "--config", "tiny",
              "--data_dir", str(tmp_path), "--batch_size", "4", *extra],
             env=env or TF_NOISE_FREE_ENV)


def _noise(text: str) -> list[str]:
  return [line for line in text.splitlines() if startup.NOISE.search(line)]


def test_demo_prints_our_lines_and_no_tensorflow_start_up_noise(tmp_path):
  plain = run([sys.executable, "-c", "import tensorflow as tf; tf.config.list_physical_devices()"],
              env=TF_NOISE_FREE_ENV)
  assert _noise(plain.stderr), "TensorFlow printed no start-up lines here: nothing to test"
  out = _demo(tmp_path)
  assert _noise(out.stderr) == []
  assert "FeatureConnector.dtype" not in out.stderr
  assert "I0000" not in out.stderr  # no C++ INFO lines at all
  assert "batch: image (4, 32, 32, 3) uint8" in out.stdout


def test_verbose_brings_tensorflows_lines_back(tmp_path):
  plain = run([sys.executable, "-c", "import tensorflow as tf; tf.config.list_physical_devices()"],
              env=TF_NOISE_FREE_ENV)
  kinds = {startup.NOISE.search(line).group(0) for line in _noise(plain.stderr)}
  for out in (_demo(tmp_path / "a", "-v"),
              _demo(tmp_path / "b", env={**TF_NOISE_FREE_ENV, "IMAGESETS_VERBOSE": "1"}),
              _demo(tmp_path / "c", env={**TF_NOISE_FREE_ENV, "TF_CPP_MIN_LOG_LEVEL": "0"})):
    assert {startup.NOISE.search(line).group(0) for line in _noise(out.stderr)} >= kinds


def test_filter_keeps_every_line_it_does_not_know(capfd):
  noise = b"I0000 00:00:1.0 cudart_stub.cc:31] Could not find cuda drivers on your machine.\n"
  with startup._filtered_stderr():
    os.write(2, noise + b"E0000 something real failed\n" + noise + b"no newline at the end")
  err = capfd.readouterr().err
  assert err == "E0000 something real failed\nno newline at the end"
