"""Runs the `imagesets` CLI and SIGKILLs itself when it starts upload number N+1.

A publisher killed mid-upload, at an exact point: usage `kill_after.py N ARGS...`.
"""

import os
import signal
import sys

from imagesets import bucket, cli

limit = int(sys.argv[1])
started = 0
upload = bucket.Bucket.upload


def upload_then_die(self, *args, **kwargs):
  global started
  started += 1
  if started > limit:
    os.kill(os.getpid(), signal.SIGKILL)
  return upload(self, *args, **kwargs)


bucket.Bucket.upload = upload_then_die
sys.exit(cli.main(sys.argv[2:]))
