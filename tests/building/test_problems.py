import subprocess
import sys

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


def test_one_line_errors_leave_sys_excepthook_alone_outside_a_command_line_program():
  hook = sys.excepthook
  for i in range(3):
    problems.one_line_if_uncaught(ValueError(f"refused {i}"))
  assert sys.excepthook is hook


_CLI = r'''
import sys
sys.argv[0] = "/venv/bin/tfds"  # as the `tfds` console script runs
from imagesets.building import problems
for i in range(3):
  problems.one_line_if_uncaught(ValueError(f"refused {i}"))
hook = sys.excepthook
problems.one_line_if_uncaught(ValueError("again"))
assert sys.excepthook is hook, "installed twice"
raise problems.one_line_if_uncaught(ValueError("photos/a.jpg is bad; remove it"))
'''


def test_in_a_command_line_program_the_hook_is_installed_once_and_prints_one_line():
  result = subprocess.run([sys.executable, "-c", _CLI], capture_output=True, text=True,
                          timeout=120)
  assert result.returncode == 1
  assert result.stderr == "error: photos/a.jpg is bad; remove it\n", result.stderr[-2000:]
