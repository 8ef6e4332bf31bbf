"""Runs the `imagesets` CLI and sends itself a signal when it starts upload number N+1.

A publisher killed (KILL) or interrupted (INT, Ctrl-C) mid-upload, at an exact point:
usage `kill_after.py N KILL|INT ARGS...`.

The command gets Ctrl-C as a terminal's foreground process does: SIGINT handled by
Python's default handler and not blocked. A process inherits an ignored or blocked
SIGINT from the one that started it (a test runner's worker, a CI agent, `nohup`-like
wrappers); the interpreter then installs no handler, the signal sent here is dropped or
stays pending, and the publish runs to its end: a test of the command's answer to Ctrl-C
must not depend on what the runner left (`test_main.py` starts this script both ways).
"""

import os
import signal
import sys

from imagesets.cli import main as cli
from imagesets.storage import bucket

signal.signal(signal.SIGINT, signal.default_int_handler)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

limit = int(sys.argv[1])
signal_number = getattr(signal, f"SIG{sys.argv[2]}")
started = 0
upload = bucket.Bucket.upload


def upload_then_signal(self, *args, **kwargs):
  global started
  started += 1
  if started > limit:
    os.kill(os.getpid(), signal_number)
  return upload(self, *args, **kwargs)


bucket.Bucket.upload = upload_then_signal
sys.exit(cli.main(sys.argv[3:]))
