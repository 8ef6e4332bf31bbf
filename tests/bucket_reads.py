"""Downloads counted where they happen, at a file:// bucket: an audit hook counts the opens
(for reading) of the bucket's shard files, by file name, whatever code does them.

`AUDIT` is the hook's source (run here, and put into scripts run as other processes);
the `bucket_reads` fixture points it at one bucket for one test. Installed once a process
(audit hooks cannot be removed)."""

import collections

import pytest

AUDIT = """
import collections, sys
class BucketReads:
  root, opened = None, collections.Counter()
  @classmethod
  def hook(cls, event, args):
    if event == "open" and cls.root and isinstance(args[0], str) and isinstance(args[1], str):
      name = args[0].rsplit("/", 1)[-1]
      if args[0].startswith(cls.root) and "-of-" in name and "r" in args[1] and "+" not in args[1]:
        cls.opened[name] += 1
sys.addaudithook(BucketReads.hook)
"""
_installed: dict = {}
exec(AUDIT, _installed)
BucketReads = _installed["BucketReads"]


@pytest.fixture
def bucket_reads():
  """Counts shard downloads from the file:// bucket `url` given to `watch(url)`."""
  def watch(url):
    BucketReads.root = url[len("file://"):]
    BucketReads.opened = collections.Counter()
    return BucketReads.opened
  yield watch
  BucketReads.root = None
