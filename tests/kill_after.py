"""Runs the `imagesets` CLI and sends itself a signal when it starts upload number N+1.

A publisher killed (KILL) or interrupted (INT, Ctrl-C) mid-upload, at an exact point:
usage `kill_after.py N KILL|INT ARGS...`.
"""

import os
import signal
import sys

from imagesets.cli import main as cli
from imagesets.publishing import bucket

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
