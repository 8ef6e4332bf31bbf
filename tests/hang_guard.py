"""Calls that a regression would make wait forever (a FIFO opened for reading, a take that
never comes), run so that the test fails instead of the suite hanging."""

import threading

import pytest


def returns_within(seconds: float, fn, *args, what: str = ""):
  """fn(*args)'s result, or its exception raised here; the test fails, naming `what`, when
  it has not returned within `seconds` (it runs on a daemon thread, which is left waiting
  and ends with the process). The bound only tells a hang from a slow run: generous."""
  outcome = []

  def run():
    try:
      outcome.append((True, fn(*args)))
    except BaseException as error:  # pylint: disable=broad-except  # (raised in the test)
      outcome.append((False, error))

  thread = threading.Thread(target=run, daemon=True)
  thread.start()
  thread.join(seconds)
  if not outcome:
    pytest.fail(f"still waiting after {seconds} s: {what or fn.__name__}")
  returned, value = outcome[0]
  if not returned:
    raise value
  return value
