import threading
import time

import pytest

from imagesets.storage import file_locks


def test_a_removed_lock_leaves_no_file_and_a_kept_one_stays(tmp_path):
  with file_locks.exclusive(tmp_path / "locks" / "a", remove=True):
    assert (tmp_path / "locks" / "a").exists()
  assert not (tmp_path / "locks" / "a").exists()
  with file_locks.exclusive(tmp_path / "locks" / "b"):
    pass
  assert (tmp_path / "locks" / "b").exists()


def test_removed_locks_are_never_held_twice_at_once(tmp_path):
  # flock locks an open file, not a name: a waiter that opened the file before its holder
  # removed it must not hold the lock alongside one that opened the new file.
  path, inside, overlaps = tmp_path / "lock", [0], []

  def contend():
    for _ in range(300):
      with file_locks.exclusive(path, remove=True):
        inside[0] += 1
        if inside[0] != 1:
          overlaps.append(inside[0])
        time.sleep(0.0001)
        inside[0] -= 1

  threads = [threading.Thread(target=contend) for _ in range(4)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert overlaps == []
  assert not path.exists()


def test_waiting_raises_to_stop_and_nothing_is_left_held(tmp_path):
  path = tmp_path / "lock"
  with file_locks.exclusive(path, remove=True):
    def give_up():
      raise TimeoutError("stop")
    with pytest.raises(TimeoutError):
      with file_locks.exclusive(path, waiting=give_up, remove=True):
        pass
  with file_locks.exclusive(path, waiting=lambda: None, remove=True):  # free again
    pass


@pytest.mark.parametrize("remove", [False, True])
def test_a_symlink_in_a_lock_files_place_is_refused_and_nothing_is_created(tmp_path, remove):
  (tmp_path / "locks").mkdir()
  (tmp_path / "locks" / "a").symlink_to(tmp_path / "outside")
  with pytest.raises(file_locks.LockLinkError) as error:
    with file_locks.exclusive(tmp_path / "locks" / "a", remove=remove):
      pass
  assert "symlink" in str(error.value) and "\n" not in str(error.value)
  assert not (tmp_path / "outside").exists()
  assert (tmp_path / "locks" / "a").is_symlink()  # left as it was
