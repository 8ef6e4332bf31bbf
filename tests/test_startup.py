"""Our commands are quiet by default: TensorFlow's start-up noise is gone, errors are not;
`import imagesets` in someone else's process leaves TensorFlow's logs to them."""

import contextlib
import json
import os
import subprocess
import sys

import pytest

from conftest import run
from imagesets import startup
from imagesets_testing import photo_datasets
from imagesets_testing import sample_images

TINY = "synthetic_images/tiny:1.0.0"
TF_NOISE_FREE_ENV = {k: v for k, v in os.environ.items()
                     if k not in ("TF_CPP_MIN_LOG_LEVEL", "IMAGESETS_VERBOSE")}


def _demo(tmp_path, *extra, env=None):
  return run([sys.executable, "-m", "imagesets.cli.demo", "--config", "tiny",
              "--data_dir", str(tmp_path), "--batch_size", "4", *extra],
             env=env or TF_NOISE_FREE_ENV)


def _noise(text: str) -> list[str]:
  return [line for line in text.splitlines() if startup.NOISE.search(line)]


@pytest.fixture(scope="module")
def plain_noise() -> list[str]:
  """What TensorFlow prints at its start here, left alone."""
  plain = run([sys.executable, "-c", "import tensorflow as tf; tf.config.list_physical_devices()"],
              env=TF_NOISE_FREE_ENV)
  return _noise(plain.stderr)


def test_demo_prints_our_lines_and_no_tensorflow_start_up_noise(plain_noise, tmp_path):
  assert plain_noise, "TensorFlow printed no start-up lines here: nothing to test"
  out = _demo(tmp_path)
  assert _noise(out.stderr) == []
  assert "FeatureConnector.dtype" not in out.stderr
  assert "I0000" not in out.stderr  # no C++ INFO lines at all
  assert "batch: image (4, 32, 32, 3) uint8" in out.stdout


def test_verbose_brings_tensorflows_lines_back(plain_noise, tmp_path):
  kinds = {startup.NOISE.search(line).group(0) for line in plain_noise}
  assert kinds, "TensorFlow printed no start-up lines here: nothing to test"
  out = _demo(tmp_path, "-v")
  assert {startup.NOISE.search(line).group(0) for line in _noise(out.stderr)} >= kinds


@pytest.mark.parametrize("switch, quiet", [
    ({}, True), ({"argv": ["-v"]}, False), ({"argv": ["--verbose"]}, False),
    ({"IMAGESETS_VERBOSE": "1"}, False), ({"IMAGESETS_VERBOSE": "0"}, True),
    ({"TF_CPP_MIN_LOG_LEVEL": "0"}, False), ({"TF_CPP_MIN_LOG_LEVEL": "2"}, False)])
def test_each_switch_decides_whether_tensorflow_loads_filtered(monkeypatch, switch, quiet):
  """The decision every command's start-up takes (`load_tensorflow`, `probe_devices`); the
  demo above shows a switch reaching TensorFlow's lines end to end. A level the user set
  is theirs: left as it is, nothing filtered."""
  for name in ("IMAGESETS_VERBOSE", "TF_CPP_MIN_LOG_LEVEL", startup._OURS):
    monkeypatch.delenv(name, raising=False)
  monkeypatch.setattr(sys, "argv", ["imagesets", "build", *switch.get("argv", [])])
  for name, value in switch.items():
    if name != "argv":
      monkeypatch.setenv(name, value)
  filtering = not isinstance(startup._quiet_loading(), contextlib.nullcontext)
  assert filtering == quiet
  assert os.environ.get("TF_CPP_MIN_LOG_LEVEL") == switch.get("TF_CPP_MIN_LOG_LEVEL",
                                                               "1" if quiet else None)


def test_a_scripts_own_dash_v_is_not_ours(monkeypatch):
  monkeypatch.delenv("IMAGESETS_VERBOSE", raising=False)
  monkeypatch.setattr(sys, "argv", ["train.py", "-v"])   # (someone's script, its flag)
  assert not startup.verbose()
  monkeypatch.setattr(sys, "argv", ["/venv/bin/imagesets", "build", "-v"])
  assert startup.verbose()


def test_filter_keeps_every_line_it_does_not_know(capfd):
  noise = b"I0000 00:00:1.0 cudart_stub.cc:31] Could not find cuda drivers on your machine.\n"
  with startup._filtered_stderr():
    os.write(2, noise + b"E0000 something real failed\n" + noise + b"no newline at the end")
  err = capfd.readouterr().err
  assert err == "E0000 something real failed\nno newline at the end"


# Runs the command line in a fresh process and reports which heavy modules it loaded.
_CLI_MODULES = """
import sys
from imagesets.cli import main
try:
  code = main.main(sys.argv[1:])
except SystemExit as exit_:
  code = exit_.code
loaded = [m for m in ("tensorflow", "tensorflow_datasets") if m in sys.modules]
print("LOADED", *loaded, "EXIT", code, file=sys.stderr)
"""


def test_commands_that_need_no_tensorflow_never_load_it(tiny_data_dir, tmp_path):
  bucket, cache = tmp_path / "bucket", tmp_path / "cache"
  command = tmp_path / "bin" / "imagesets"
  command.parent.mkdir()
  command.write_text(_CLI_MODULES)
  for args, code in [
      (["--help"], 0), (["build", "--help"], 0), (["lst"], 2), (["publish", "x"], 2),
      (["build", "p", "--name", "n", "--splits", "train=2"], 2),
      (["build", "p", "--name", "n", "--no-such-flag"], 2),
      (["build", str(tmp_path / "none"), "--name", "n"], 3),
      # A folder that exists: the name and version are refused before TensorFlow loads.
      (["build", str(tmp_path), "--name", "Pets"], 2),
      (["build", str(tmp_path), "--name", "n", "--version", "1.3"], 2),
      (["list", "--data-dir", str(tiny_data_dir)], 0),
      (["publish", "synthetic_images/tiny:1.0.0", "--data-dir", str(tiny_data_dir),
        "--to", str(bucket), "--quiet"], 0),
      (["list", str(bucket)], 0),
      (["fetch", str(bucket), "synthetic_images/tiny", "--cache-dir", str(cache), "--quiet"], 0)]:
    # (as the `imagesets` console script runs it: a program named imagesets)
    result = subprocess.run([sys.executable, str(command), *args], capture_output=True,
                            text=True, timeout=120)
    assert result.stderr.strip().splitlines()[-1] == f"LOADED EXIT {code}", (args, result.stderr)
  assert (cache / "file").is_dir()  # the fetch did fetch
  # Commands that read a version's examples (TFDS's metadata, no TensorFlow): local and
  # streamed from the bucket, a stored report and one recomputed from the records.
  tiny, streamed = f"{tiny_data_dir}/{TINY}", f"file://{bucket}/{TINY}"
  for args in (["duplicates", TINY, "--data-dir", str(tiny_data_dir)],
               ["duplicates", TINY, "--data-dir", f"file://{bucket}", "--recompute"],
               ["diff", tiny, streamed],
               ["report", tiny, "--against", streamed, "--out", str(tmp_path / "page.html")]):
    result = subprocess.run([sys.executable, str(command), *args], capture_output=True,
                            text=True, timeout=300)
    assert result.stderr.strip().splitlines()[-1] == "LOADED tensorflow_datasets EXIT 0", (
        args, result.stdout, result.stderr)
  assert (tmp_path / "page.html").stat().st_size > 10_000
  # verify reads the records and the source folder its build recorded, without TensorFlow.
  photo_datasets.pets(tmp_path)
  result = subprocess.run([sys.executable, str(command), "verify", "pets:1.0.0", "--data-dir",
                           str(tmp_path / "tfds")], capture_output=True, text=True, timeout=300)
  assert result.stderr.strip().splitlines()[-1] == "LOADED tensorflow_datasets EXIT 0", (
      result.stdout, result.stderr)
  assert "OK: everything matches" in result.stdout and ": 12 stored example(s) checked" in result.stdout, (
      result.stdout)
  # A version of one of our builders that is not there: the answer names the versions its
  # code builds, which loads the builder's module (and TensorFlow): quietly, one line.
  result = subprocess.run([sys.executable, str(command), "duplicates",
                           "synthetic_images/tiny:9.9.9", "--data-dir", str(tiny_data_dir)],
                          capture_output=True, text=True, timeout=300, env=TF_NOISE_FREE_ENV)
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 2 and lines[0].startswith("imagesets: error: synthetic_images/tiny:"
                                                 "9.9.9 is not prepared in "), lines
  assert "; this code builds synthetic_images 1.0.0, not 9.9.9: " in lines[0]


def test_import_imagesets_registers_the_builders_when_tfds_loads():
  script = ("import sys, imagesets\n"
            "assert 'tensorflow' not in sys.modules\n"
            "import tensorflow_datasets as tfds\n"
            "print(tfds.builder('synthetic_images/tiny').info.full_name)\n"
            "assert 'synthetic_images' in tfds.list_builders(with_community_datasets=False)\n"
            "print(tfds.builder_cls('voc_segmentation').name)\n")
  assert run([sys.executable, "-c", script]).stdout.split() == [
      "synthetic_images/tiny/1.0.0", "voc_segmentation"]


def test_import_imagesets_leaves_tensorflows_logs_to_the_user():
  # (test_demo_... shows that our commands are quiet.) Someone else's process: their
  # TensorFlow, their logs; nothing of ours sits between them and fd 2.
  probe = "import tensorflow as tf; tf.config.list_physical_devices()"
  theirs = run([sys.executable, "-c", f"import imagesets; {probe}"], env=TF_NOISE_FREE_ENV)
  assert _noise(theirs.stderr)


def test_quiet_tensorflow_gives_a_users_process_our_quiet_when_asked():
  script = ("import imagesets\n"
            "imagesets.quiet_tensorflow()\n"
            "import sys, tensorflow as tf\n"
            "print(tf.config.list_physical_devices('CPU')[0].device_type)\n"
            "print('their own line', file=sys.stderr)\n")
  result = run([sys.executable, "-c", script], env=TF_NOISE_FREE_ENV)
  assert result.stdout.split() == ["CPU"]
  assert _noise(result.stderr) == [] and "I0000" not in result.stderr, result.stderr
  assert result.stderr.strip().splitlines()[-1] == "their own line"


def test_a_local_build_and_one_on_it_never_load_tensorflow(tmp_path):
  """Its shards are written without TensorFlow (`tfrecord_files`), and nothing else of a
  local build needs it: no 1-2 s import, no device probe (a bucket or Beam build loads it
  first, quietly)."""
  command = tmp_path / "bin" / "imagesets"
  command.parent.mkdir()
  command.write_text(_CLI_MODULES)
  photos = tmp_path / "photos"
  for number in range(24):
    path = photos / ("cat", "dog", "fox")[number % 3] / f"{number}.jpg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(sample_images.jpeg(40, 50, seed=number))
  for version, added in (("1.0.0", None), ("1.1.0", photos / "fox" / "new.jpg")):
    if added:
      added.write_bytes(sample_images.jpeg(40, 50, seed=99))
    result = subprocess.run(
        [sys.executable, str(command), "build", str(photos), "--name", "foxes", "--version",
         version, "--data-dir", str(tmp_path / "tfds"), "--splits", "train=0.7,validation=0.3"],
        capture_output=True, text=True, timeout=300)
    assert result.stderr.strip().splitlines()[-1] == "LOADED tensorflow_datasets EXIT 0", (
        result.stdout, result.stderr)
  assert "built on foxes:1.0.0" in result.stdout, result.stdout
  info = json.loads((tmp_path / "tfds" / "foxes" / "1.1.0" / "dataset_info.json").read_text())
  assert sum(int(n) for split in info["splits"] for n in split["shardLengths"]) == 25
