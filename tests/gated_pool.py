"""A pool standing in for a build's worker processes in tests of work handed out while the
caller goes on: its work waits until the test opens the gate."""

import concurrent.futures
import threading


class GatedPool:
  """Threads whose work (`submit`, as a process pool's) waits until `gate` is set; `sent`:
  the names of the functions handed out, in order. Set the gate in a `finally` (a failed
  assertion before it would leave the threads waiting, and the test run with them)."""

  def __init__(self):
    self.gate, self.sent = threading.Event(), []
    self.threads = concurrent.futures.ThreadPoolExecutor(2)

  def submit(self, fn, *args):
    self.sent.append(fn.__name__)
    return self.threads.submit(lambda: self.gate.wait() and fn(*args))
