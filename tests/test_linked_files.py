"""linked_files: a version's file under another version's name, never written through."""

import pytest

import imagesets.linked_files as linked_files


def test_a_kept_file_is_never_written_through_its_new_name(tmp_path, monkeypatch):
  source = tmp_path / "v1" / "shard"
  source.parent.mkdir()
  source.write_bytes(b"records")
  target = tmp_path / "v2" / "shard"
  target.parent.mkdir()
  linked_files.link_or_copy(source, target)
  assert target.read_bytes() == b"records" and target.stat().st_ino == source.stat().st_ino
  with pytest.raises(FileExistsError):
    linked_files.link_or_copy(tmp_path / "v1" / "shard", target)
  other = tmp_path / "v2" / "copied"
  monkeypatch.setattr(linked_files.os, "link", lambda *a: (_ for _ in ()).throw(
      PermissionError("no hard links here")))
  linked_files.link_or_copy(source, other)
  assert other.read_bytes() == b"records" and other.stat().st_ino != source.stat().st_ino
  assert sorted(p.name for p in other.parent.iterdir()) == ["copied", "shard"]
  target.unlink()
  other.write_bytes(b"")  # an existing name is refused before anything is copied
  with pytest.raises(FileExistsError):
    linked_files.link_or_copy(source, other)
  assert source.read_bytes() == b"records"
