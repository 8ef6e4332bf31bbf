"""round_trips' shared rules (the checks themselves run end to end in
tests/verifying/test_round_trip.py and tests/voc_segmentation/test_voc_round_trip.py)."""

import collections
import io
import tarfile

import pytest

from imagesets.building import round_trips


def test_a_source_archive_is_extracted_into_a_folder_that_goes_with_the_check(tmp_path):
  archive = tmp_path / "photos.tgz"
  with tarfile.open(archive, "w:gz") as tar:
    data = b"jpeg bytes"
    info = tarfile.TarInfo("photos/cats/1.jpg")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
  with round_trips.source_folder(archive) as folder:
    assert (folder / "photos" / "cats" / "1.jpg").read_bytes() == b"jpeg bytes"
  assert not folder.exists()
  with round_trips.source_folder(tmp_path) as folder:  # a folder is used in place
    assert folder == tmp_path
  assert tmp_path.exists()
  with pytest.raises(FileNotFoundError, match="does not exist"):
    with round_trips.source_folder(tmp_path / "missing.tgz"):
      pass


def test_each_source_file_is_stored_once_or_listed_as_skipped():
  report = round_trips.Report("class folders", "src", skipped={"c.jpg": "cut short"})
  round_trips.stored_once(report, collections.Counter({"a.jpg": 1, "b.jpg": 2}),
                          ["a.jpg", "b.jpg", "c.jpg", "d.jpg"], "in the source")
  assert sorted((p.where, p.reason) for p in report.mismatches) == [
      ("b.jpg", "stored 2 times"),
      ("d.jpg", "in the source but neither stored nor listed as skipped")]
  assert not report.ok and len(report.lines()) == 3
