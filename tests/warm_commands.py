"""Commands (`imagesets`, `tfds`, `python -c ...`) run from an interpreter that has
TensorFlow loaded.

A doc block's `imagesets build ...` or a test's `python -c SCRIPT` starts a new Python that
imports TensorFlow: 6-10 s of CPU a process here, most of the suite's time in processes.
`Server(env, commands)` starts one process that imports TensorFlow and Beam, then forks a
child per command. Of what those imports read, keras (loaded with TensorFlow) reads its
config, ~/.keras/keras.json, of the server's HOME: start it with a HOME of its own (an empty
one: keras' defaults, as a reader's fresh HOME has them) and without PYTHONPATH, so that no
caller's files decide what a command sees (TFDS and our package load in the child). The
child takes the caller's argv, working directory, environment and stdin/stdout/stderr,
imports the rest and runs the command: a console script's entry point as the installed
script does (`sys.exit(main())`), or `python -c`/`-m`/a script in a fresh `__main__`. Same
parsing, output, files and exit status, and what a program sees of Python's exit (threads
joined, atexit handlers run, streams flushed). Each command is its own process: it can kill itself, crash, or race another.

`Server.bin_dir` holds a stand-in for each command, to put first on PATH or run by path: it
passes its three descriptors over a Unix socket (SCM_RIGHTS), forwards SIGINT/SIGTERM/SIGHUP
to the child and exits with the child's status (or dies of its signal). A stand-in killed
(SIGKILL) takes its command with it, a moment later: a test that kills its process from
outside and then looks at what it left starts a real one. The children share the server's hash seed and protobuf's map-order seed (numpy's
global generator is seeded again in each): two runs compared for equal output must be
real processes.

What only a fresh process shows (start-up time, TensorFlow's start-up lines, environment
read when TensorFlow loads) is tested on real processes: test_startup.py, tests/cli.

Run as a script, this file is the server: `python warm_commands.py SOCKET OWNER_PID MODULE...`.
"""

import atexit
import fcntl
import gc
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import multiprocessing.process
import os
import pathlib
import runpy
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import types
import weakref
from typing import Callable

COMMANDS = ("imagesets", "tfds", "python")
# Loaded once by the server: slow to import and independent of HOME and the data dirs.
PRELOAD = ("numpy", "PIL.Image", "tensorflow", "apache_beam",
           "scipy.fftpack", "scipy.io", "scipy.sparse.csgraph")
# The server forks a child per command, so it keeps one thread at each fork: a thread
# holding a lock at a fork leaves that lock held for ever in the child. pyarrow's jemalloc
# (loaded with TensorFlow and Beam) otherwise keeps a background purging thread running
# (OpenBLAS's threads are stopped by its own fork handler).
SINGLE_THREADED = {"JE_ARROW_MALLOC_CONF": "background_thread:false"}
_HEADER = 8  # bytes of a request's length
_MAX_FDS = 253  # Linux's most descriptors in one message (SCM_MAX_FD)

_STAND_IN = """\
#!{python} -S
import json, os, signal, socket, sys
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)  # held until the command's pid is known
for fd in (0, 1, 2):
  try:
    os.fstat(fd)
  except OSError:
    os.dup2(os.open(os.devnull, os.O_RDWR), fd)
fds = []  # every descriptor it was given (stdio, and a spawned child's pipes)
for name in sorted(os.listdir("/proc/self/fd"), key=int):
  try:
    os.fstat(int(name))
  except OSError:  # (listdir's own, closed)
    continue
  fds.append(int(name))
body = json.dumps({{"command": {command!r}, "argv": sys.argv, "cwd": os.getcwd(),
                   "env": dict(os.environ), "fds": fds}}).encode()
server = socket.socket(socket.AF_UNIX)
server.connect({socket_path!r})
socket.send_fds(server, [len(body).to_bytes({header}, "big") + body], fds)
replies = server.makefile("rb")
child = int(replies.readline() or 0)
for number in FORWARDED:
  signal.signal(number, lambda number, _: child and os.kill(child, number))
signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
reply = replies.readline()
if not child or not reply:
  sys.exit("warm_commands: the server ended before the command did")
status = int(reply)
if status < 0:
  if -status not in (signal.SIGKILL, signal.SIGSTOP):
    signal.signal(-status, signal.SIG_DFL)
  os.kill(os.getpid(), -status)
sys.exit(status)
"""


class Server:
  """A warm interpreter for `commands` (of `COMMANDS`), started with `env` (HOME etc.)."""

  def __init__(self, env: dict[str, str], commands=("imagesets", "tfds"), folder_in=None):
    self._owner = os.getpid()  # (a fork of the test process must not end the server)
    # (`folder_in`: where its folder goes; its socket's path must fit in 108 bytes)
    self._folder = pathlib.Path(tempfile.mkdtemp(prefix="warm_commands_", dir=folder_in))
    socket_path = str(self._folder / "socket")
    self.bin_dir = self._folder / "bin"
    self.bin_dir.mkdir()
    for command in commands:
      script = self.bin_dir / command
      script.write_text(_STAND_IN.format(python=sys.executable, command=command,
                                         socket_path=socket_path, header=_HEADER))
      script.chmod(0o755)
    # Its own session: close() ends the server, its children and what they started.
    self._process = subprocess.Popen(
        [sys.executable, __file__, socket_path, str(self._owner), *PRELOAD],
        env={**env, **SINGLE_THREADED},
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        start_new_session=True)
    ready = self._process.stdout.readline()
    if ready != b"ready\n":
      self.close()
      raise RuntimeError(f"warm_commands server did not start: {ready!r}")

  def bin_dir_of(self, *commands: str) -> pathlib.Path:
    """A folder holding only the stand-ins of `commands` (to put first on a PATH)."""
    folder = self._folder / "-".join(("bin", *commands))
    if not folder.is_dir():
      folder.mkdir()
      for command in commands:
        (folder / command).symlink_to(self.bin_dir / command)
    return folder

  def close(self):
    if os.getpid() != self._owner or self._process.returncode is not None:
      return
    try:  # the group outlives a dead server: its commands are ended with it
      os.killpg(self._process.pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
    self._process.wait()
    self._process.stdout.close()
    shutil.rmtree(self._folder, ignore_errors=True)


def _entry_points() -> dict[str, str]:
  """{command: "module:function"} of the installed console scripts (nothing imported)."""
  found = importlib.metadata.entry_points(group="console_scripts")
  return {command: found[command].value for command in COMMANDS if command != "python"}


def _run_python(argv: list[str]):
  """`python [-B] [-u] -c CODE ARGS`, `... -m MODULE ARGS` or `... SCRIPT ARGS`; other
  interpreter options are refused (exit 2) rather than ignored."""
  argv = list(argv)
  while len(argv) > 1 and argv[1] in ("-B", "-u"):  # no .pyc files to write; unbuffered
    if argv.pop(1) == "-u":
      sys.stdout.reconfigure(write_through=True)
      sys.stderr.reconfigure(write_through=True)
  main = types.ModuleType("__main__")
  main.__builtins__ = __builtins__
  sys.modules["__main__"] = main
  if len(argv) >= 3 and argv[1] == "-c":
    sys.argv, sys.path[0] = ["-c", *argv[3:]], ""
    exec(compile(argv[2], "<string>", "exec"), main.__dict__)  # pylint: disable=exec-used
  elif len(argv) >= 3 and argv[1] == "-m":
    sys.argv, sys.path[0] = ["-m", *argv[3:]], os.getcwd()
    runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
  elif len(argv) >= 2 and not argv[1].startswith("-"):
    sys.argv, sys.path[0] = argv[1:], os.path.dirname(os.path.abspath(argv[1]))
    runpy.run_path(argv[1], run_name="__main__")
  else:
    print(f"warm_commands: python {' '.join(argv[1:2])}...: only -B, -u, then -c, -m or a "
          "script", file=sys.stderr)
    raise SystemExit(2)


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
  data, fds, _, _ = socket.recv_fds(connection, 1 << 16, _MAX_FDS)
  while len(data) < _HEADER or len(data) < _HEADER + int.from_bytes(data[:_HEADER], "big"):
    more = connection.recv(1 << 16)
    if not more:
      raise EOFError("the stand-in hung up mid-request")
    data += more
  return json.loads(data[_HEADER:]), fds


def _start_up_as_the_caller():
  """What a new interpreter does with the caller's environment before running anything:
  PYTHONPATH after the script's folder, then a `sitecustomize` found there imported."""
  extra = [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path]
  sys.path[1:1] = [path for path in extra if path not in sys.path]
  found = importlib.machinery.PathFinder.find_spec("sitecustomize", extra) if extra else None
  if found is not None:
    module = importlib.util.module_from_spec(found)
    sys.modules["sitecustomize"] = module
    found.loader.exec_module(module)
  multiprocessing.process.ORIGINAL_DIR = os.getcwd()  # (spawned children find scripts)
  if "numpy" in sys.modules:  # seeded when the server imported it: each process its own
    sys.modules["numpy"].random.seed()


def _become_the_command(request: dict, fds: list[int], entry_point: str):
  """In the forked child: takes the caller's place and runs the command; never returns."""
  # Each descriptor at the caller's number: first out of the way of all those numbers.
  high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 1024) for fd in fds]
  for fd in fds:
    os.close(fd)
  for fd, target in zip(high, request["fds"]):
    os.dup2(fd, target)
    os.close(fd)
  os.chdir(request["cwd"])
  os.environ.clear()
  os.environ.update(request["env"])
  interrupted = False
  try:
    _start_up_as_the_caller()
    if request["command"] == "python":
      _run_python(request["argv"])
      status = 0
    else:
      sys.argv = request["argv"]
      module, function = entry_point.split(":")
      status = getattr(importlib.import_module(module), function)()
  except SystemExit as exit_:
    status = exit_.code
  except BaseException as error:  # pylint: disable=broad-except
    sys.excepthook(type(error), error, error.__traceback__)
    status, interrupted = 1, isinstance(error, KeyboardInterrupt)
  if status is not None and not isinstance(status, int):
    print(status, file=sys.stderr)
    status = 1
  # Python's exit without the seconds of tearing TensorFlow's modules down: what a program
  # can see of it happens (non-daemon threads joined, atexit handlers, the objects of
  # __main__ and cycles finalised: files they hold flushed, streams flushed).
  threading._shutdown()  # pylint: disable=protected-access
  atexit._run_exitfuncs()  # pylint: disable=protected-access
  main = sys.modules.get("__main__")
  if main is not None and main.__dict__ is not globals():  # (a console script's is ours)
    main.__dict__.clear()
  gc.collect()
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (OSError, ValueError):
      pass
  if interrupted:  # as Python ends on an uncaught KeyboardInterrupt: killed by SIGINT
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
  os._exit(status or 0)


def _peer_pid(connection: socket.socket) -> int:
  pid, _, _ = struct.unpack("3i", connection.getsockopt(
      socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
  return pid


def _start(connection: socket.socket, selector, listener, running: dict, entry_points):
  """Forks the command a stand-in asks for and watches both; a stand-in that hangs up or
  dies on the way gets nothing started, or its command killed."""
  child = None
  try:
    request, fds = _receive(connection)
    stand_in = _peer_pid(connection)
    sys.stdout.flush()
    child = os.fork()
    if child == 0:
      for other in running.values():
        other[0].close()
      for watched in list(selector.get_map().values()):
        if watched.fileobj is not listener:
          os.close(watched.fd)
      selector.close()
      listener.close()
      connection.close()
      _become_the_command(request, fds, entry_points.get(request["command"], ""))
    for fd in fds:
      os.close(fd)
    child_fd = os.pidfd_open(child)
    selector.register(child_fd, selectors.EVENT_READ, ("ended", child))
    running[child] = [connection, child_fd, None]
    stand_in_fd = os.pidfd_open(stand_in)
    selector.register(stand_in_fd, selectors.EVENT_READ, ("stand-in gone", child))
    running[child][2] = stand_in_fd
    connection.sendall(f"{child}\n".encode())
  except (OSError, EOFError, ValueError):  # (ProcessLookupError: the stand-in is gone)
    if child is None:
      connection.close()
    else:
      os.kill(child, signal.SIGKILL)  # reaped, and the connection closed, when it ends


def cache_beam_signatures() -> None:
  """Beam reads the signature of every method of every DoFn on each of its passes over a
  pipeline (`userstate.get_dofn_specs`: ~30 a DoFn, 300,000 for a build's pipeline here,
  a third of its time in a test's process, a fifth in a worker's): in tests, a function's is
  read once, in the test process and in each of this server's commands (Beam's workers
  among them). A function's signature is a function of its code; other callables are read
  each time, as Beam does. (It holds while nothing reassigns a read function's `__code__`,
  `__defaults__`, `__annotations__`, `__signature__` or `__wrapped__`: nothing here does.)"""
  from apache_beam.transforms import core  # pylint: disable=import-outside-toplevel
  from apache_beam.typehints import decorators  # pylint: disable=import-outside-toplevel
  if getattr(decorators.get_signature, "cached", False):
    return
  read = decorators.get_signature
  bound, plain = weakref.WeakKeyDictionary(), weakref.WeakKeyDictionary()

  def get_signature(func):
    if isinstance(func, types.MethodType) and isinstance(func.__func__, types.FunctionType):
      known, key = bound, func.__func__
    elif isinstance(func, types.FunctionType):
      known, key = plain, func
    else:
      return read(func)
    if key not in known:
      known[key] = read(func)
    return known[key]
  get_signature.cached = True
  decorators.get_signature = core.get_signature = get_signature


class _BeamWorkerSys:
  """What Beam's local runner reads of `sys`: the interpreter its worker processes start
  with (`... -m apache_beam.runners.worker.sdk_worker_main`), asked when a pipeline starts."""

  def __init__(self, python: Callable[[], str]):
    self._python = python

  @property
  def executable(self) -> str:
    return self._python()


def beam_workers_started_by(python: Callable[[], str]) -> None:
  """Beam's DirectRunner (multi_processing) in this process starts each SDK worker with
  `python()` instead of `sys.executable`. With a warm stand-in, each is a command of its
  server: still its own process, which Beam waits for at the pipeline's end, sharing the
  server's seeds (as every command does) and printing none of TensorFlow's start-up lines,
  which a real worker prints."""
  from apache_beam.runners.portability.fn_api_runner import fn_runner  # pylint: disable=import-outside-toplevel
  fn_runner.sys = _BeamWorkerSys(python)


def serve(socket_path: str, owner: int, preload: list[str]):
  sys.path[0] = os.path.dirname(sys.executable)  # as for a console script: not tests/
  for module in preload:
    importlib.import_module(module)
  if "apache_beam" in preload:
    cache_beam_signatures()
    python = os.path.join(os.path.dirname(socket_path), "bin", "python")
    if os.path.exists(python):  # (a command's Beam workers: commands of this server)
      beam_workers_started_by(lambda: python)
  entry_points = _entry_points()
  gc.freeze()  # what is loaded now stays: each child's last collection is cheap
  listener = socket.socket(socket.AF_UNIX)
  listener.bind(socket_path)
  listener.listen(16)
  selector = selectors.DefaultSelector()
  selector.register(listener, selectors.EVENT_READ, ("listener",))
  # The test process that started it ends (even by SIGKILL): so do it and its commands.
  selector.register(os.pidfd_open(owner), selectors.EVENT_READ, ("owner",))
  running = {}  # child pid -> [its stand-in's connection, its pidfd, the stand-in's pidfd]
  print("ready", flush=True)
  while True:
    for key, _ in selector.select():
      event, *about = key.data
      if event == "owner":
        shutil.rmtree(os.path.dirname(socket_path), ignore_errors=True)
        os.killpg(0, signal.SIGKILL)
      elif event == "listener":
        connection, _ = listener.accept()
        _start(connection, selector, listener, running, entry_points)
      elif event == "stand-in gone":  # killed before its command ended: so is the command
        (child,) = about
        if child not in running or running[child][2] != key.fd:
          continue  # (its command ended in the same round: already handled)
        selector.unregister(key.fd)
        os.close(key.fd)
        running[child][2] = None
        os.kill(child, signal.SIGKILL)  # (not reaped yet: the pid is still the child's)
      else:
        (child,) = about
        connection, child_fd, stand_in_fd = running.pop(child)
        for fd in (child_fd, stand_in_fd):
          if fd is not None:
            selector.unregister(fd)
            os.close(fd)
        _, status = os.waitpid(child, 0)
        try:
          connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
        except OSError:  # the stand-in is gone
          pass
        connection.close()


if __name__ == "__main__":
  serve(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
