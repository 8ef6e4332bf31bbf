import pytest

from imagesets.building import problems


def test_one_error_lists_every_problem_sorted_with_the_fix():
  found = [problems.Problem("roses/b.jpg", "truncated"), problems.Problem("a.png", "empty file")]
  with pytest.raises(problems.InvalidSourceError) as caught:
    problems.raise_if_any(found, source="/data/flowers", fix="delete or replace them")
  message = str(caught.value)
  assert message.startswith("2 problem(s) in /data/flowers:\n  a.png: empty file\n  roses/b.jpg: truncated")
  assert message.endswith("Fix: delete or replace them")
  assert [p.where for p in caught.value.problems] == ["a.png", "roses/b.jpg"]


def test_no_problems_no_error():
  problems.raise_if_any([], source="x", fix="y")
