"""Planned reads against a fake store that counts downloads: schedules, not timings."""

import collections
import concurrent.futures

import numpy as np
import pytest

from imagesets.reading import order as order_lib
from imagesets.reading import shard_reads
from imagesets.storage import tfrecord_files

RECORDS = 6


def _record(shard: int, index: int) -> bytes:
  return f"shard {shard} record {index}".encode()


@pytest.fixture
def shard_files(tmp_path):
  """12 TFRecord files of 6 records each (framed with their CRCs, as TFRecord writes them)."""
  for shard in range(12):
    tfrecord_files.write(tmp_path / f"s-{shard:05d}",
                         [_record(shard, index) for index in range(RECORDS)])
  return tmp_path


class FakeStore:
  """A machine's cache of at most `limit` shards, shared by readers (`for_reader()`, each
  saying what it reads next): pins hold a shard; an unpinned one is evicted (least
  recently used, shards some reader reads next last) when room is needed; a download
  ahead happens only if it fits without evicting what is held or read next."""

  def __init__(self, folder, limit: int):
    self.folder, self.limit = folder, limit
    self.present: collections.OrderedDict = collections.OrderedDict()
    self.pins = collections.Counter()
    self.downloads = collections.Counter()
    self.readers = []
    self.most_held = 0

  def for_reader(self):
    reader = _ReaderStore(self)
    self.readers.append(reader)
    return reader

  def wanted(self):
    return set().union(*(reader.next for reader in self.readers))

  def _room(self, urgent: bool) -> bool:
    wanted = self.wanted()
    while len(self.present) >= self.limit:
      free = [n for n in self.present if not self.pins[n] and (urgent or n not in wanted)]
      free.sort(key=lambda n: n in wanted)
      if not free:
        return False
      del self.present[free[0]]
    return True

  def download(self, name: str, urgent: bool) -> None:
    if name in self.present:
      return
    if not self._room(urgent):
      assert not urgent, f"no room for {name}: held {dict(self.pins)}"
      return
    self.present[name] = True
    self.downloads[name] += 1

  def held(self):
    return {n for n, count in self.pins.items() if count}


class _ReaderStore:
  """One reader's view of a FakeStore: the store interface of `shard_reads`."""

  ahead = 1   # windows downloaded ahead

  def __init__(self, machine: FakeStore):
    self.machine, self.next = machine, set()

  def pin(self, name):
    machine = self.machine
    machine.download(name, urgent=True)
    machine.present.move_to_end(name)
    machine.pins[name] += 1
    machine.most_held = max(machine.most_held, len(machine.held()))
    return machine.folder / name

  def unpin(self, name):
    assert self.machine.pins[name] > 0
    self.machine.pins[name] -= 1

  def prefetch(self, names):
    self.next = set(names)
    for name in names:
      self.machine.download(name, urgent=False)

  def close(self):
    self.next = set()


def _run(readers=1, window=2, epochs=3, shuffle=True, after=None):
  shards = [order_lib.ShardSlice(f"s-{i:05d}", 0, RECORDS) for i in range(12)]
  order = order_lib.Order(shards, seed=7, shuffle=shuffle, mix="shuffle")
  return order_lib.Run(order, readers, window, num_epochs=epochs, after=after)


def _expected(run, q, reader, start=0, stop=None):
  return [_record(s, r) for s, r in run.reader_pass(q, reader).rows[start:stop].tolist()]


def test_reads_in_order_download_each_shard_once_an_epoch_and_hold_one_window(shard_files):
  store = FakeStore(shard_files, limit=4)   # two windows of two shards
  run = _run()
  reads = shard_reads.PlannedReads(store.for_reader(), "tfrecord", run, 0)
  for q in range(3):
    got = [reads.read(q, i)[0] for i in range(len(run.reader_pass(q, 0)))]
    assert got == _expected(run, q, 0)
  assert sum(store.downloads.values()) <= 12 * 3
  assert max(store.downloads.values()) <= 3
  assert store.most_held <= 2          # the window read; the next one is only downloaded
  reads.finish()
  assert store.held() == set() and reads.stats["visits"] == 0


def test_batches_read_across_windows_come_back_in_order(shard_files):
  store = FakeStore(shard_files, limit=4)
  run = _run(epochs=1)
  reads = shard_reads.PlannedReads(store.for_reader(), "tfrecord", run, 0)
  got = reads.read(0, 0, 40) + reads.read(0, 40, 100)
  assert got == _expected(run, 0, 0)
  assert store.held() == set()  # every shard's count is done


def test_a_straggler_windows_behind_reads_its_shard_once_and_nothing_waits(shard_files):
  store = FakeStore(shard_files, limit=4)
  run = _run(epochs=1)
  reads = shard_reads.PlannedReads(store.for_reader(), "tfrecord", run, 0)
  size, plan = len(run.reader_pass(0, 0)), run.reader_pass(0, 0)
  late = int(plan.window_ends[0]) - 1   # the last read of window 0 comes after window 3 began
  got = {}
  for i in range(size):
    if i != late:
      got[i] = reads.read(0, i)[0]
    if i == int(plan.window_ends[2]):
      got[late] = reads.read(0, late)[0]
  assert [got[i] for i in range(size)] == _expected(run, 0, 0)
  assert reads.stats["visits"] == 1
  assert store.held() == set()   # window 0 let go when window 2 began, not held for the read
  # the straggler's shard once more, and at most one shard its room displaced
  assert sum(store.downloads.values()) <= 12 + 2


def test_a_rewound_iterator_reads_again_and_holds_nothing_after_the_pass(shard_files):
  store = FakeStore(shard_files, limit=4)
  run = _run(epochs=1)
  reads = shard_reads.PlannedReads(store.for_reader(), "tfrecord", run, 0)
  first = [reads.read(0, i)[0] for i in range(30)]   # 2.5 windows
  again = [reads.read(0, i)[0] for i in range(len(run.reader_pass(0, 0)))]
  assert first == _expected(run, 0, 0, 0, 30) and again == _expected(run, 0, 0)
  reads.finish()
  assert store.held() == set()
  assert reads.stats["visits"] == 0   # a record read again starts the pass over
  # the 8 shards of the windows begun before the rewind (evicted since) once more
  assert sum(store.downloads.values()) <= 12 + 8 and max(store.downloads.values()) <= 2


def test_random_access_holds_one_shard_for_each_read_only(shard_files):
  store = FakeStore(shard_files, limit=2)
  run = _run(epochs=1)
  reads = shard_reads.PlannedReads(store.for_reader(), "tfrecord", run, 0)
  rng = np.random.default_rng(0)
  for _ in range(50):
    shard, index = int(rng.integers(12)), int(rng.integers(RECORDS))
    assert reads.read_once(shard, [index]) == [_record(shard, index)]
    assert store.held() == set()
  assert store.most_held == 1


def test_workers_each_read_their_own_shards_once_an_epoch_on_one_machine(shard_files):
  for workers in (2, 3, 4):
    store = FakeStore(shard_files, limit=2 * 2 * workers)   # per worker: a window + the next
    run = _run(readers=workers)
    readers = [shard_reads.PlannedReads(store.for_reader(), "tfrecord", run, w) for w in range(workers)]
    for q in range(3):
      got = collections.Counter()
      sizes = [len(run.reader_pass(q, w)) for w in range(workers)]
      for i in range(max(sizes)):   # the workers read side by side
        for w, reads in enumerate(readers):
          if i < sizes[w]:
            got[reads.read(q, i)[0]] += 1
      assert got == collections.Counter(_record(s, r) for s in range(12) for r in range(RECORDS))
    assert max(store.downloads.values()) <= 3, workers   # each shard at most once an epoch


def test_reads_from_threads_in_order_get_their_records_and_let_every_shard_go(shard_files):
  store = FakeStore(shard_files, limit=12)
  run = _run(epochs=2)
  reads = shard_reads.PlannedReads(store.for_reader(), "tfrecord", run, 0)
  with concurrent.futures.ThreadPoolExecutor(8) as pool:
    for q in range(2):
      size = len(run.reader_pass(q, 0))
      got = list(pool.map(lambda i: reads.read(q, i)[0], range(size)))  # noqa: B023
      assert got == _expected(run, q, 0)
  reads.finish()
  assert store.held() == set()


def test_a_resumed_run_downloads_only_shards_it_reads(shard_files):
  run = _run(readers=2, epochs=1)
  position = run.position([(0, 12), (0, 30)])   # windows of 2 shards, 12 records each
  resumed = _run(readers=3, epochs=1, after=position)
  store = FakeStore(shard_files, limit=12)
  read = []
  for reader in range(3):
    reads = shard_reads.PlannedReads(store.for_reader(), "tfrecord", resumed, reader)
    read += [reads.read(0, i)[0] for i in range(len(resumed.reader_pass(0, reader)))]
  assert len(read) == 72 - 42 and len(set(read)) == len(read)
  # reader 0 read 1 window whole, reader 1 2 windows and half of a third (two shards begun)
  assert sum(store.downloads.values()) == 12 - 6   # the 6 shards read whole are not fetched


def test_a_window_half_read_is_not_taken_for_a_rewound_one(shard_files):
  # Stored order: window 0 is shard 0's records, then shard 1's. Shard 0 read whole, the
  # reader two windows on, then shard 1's reads arrive (another thread's): stragglers,
  # read once each, not a pass starting over (which would let go of the windows ahead).
  store = FakeStore(shard_files, limit=12)
  run = _run(epochs=1, shuffle=False)
  reads = shard_reads.PlannedReads(store.for_reader(), "tfrecord", run, 0)
  size = len(run.reader_pass(0, 0))
  order = list(range(6)) + list(range(12, 36)) + list(range(6, 12)) + list(range(36, size))
  got = {i: reads.read(0, i)[0] for i in order}
  assert [got[i] for i in range(size)] == _expected(run, 0, 0)
  assert reads.stats["visits"] == 6 and reads.stats["opened"] == 11
  assert store.held() == set()   # every shard let go by its count, no finish() needed


def test_a_reader_that_moved_on_while_a_shard_downloaded_reads_it_once(shard_files):
  # The first read of window 0 waits for its download while other reads take the reader
  # to the pass's end and then read the rest of window 0 (stragglers, once each): that
  # shard is read once too, not held for reads that already came.
  store = FakeStore(shard_files, limit=12)
  run = _run(epochs=1, shuffle=False)
  view = store.for_reader()
  reads = shard_reads.PlannedReads(view, "tfrecord", run, 0)
  pin, meanwhile = view.pin, {}

  def slow_pin(name):
    if not meanwhile:
      meanwhile[-1] = None
      for i in list(range(12, 72)) + list(range(1, 12)):   # elsewhere, while it downloads
        meanwhile[i] = reads.read(0, i)[0]
    return pin(name)
  view.pin = slow_pin
  got = {0: reads.read(0, 0)[0], **meanwhile}
  assert [got[i] for i in range(72)] == _expected(run, 0, 0)
  assert store.held() == set()


def test_a_dataset_read_again_after_passes_starts_over_without_visits(shard_files):
  store = FakeStore(shard_files, limit=4)
  run = _run(epochs=3)
  reads = shard_reads.PlannedReads(store.for_reader(), "tfrecord", run, 0)
  for q in range(3):
    for i in range(len(run.reader_pass(q, 0))):
      reads.read(q, i)
  again = [reads.read(0, i)[0] for i in range(len(run.reader_pass(0, 0)))]
  assert again == _expected(run, 0, 0) and reads.stats["visits"] == 0
  assert store.held() == set()


def test_no_lock_is_held_across_a_download(shard_files):
  # A read whose shard is still downloading holds up no read of a shard already here.
  import threading
  store = FakeStore(shard_files, limit=12)
  run = _run(epochs=1, shuffle=False)
  view = store.for_reader()
  reads = shard_reads.PlannedReads(view, "tfrecord", run, 0)
  assert reads.read(0, 0) == _expected(run, 0, 0, 0, 1)   # window 0's first shard open
  pin, downloading, release = view.pin, threading.Event(), threading.Event()

  def slow_pin(name):
    if name == "s-00002":   # window 1's first shard: a download that does not end yet
      downloading.set()
      assert release.wait(60)
    return pin(name)
  view.pin = slow_pin
  waiting = threading.Thread(target=reads.read, args=(0, 12))
  waiting.start()
  assert downloading.wait(60)
  done = []
  reader = threading.Thread(target=lambda: done.append(reads.read(0, 1)))
  reader.start()
  reader.join(60)
  finished = not reader.is_alive()
  release.set()
  waiting.join(60)
  assert finished and done == [_expected(run, 0, 0, 1, 2)]


def test_a_shard_of_a_format_we_do_not_read_is_refused_naming_it(tmp_path):
  shard = tmp_path / "pets-train.parquet-00000-of-00001"
  shard.write_bytes(b"PAR1")
  with pytest.raises(ValueError, match="a parquet shard; this package reads TFRecord"):
    shard_reads.open_records(shard, "parquet")


def test_a_file_tensorflow_wrote_reads_back_and_a_flipped_byte_is_named(tmp_path):
  """An oracle beside our own writer (whose CRC the reader shares): TensorFlow's bytes."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  records = [b"", b"one", bytes(range(256)) * 40]
  path = tmp_path / "theirs"
  with tf.io.TFRecordWriter(str(path)) as writer:
    for record in records:
      writer.write(record)
  opened = shard_reads.TFRecordFile(path)
  assert opened.read([2, 0, 1]) == [records[2], records[0], records[1]]
  opened.close()
  data = bytearray(path.read_bytes())
  data[-10] ^= 1  # (in the last record's data)
  path.write_bytes(bytes(data))
  opened = shard_reads.TFRecordFile(path)
  with pytest.raises(ValueError, match="record 2 is damaged"):
    opened.read([2])
