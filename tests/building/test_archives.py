import io
import tarfile

import pytest

from imagesets.building import archives


def _tar(path, members):
  """members: (name, bytes) for files, (name, '->target') for symlinks."""
  with tarfile.open(path, "w:gz") as tar:
    for name, content in members:
      info = tarfile.TarInfo(name)
      if isinstance(content, str):
        info.type, info.linkname = tarfile.SYMTYPE, content[2:]
        tar.addfile(info)
      else:
        info.size = len(content)
        tar.addfile(info, io.BytesIO(content))
  return path


def test_extracts_a_clean_archive(tmp_path):
  archive = _tar(tmp_path / "a.tgz", [("root/roses/1.jpg", b"x"), ("root/link", "->roses/1.jpg")])
  target = archives.safe_extract(archive, tmp_path / "out")
  assert (target / "root" / "roses" / "1.jpg").read_bytes() == b"x"
  assert (target / "root" / "link").read_bytes() == b"x"
  assert archives.safe_extract(archive, tmp_path / "out") == target  # reused


def test_refuses_escaping_members_all_named_and_writes_nothing(tmp_path):
  archive = _tar(tmp_path / "evil.tgz", [
      ("root/ok.jpg", b"x"), ("../escape.txt", b"x"), ("/abs/path.txt", b"x"),
      ("root/link", "->../../../etc/passwd")])
  with pytest.raises(archives.UnsafeArchiveError) as caught:
    archives.safe_extract(archive, tmp_path / "out" / "target")
  names = [p.where for p in caught.value.problems]
  assert sorted(names) == sorted(["../escape.txt", "/abs/path.txt", "root/link"])
  assert "evil.tgz" in str(caught.value)
  assert not (tmp_path / "escape.txt").exists()
  assert list((tmp_path / "out").iterdir()) == []  # no partial or target folder left


def test_builders_extract_beside_tfds_downloads(tmp_path):
  class DownloadManager:
    download_dir = tmp_path / "downloads"
  root = archives.extract_root(DownloadManager())
  assert root == tmp_path / "downloads" / "extracted"
  archive = _tar(tmp_path / "photos.tgz", [("flower_photos/a/1.jpg", b"x")])
  target = archives.safe_extract_under(archive, root)
  assert target == root / "photos.tgz.safe"
  assert (target / "flower_photos" / "a" / "1.jpg").read_bytes() == b"x"
