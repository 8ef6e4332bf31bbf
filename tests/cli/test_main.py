"""The `imagesets` command against the real S3 and GCS servers: what it says and its exit
statuses (in this process: `cli_runs.in_process`), and as a user runs it (a subprocess of
the installed entry point) where the process is what is tested: signals, a kill, the
environment's endpoints and credentials read at start."""

import pathlib
import shutil
import signal
import time

import pytest

import bucket_servers as servers
import cli_runs
from imagesets.cli import exit_status
from imagesets.cli import main as cli
from publish_helpers import FOLDER, TINY, examples, kill_publisher_after


imagesets = cli_runs.in_process


def assert_one_line_error(result, pattern, status=exit_status.FAILED):
  """`status` and the error on one line, the last one (TensorFlow may log before it)."""
  assert result.returncode == status, (result.stdout, result.stderr)
  assert "Traceback" not in result.stderr + result.stdout
  lines = result.stderr.strip().splitlines()
  ours = [line for line in lines if line.startswith("imagesets")]
  assert ours == lines[-1:] and lines[-1].startswith("imagesets: error: "), result.stderr
  assert pattern in lines[-1], lines[-1]
  return lines[-1]


# gs:// through the command line: test_empty_bucket_lists_nothing...; every backend through
# the library: tests/publishing (keeps the suite under CI's 10 minutes).
@pytest.mark.parametrize("bucket_url", ["s3", "file"], indirect=True)
def test_publish_list_fetch(bucket_url, tiny_data_dir, tmp_path):
  published = imagesets("publish", TINY, "--data-dir", tiny_data_dir, "--to", bucket_url)
  assert published.returncode == 0, published.stderr
  assert f"published {TINY} to " in published.stdout
  # The card, the duplicate and quality reports, the page, 8 shards, the manifest and the 2
  # commit files.
  assert "15 object(s) uploaded and verified" in published.stdout
  # The progress bar counts bytes (tqdm with unit B, scaled).
  assert f"publish {TINY}: 100%" in published.stderr and "B/s" in published.stderr

  again = imagesets("publish", TINY, "--data-dir", tiny_data_dir, "--to", bucket_url)
  assert again.returncode == 0 and "identical content; nothing to do" in again.stdout

  listed = imagesets("list", bucket_url)
  assert listed.returncode == 0, listed.stderr
  header, row = listed.stdout.strip().splitlines()
  assert header.split() == ["DATASET", "CONFIG", "VERSION", "SIZE", "EXAMPLES", "PUBLISHED"]
  cells = row.split()
  assert cells[:3] == ["synthetic_images", "tiny", "1.0.0"]
  size = sum(p.stat().st_size for p in (tiny_data_dir / FOLDER).iterdir())
  assert " ".join(cells[3:5]) == cli._size(size) and cells[5:7] == ["train=12", "test=4"]
  assert cells[-1] == "UTC" and cells[-3].startswith("20")

  fetched = imagesets("fetch", bucket_url, TINY, "--cache-dir", tmp_path / "cache")
  assert fetched.returncode == 0, fetched.stderr
  assert f"fetch {TINY}: 100%" in fetched.stderr
  data_dir = fetched.stdout.strip()
  assert pathlib.Path(data_dir).is_relative_to(tmp_path / "cache")
  assert examples(data_dir) == examples(tiny_data_dir)


@pytest.mark.parametrize("bucket_url", ["gs"], indirect=True)
def test_empty_bucket_lists_nothing_and_shows_unfinished_uploads(bucket_url, tiny_data_dir,
                                                                 tmp_path):
  listed = imagesets("list", bucket_url)  # a prefix with nothing under it: not there (issue 37)
  assert listed.returncode == exit_status.NOT_FOUND and listed.stderr.strip().startswith(
      f"imagesets: error: {bucket_url} does not exist; publish into it: ")
  kill_publisher_after(5, TINY, tiny_data_dir, bucket_url, tmp_path)
  listed = imagesets("list", bucket_url)
  assert listed.stdout.strip().splitlines() == [
      f"no published datasets in {bucket_url}",
      f"(unfinished upload, not published: {TINY}; re-run publish to complete it)"]
  fetched = imagesets("fetch", bucket_url, TINY, "--cache-dir", tmp_path / "cache")
  assert_one_line_error(fetched, "is not published", exit_status.NOT_FOUND)
  resumed = imagesets("publish", TINY, "--data-dir", tiny_data_dir, "--to", bucket_url)
  assert "4 reused from an interrupted run" in resumed.stdout, resumed.stderr


def runner_ignoring_ctrl_c():
  """The signal state some test runners' workers and CI agents leave to what they start:
  SIGINT ignored and blocked (both inherited across exec)."""
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


@pytest.mark.parametrize("bucket_url", ["s3"], indirect=True)
@pytest.mark.parametrize("started_by", ["a plain runner", "a runner ignoring Ctrl-C"])
def test_ctrl_c_says_so_in_one_line_and_publishes_nothing(bucket_url, tiny_data_dir, tmp_path,
                                                          started_by):
  setup = runner_ignoring_ctrl_c if started_by == "a runner ignoring Ctrl-C" else None
  result = kill_publisher_after(3, TINY, tiny_data_dir, bucket_url, tmp_path, signal="INT",
                                preexec_fn=setup)
  assert result.returncode == 130 and "Traceback" not in result.stderr, (
      result.returncode, result.stdout, result.stderr)
  assert result.stderr.strip().splitlines()[-1] == (
      "imagesets: interrupted; nothing half-done is visible: re-run to resume")
  assert imagesets("list", bucket_url).stdout.strip().splitlines()[-1].startswith(
      "(unfinished upload, not published: ")


@pytest.mark.parametrize("bucket_url", ["gs"], indirect=True)
def test_different_content_is_refused_in_one_line(bucket_url, tiny_data_dir, tmp_path):
  assert imagesets("publish", TINY, "--data-dir", tiny_data_dir, "--to", bucket_url,
                   "--quiet").returncode == 0
  changed = tmp_path / "changed"
  shutil.copytree(tiny_data_dir, changed)
  info = changed / "synthetic_images/tiny/1.0.0/dataset_info.json"
  info.write_text(info.read_text().replace("Seeded random", "Seeded  random"))
  result = imagesets("publish", TINY, "--data-dir", changed, "--to", bucket_url)
  assert_one_line_error(result, "1 file(s) differ: dataset_info.json); published versions "
                        "are immutable: bump the version")


# Every command and scheme goes through Bucket.check (test_bucket.py covers both schemes);
# here two combinations show the user-facing result.
@pytest.mark.parametrize("scheme, command", [("s3", "publish"), ("gs", "fetch")])
def test_unreachable_endpoint_is_one_line_within_seconds(scheme, command, bucket_servers,
                                                         tiny_data_dir, tmp_path):
  closed = f"http://127.0.0.1:{servers.free_port()}"
  url = f"{scheme}://{servers.BUCKET}/tfds"
  args = {"publish": ["publish", TINY, "--data-dir", tiny_data_dir, "--to", url],
          "list": ["list", url],
          "fetch": ["fetch", url, TINY, "--cache-dir", tmp_path]}[command]
  start = time.monotonic()
  result = cli_runs.command(*args, env={"AWS_ENDPOINT_URL": closed,
                                        "STORAGE_EMULATOR_HOST": closed})
  assert time.monotonic() - start < 40  # includes starting Python and TensorFlow (loaded CI)
  assert_one_line_error(result, f"cannot reach {closed}")


def test_denied_credentials_are_one_line_and_never_printed(bucket_servers, tiny_data_dir):
  url = f"s3://{servers.BUCKET}/tfds"
  secret = "not-the-right-secret-42"
  result = cli_runs.command("publish", TINY, "--data-dir", tiny_data_dir, "--to", url,
                            env={"AWS_SECRET_ACCESS_KEY": secret})
  line = assert_one_line_error(result, "access denied: cannot list s3://team-bucket/tfds")
  assert secret not in result.stdout + result.stderr
  assert servers.S3_KEY not in line


def test_usage_errors(tmp_path, capsys):
  # In-process: the same main() as the console script, without starting Python again.
  def error_of(*args, status=exit_status.USAGE):
    assert cli.main([str(a) for a in args]) == status
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("imagesets: error: ")
    return err
  assert "is not NAME[/CONFIG][:VERSION]" in error_of(
      "publish", "synthetic_images:1", "--to", tmp_path)
  assert "does not exist: build synthetic_images" in error_of(
      "publish", TINY, "--data-dir", tmp_path / "none", "--to", tmp_path / "b",
      status=exit_status.NOT_FOUND)
  assert "unsupported scheme 'ftp'" in error_of("list", "ftp://host/x")
  assert "no bucket name" in error_of("fetch", "s3:///tfds", TINY)
  with pytest.raises(SystemExit) as usage:
    cli.main(["publish", TINY])  # argparse: --to is required
  assert usage.value.code == 2


def test_every_flag_takes_both_spellings():
  for name, sub in cli._subparsers(cli.parser()).items():
    for action in sub._actions:
      for flag in action.option_strings:
        if flag.startswith("--"):
          body = flag[2:]
          assert {f"--{body.replace('_', '-')}", f"--{body.replace('-', '_')}"} <= set(
              action.option_strings), (name, flag)
  one = cli.parse(["build", "p", "--name", "n", "--data-dir", "/a", "--skip_bad_files",
                   "--file_format", "array_record", "--shorter-side", "3"])
  other = cli.parse(["build", "p", "--name", "n", "--data_dir", "/a", "--skip-bad-files",
                     "--file-format", "array_record", "--shorter_side", "3"])
  assert vars(one) == vars(other) and one.data_dir == "/a" and one.skip_bad_files
  assert cli.parse(["list", "--data_dir", "/b"]).data_dir == "/b"
  assert cli.parse(["fetch", "u", "s", "--cache_dir", "/c"]).cache_dir == "/c"
  # Help shows one spelling per flag.
  assert "--data_dir" not in cli._subparsers(cli.parser())["build"].format_help()


def test_unknown_flags_and_commands_say_what_was_meant_with_that_commands_usage(capsys):
  def usage_error(*args):
    with pytest.raises(SystemExit) as exit_:
      cli.parse(list(args))
    assert exit_.value.code == 2
    return capsys.readouterr().err
  err = usage_error("build", "pets", "--name", "pets", "--data-dirr", "/tmp/x")
  assert err.startswith("usage: imagesets build ")
  assert err.strip().splitlines()[-1] == ("imagesets build: error: unrecognized argument(s): "
                                          "--data-dirr /tmp/x (did you mean --data-dir?)")
  assert "publish" not in err and "fetch" not in err  # not the whole program's usage
  err = usage_error("fetch", "u", "s", "--verfy")
  assert err.startswith("usage: imagesets fetch ") and "(did you mean --verify?)" in err
  err = usage_error("lst")
  assert err.strip().splitlines()[-1] == "imagesets: error: unknown command 'lst' (did you mean 'list'?)"
  err = usage_error("build", "p", "--name", "n", "--splits", "train=0.5,test=0.1")
  assert "sum to 1" in err.strip().splitlines()[-1]


def test_unexpected_errors_are_one_line_naming_their_type(monkeypatch, capsys, tmp_path):
  def boom(args):
    raise RuntimeError("the disk\n  is full")
  monkeypatch.setattr(cli, "cmd_list", boom)
  assert cli.main(["list", "--data-dir", str(tmp_path)]) == exit_status.FAILED
  assert capsys.readouterr().err == ("imagesets: error: RuntimeError: the disk is full "
                                     "(run with -v for the traceback)\n")
  with pytest.raises(RuntimeError):
    cli.main(["list", "--data-dir", str(tmp_path), "-v"])


def test_list_shows_a_local_data_dir_with_our_builds_marked(tiny_data_dir, tmp_path):
  data_dir = shutil.copytree(tiny_data_dir, tmp_path / "tfds")
  other = data_dir / "other_set" / "2.0.0"
  shutil.copytree(data_dir / FOLDER, other)
  info = other / "dataset_info.json"
  info.write_text(info.read_text().replace("synthetic_images.synthetic_images_dataset_builder",
                                           "their_package.other_set"))
  listed = imagesets("list", "--data_dir", data_dir)
  assert listed.returncode == 0, listed.stderr
  header, *rows = listed.stdout.strip().splitlines()
  assert header.split() == ["DATASET", "CONFIG", "VERSION", "SIZE", "EXAMPLES", "BUILT", "BY"]
  assert [row.split()[:3] + row.split()[-2:] for row in rows] == [
      ["other_set", "-", "2.0.0", "other", "tool"],
      ["synthetic_images", "tiny", "1.0.0", "UTC", "imagesets"]]
  assert "train=12 test=4" in rows[1]
  empty = cli_runs.command("list", env={"HOME": str(tmp_path)})
  assert empty.stdout.strip() == f"no prepared datasets in {tmp_path}/tensorflow_datasets"


def test_fetch_names_the_version_it_chose(tiny_data_dir, tmp_path):
  bucket = tmp_path / "bucket"
  assert imagesets("publish", TINY, "--data-dir", tiny_data_dir, "--to", bucket,
                   "--quiet").returncode == 0
  fetched = imagesets("fetch", bucket, "synthetic_images/tiny", "--cache-dir",
                      tmp_path / "cache", "--quiet")
  assert fetched.returncode == 0, fetched.stderr
  assert fetched.stderr.strip() == (f"synthetic_images/tiny: {TINY} (latest published version "
                                    f"in {bucket})")


def test_an_array_record_build_suggests_what_reads_it():
  # tfds.load raises NotImplementedError on ArrayRecord builds: suggest what works.
  tfrecord = cli._load_hint("pets", "1.0.0", "/d", "tfrecord")
  assert tfrecord == ['load it with: tfds.load("pets:1.0.0", split="train", data_dir="/d")']
  array_record = " ".join(cli._load_hint("pets", "1.0.0", "/d", "array_record"))
  assert "tfds.load" not in array_record
  assert 'tfds.data_source("pets:1.0.0", split="train", data_dir="/d")' in array_record
  assert 'imagesets.classification_train("pets:1.0.0", data_dir="/d"' in array_record


def test_list_of_a_local_folder_shows_its_builds_not_a_bucket_verdict(tmp_path):
  # A new user's first try: build a folder, then list the data dir by its path.
  from imagesets_testing import sample_images
  for i in range(30):
    path = tmp_path / "tree" / f"c{i % 2}" / f"{i}.jpg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(sample_images.jpeg(30, 40, seed=i))
  data_dir = tmp_path / "d"
  built = imagesets("build", tmp_path / "tree", "--name", "newcomer", "--data-dir", data_dir)
  assert built.returncode == 0, built.stderr
  page = data_dir / "newcomer" / "1.0.0" / "report.html"   # the closing lines say where
  assert f"its page: {page} (open it in a browser)" in built.stdout.splitlines() and page.exists()
  listed = imagesets("list", data_dir)
  assert listed.returncode == 0, listed.stderr
  header, row = listed.stdout.strip().splitlines()
  assert header.split() == ["DATASET", "CONFIG", "VERSION", "SIZE", "EXAMPLES", "BUILT", "BY"]
  cells = row.split()
  assert cells[:3] == ["newcomer", "-", "1.0.0"] and cells[-1] == "imagesets"
  assert cells[4] in ("KiB", "B") and "train=" in row and "not by imagesets" not in row
  assert sum(int(part.split("=")[1]) for part in row.split() if "=" in part) == 30
