"""Benchmarks time each run in a fresh process, so peak memory and start-up are its own:
the script runs itself with `--child ...`, which prints one JSON line of results."""

import json
import os
import subprocess
import sys


def run(script: str, *args: str) -> dict:
  """`python script --child *args`; its last stdout line as JSON, or exits with its stderr."""
  result = subprocess.run(
      [sys.executable, script, "--child", *map(str, args)],
      capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
  if result.returncode:
    sys.exit(f"{' '.join(map(str, args))} failed:\n{result.stderr[-3000:]}")
  return json.loads(result.stdout.strip().splitlines()[-1])
