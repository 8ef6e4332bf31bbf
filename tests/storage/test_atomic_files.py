"""atomic_files: a file appears whole under its name or not at all, by one of two rules."""

import errno
import os

import pytest

from imagesets.storage import atomic_files


def _no_hard_links(monkeypatch):
  monkeypatch.setattr(atomic_files.os, "link", lambda *a: (_ for _ in ()).throw(
      PermissionError(errno.EPERM, "no hard links here")))


def test_a_kept_file_is_never_written_through_its_new_name(tmp_path, monkeypatch):
  source = tmp_path / "v1" / "shard"
  source.parent.mkdir()
  source.write_bytes(b"records")
  target = tmp_path / "v2" / "shard"
  target.parent.mkdir()
  atomic_files.link(source, target, exclusive=True)
  assert target.read_bytes() == b"records" and target.stat().st_ino == source.stat().st_ino
  with pytest.raises(FileExistsError):
    atomic_files.link(tmp_path / "v1" / "shard", target, exclusive=True)
  other = tmp_path / "v2" / "copied"
  _no_hard_links(monkeypatch)
  atomic_files.link(source, other, exclusive=True)
  assert other.read_bytes() == b"records" and other.stat().st_ino != source.stat().st_ino
  assert sorted(p.name for p in other.parent.iterdir()) == ["copied", "shard"]
  target.unlink()
  other.write_bytes(b"")  # an existing name is refused before anything is copied
  with pytest.raises(FileExistsError):
    atomic_files.link(source, other, exclusive=True)
  assert source.read_bytes() == b"records"


@pytest.mark.parametrize("links", [True, False], ids=["hard links", "no hard links"])
def test_the_two_rules_replace_and_exclusive(links, tmp_path, monkeypatch):
  if not links:
    _no_hard_links(monkeypatch)
  target = tmp_path / "a" / "claim"
  assert atomic_files.write(target, b"first", exclusive=True)
  assert not atomic_files.write(target, b"second", exclusive=True)
  assert target.read_bytes() == b"first"
  assert atomic_files.write(target, [b"re", b"placed"])
  assert target.read_bytes() == b"replaced"
  source = tmp_path / "source"
  source.write_bytes(b"s" * 10)
  atomic_files.link(source, target)  # replace: over the existing name
  assert target.read_bytes() == b"s" * 10
  assert os.path.samefile(source, target) == links
  assert sorted(p.name for p in target.parent.iterdir()) == ["claim"]  # no temporary left


def test_a_write_that_fails_leaves_neither_the_name_nor_a_temporary(tmp_path):
  def chunks():
    yield b"part"
    raise OSError(errno.EIO, "Input/output error")
  target = tmp_path / "file"
  for exclusive in (False, True):
    with pytest.raises(OSError, match="Input/output"):
      atomic_files.write(target, chunks(), exclusive=exclusive)
    assert list(tmp_path.iterdir()) == []


def test_a_copy_reports_its_progress_and_appears_whole(tmp_path):
  source = tmp_path / "big"
  source.write_bytes(os.urandom(atomic_files.CHUNK + 5))
  seen = []
  assert atomic_files.copy(source, tmp_path / "out" / "big", progress=seen.append)
  assert seen == [atomic_files.CHUNK, 5]
  assert (tmp_path / "out" / "big").read_bytes() == source.read_bytes()


def test_temporaries_are_hidden_beside_their_target_and_name_their_writer(tmp_path):
  target = tmp_path / "folder" / "manifest.json"
  made = atomic_files.temporary_beside(target)
  assert made.parent == target.parent and made.name.startswith(".manifest.json.tmp-")
  assert atomic_files.temporary_beside(tmp_path / ".layout").name.startswith(".layout.tmp-")
  made.write_bytes(b"")
  (target.parent / ".manifest.json.tmp-notapid-1").write_bytes(b"")
  (target.parent / ".manifest.json.tmp-99999999999999999999-4").write_bytes(b"")
  found = {path.name: pid for path, pid in atomic_files.leftovers(target)}
  assert found == {made.name: os.getpid(), ".manifest.json.tmp-notapid-1": None,
                   ".manifest.json.tmp-99999999999999999999-4": None}


def test_a_long_name_gets_a_temporary_within_the_file_systems_limit(tmp_path):
  name = "x" * 250   # (NAME_MAX is 255 on Linux file systems)
  target = tmp_path / name
  assert atomic_files.write(target, b"whole")
  atomic_files.link(target, tmp_path / ("y" * 250))
  assert atomic_files.copy(target, tmp_path / ("z" * 250), exclusive=True)
  assert sorted(p.name for p in tmp_path.iterdir()) == [name, "y" * 250, "z" * 250]
  made = atomic_files.temporary_beside(target)
  made.write_bytes(b"")
  assert [(path, pid) for path, pid in atomic_files.leftovers(target)] == [(made, os.getpid())]


def test_a_leftover_named_with_other_digits_is_no_process_of_ours(tmp_path):
  target = tmp_path / ".layout"
  for odd in ("\u00b2", "\u0663", "12\u00b2"):   # str.isdigit() is true for these
    (tmp_path / f".layout.tmp-{odd}-1").write_bytes(b"")
  assert [pid for _, pid in atomic_files.leftovers(target)] == [None, None, None]


@pytest.mark.parametrize("refusal", [errno.EACCES, errno.EXDEV, errno.EMLINK, errno.EIO])
def test_a_link_refused_for_any_reason_but_a_taken_name_is_a_copy(refusal, tmp_path, monkeypatch):
  source = tmp_path / "shard"
  source.write_bytes(b"records")
  monkeypatch.setattr(atomic_files.os, "link", lambda *a: (_ for _ in ()).throw(
      OSError(refusal, os.strerror(refusal))))
  atomic_files.link(source, tmp_path / "kept", exclusive=True)
  atomic_files.link(source, tmp_path / "replaced")
  assert (tmp_path / "kept").read_bytes() == (tmp_path / "replaced").read_bytes() == b"records"
  with pytest.raises(FileNotFoundError):
    atomic_files.link(tmp_path / "missing", tmp_path / "other", exclusive=True)


def test_a_file_of_ours_is_read_back_only_as_a_regular_file_of_its_bound(tmp_path):
  ours = tmp_path / "ours.json"
  atomic_files.write(ours, b"{}")
  assert atomic_files.read_back(ours, 2) == b"{}"
  with pytest.raises(atomic_files.NotAFileOfOurs) as larger:
    atomic_files.read_back(ours, 1)
  assert larger.value.size == 2
  fifo = tmp_path / "fifo"
  os.mkfifo(fifo)  # (refused without waiting for a writer)
  with pytest.raises(atomic_files.NotAFileOfOurs):
    atomic_files.read_back(fifo, 64)
  link = tmp_path / "link"
  link.symlink_to(ours)
  with pytest.raises(OSError):  # (ELOOP: a link is not followed)
    atomic_files.read_back(link, 64)
