"""named_versions.check_name: a name refused when TFDS has a builder of it; TFDS's own
builders imported to look only until a build of the name records that this TFDS found it
free (counted: lookups through `tfds.builder_cls`)."""

import json
import os

import pytest

from imagesets.building import named_versions
from imagesets_testing import tfds_names


@pytest.fixture
def lookups(monkeypatch):
  return tfds_names.count_lookups(monkeypatch)


def test_a_name_found_free_is_not_looked_up_again_by_the_same_tfds(tmp_path, lookups):
  checked = named_versions.check_name("garden_parts", data_dir=tmp_path)
  assert lookups == ["garden_parts"]
  record = tmp_path / "garden_parts" / named_versions.NAME_CHECKED
  assert not record.exists()  # (recorded once a build has succeeded: `save`)
  record.parent.mkdir()
  checked.save()
  assert json.loads(record.read_text()) == {"name": "garden_parts",
                                           "tfds": named_versions._installed()}
  again = named_versions.check_name("garden_parts", data_dir=tmp_path)
  assert lookups == ["garden_parts"] and again.record is None  # (nothing more to record)
  named_versions.check_name("garden_parts")  # (no data dir: looked up)
  assert lookups == ["garden_parts"] * 2


@pytest.mark.parametrize("stored", [
    {"name": "garden_parts", "tfds": "4.9.10 /elsewhere 00"},  # another install of TFDS
    {"name": "other_parts", "tfds": "installed"},               # another name's record
    "damaged",
])
def test_a_record_of_another_tfds_or_name_or_damaged_is_looked_up_again(tmp_path, lookups,
                                                                        stored):
  record = tmp_path / "garden_parts" / named_versions.NAME_CHECKED
  record.parent.mkdir()
  if isinstance(stored, dict) and stored["tfds"] == "installed":
    stored["tfds"] = named_versions._installed()
  record.write_text(stored if isinstance(stored, str) else json.dumps(stored))
  checked = named_versions.check_name("garden_parts", data_dir=tmp_path)
  assert lookups == ["garden_parts"]
  checked.save()  # (recorded anew)
  assert json.loads(record.read_text())["tfds"] == named_versions._installed()


def test_a_fifo_or_a_link_at_the_record_is_not_read(tmp_path, lookups):
  folder = tmp_path / "garden_parts"
  folder.mkdir()
  real = tmp_path / "elsewhere.json"
  real.write_text(json.dumps({"name": "garden_parts", "tfds": named_versions._installed()}))
  (folder / named_versions.NAME_CHECKED).symlink_to(real)
  named_versions.check_name("garden_parts", data_dir=tmp_path)
  (folder / named_versions.NAME_CHECKED).unlink()
  os.mkfifo(folder / named_versions.NAME_CHECKED)  # (a read would wait for a writer)
  named_versions.check_name("garden_parts", data_dir=tmp_path)
  assert lookups == ["garden_parts"] * 2


def _recorded(tmp_path, name):
  record = tmp_path / name / named_versions.NAME_CHECKED
  record.parent.mkdir()
  record.write_text(json.dumps({"name": name, "tfds": named_versions._installed()}))


def test_a_recorded_name_is_still_refused_when_a_builder_of_it_is_known_now(
    tmp_path, lookups, monkeypatch):
  tfds_names.with_provider(monkeypatch)
  # (ours; one registered since the record; an abstract one; one another provider offers)
  for name in ("voc_segmentation", tfds_names.REGISTERED, tfds_names.ABSTRACT,
               tfds_names.PROVIDED):
    _recorded(tmp_path, name)
    with pytest.raises(ValueError, match="taken by a registered TFDS builder"):
      named_versions.check_name(name, data_dir=tmp_path)
  assert lookups == []


def test_an_install_pip_did_not_list_file_by_file_is_always_looked_up(tmp_path, lookups,
                                                                       monkeypatch):
  monkeypatch.setattr(named_versions, "_installed", lambda: None)  # (editable, a copy)
  checked = named_versions.check_name("garden_parts", data_dir=tmp_path)
  assert checked.record is None and lookups == ["garden_parts"]


def test_a_name_tfds_has_is_refused_and_not_recorded(tmp_path, lookups):
  with pytest.raises(ValueError, match="taken by a registered TFDS builder"):
    named_versions.check_name("mnist", data_dir=tmp_path)
  assert lookups == ["mnist"] and not (tmp_path / "mnist").exists()
