"""warm_commands: a command run by a stand-in behaves as the same command in a new process
would, to whoever started it (argv, stdio, descriptors, environment, exit status, signals)."""

import os
import pathlib
import select
import signal
import subprocess
import sys

import pytest

import warm_commands


@pytest.fixture(scope="module")
def server():
  running = warm_commands.Server(dict(os.environ), commands=("python", "imagesets"))
  yield running
  running.close()


def _python(server, *args, **kwargs) -> subprocess.CompletedProcess:
  return subprocess.run([str(server.bin_dir / "python"), *args], capture_output=True,
                        text=True, timeout=120, **kwargs)


def test_argv_stdio_cwd_environment_and_exit_status(server, tmp_path):
  script = ("import os, sys; print(sys.argv[1:], os.getcwd(), os.environ['ONLY_HERE'], "
            "sys.stdin.read()); print('to stderr', file=sys.stderr); sys.exit(3)")
  done = _python(server, "-c", script, "a", "b c", input="from stdin", cwd=tmp_path,
                 env={**os.environ, "ONLY_HERE": "yes"})
  assert (done.returncode, done.stdout, done.stderr) == (
      3, f"['a', 'b c'] {tmp_path} yes from stdin\n", "to stderr\n")
  assert "ONLY_HERE" not in _python(server, "-c", "import os; print(dict(os.environ))").stdout


def test_a_console_script_runs_its_entry_point(server):
  done = subprocess.run([str(server.bin_dir / "imagesets"), "lst"], capture_output=True,
                        text=True, timeout=120)
  real = subprocess.run([str(pathlib.Path(sys.executable).parent / "imagesets"), "lst"],
                        capture_output=True, text=True, timeout=120)
  assert (done.returncode, done.stdout, done.stderr) == (real.returncode, real.stdout,
                                                           real.stderr) != (0, "", "")


def test_an_uncaught_error_prints_its_traceback_and_exits_1(server):
  done = _python(server, "-c", "raise ValueError('boom')")
  assert done.returncode == 1
  assert done.stderr.rstrip().endswith("ValueError: boom")


def test_a_process_that_kills_itself_is_seen_killed(server):
  done = _python(server, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
  assert done.returncode == -signal.SIGKILL


def test_the_server_forks_its_commands_from_its_only_thread(server):
  # (after a fork: OpenBLAS, loaded with numpy, stops its threads at the first one)
  assert _python(server, "-c", "pass").returncode == 0
  threads = pathlib.Path(f"/proc/{server._process.pid}/task")
  names = [(task / "comm").read_text().strip() for task in threads.iterdir()]
  assert len(names) == 1, names


def test_sigterm_reaches_the_command_and_sigkill_takes_it_along(server):
  script = ("import os, signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))\n"
            "print(os.getpid(), flush=True)\n"
            "time.sleep(120)\n")
  for sent, expected in [(signal.SIGTERM, 7), (signal.SIGKILL, -signal.SIGKILL)]:
    stand_in = subprocess.Popen([str(server.bin_dir / "python"), "-c", script],
                                stdout=subprocess.PIPE, text=True)
    command = int(stand_in.stdout.readline())
    assert command != stand_in.pid
    stand_in.send_signal(sent)
    assert stand_in.wait(timeout=60) == expected
    try:  # the command ends too (its pidfd turns readable when it has exited)
      ended = os.pidfd_open(command)
    except ProcessLookupError:
      continue
    try:
      assert select.select([ended], [], [], 60)[0] == [ended]
    finally:
      os.close(ended)


def test_descriptors_passed_to_the_stand_in_reach_the_command(server):
  read, write = os.pipe()
  try:
    done = _python(server, "-c", f"import os; os.write({write}, b'through {write}')",
                   pass_fds=[write])
    os.close(write)
    assert done.returncode == 0, done.stderr
    assert os.read(read, 100) == f"through {write}".encode()
  finally:
    os.close(read)


def test_pythonpath_and_a_fresh_numpy_seed_as_in_a_new_process(server, tmp_path):
  (tmp_path / "only_on_pythonpath.py").write_text("VALUE = 5\n")
  script = "import only_on_pythonpath, numpy; print(only_on_pythonpath.VALUE, numpy.random.rand())"
  runs = [_python(server, "-c", script, env={**os.environ, "PYTHONPATH": str(tmp_path)})
          for _ in range(2)]
  assert [run.returncode for run in runs] == [0, 0], runs[0].stderr
  (five_a, draw_a), (five_b, draw_b) = (run.stdout.split() for run in runs)
  assert five_a == five_b == "5" and draw_a != draw_b


def test_other_interpreter_options_are_refused_not_ignored(server):
  done = _python(server, "-O", "-c", "pass")
  assert done.returncode == 2
  assert "only -B, -u" in done.stderr


def test_what_a_script_leaves_in_open_files_is_written_at_exit(server, tmp_path):
  # Real Python finalises __main__'s objects at exit: a file never closed is flushed.
  done = _python(server, "-c", "import sys; kept = open(sys.argv[1], 'w'); kept.write('data')",
                 str(tmp_path / "out"))
  assert done.returncode == 0, done.stderr
  assert (tmp_path / "out").read_text() == "data"


def test_a_sitecustomize_on_the_callers_pythonpath_runs_first(server, tmp_path):
  (tmp_path / "sitecustomize.py").write_text("import builtins; builtins.SEEN = 'early'\n")
  done = _python(server, "-c", "print(SEEN)", env={**os.environ, "PYTHONPATH": str(tmp_path)})
  assert (done.returncode, done.stdout) == (0, "early\n"), done.stderr


def test_a_stand_in_that_hangs_up_at_once_leaves_the_server_serving(server):
  import socket  # pylint: disable=import-outside-toplevel
  for _ in range(3):
    with socket.socket(socket.AF_UNIX) as hung_up:
      hung_up.connect(str(server.bin_dir.parent / "socket"))
  assert _python(server, "-c", "print('still here')").stdout == "still here\n"


def test_a_commands_beam_workers_start_warm_each_its_own_process(server, tmp_path):
  # A worker forked from the server has TensorFlow loaded before it runs anything; a new
  # interpreter (`sys.executable -m ...sdk_worker_main`) would not. Both the command and
  # its workers read a function's signature once (`cache_beam_signatures`).
  script = (
      "import os, sys, apache_beam as beam\n"
      "from apache_beam.options.pipeline_options import PipelineOptions\n"
      "from apache_beam.typehints import decorators\n"
      "def seen(_):\n"
      "  cached = getattr(decorators.get_signature, 'cached', False)\n"
      "  return f\"{'tensorflow' in sys.modules} {cached} {os.getpid()}\"\n"
      "options = PipelineOptions(['--direct_num_workers=2',\n"
      "                           '--direct_running_mode=multi_processing'])\n"
      "with beam.Pipeline(options=options) as pipeline:\n"
      "  _ = (pipeline | beam.Create(range(8)) | beam.Reshuffle() | beam.Map(seen)\n"
      "       | beam.io.WriteToText(sys.argv[1]))\n"
      "print(getattr(decorators.get_signature, 'cached', False), os.getpid())\n")
  done = _python(server, "-c", script, str(tmp_path / "seen"))
  assert done.returncode == 0, done.stderr
  seen = [line.split() for path in tmp_path.glob("seen*")
          for line in path.read_text().splitlines()]
  assert len(seen) == 8 and {(warm, cached) for warm, cached, _ in seen} == {("True", "True")}
  cached, command = done.stdout.split()
  assert cached == "True" and command not in {pid for _, _, pid in seen}
