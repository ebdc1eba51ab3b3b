"""A database client leaves no source text behind: pymongo formats the call stack of
every client it makes (to name unclosed clients in its own tests), which reads each
file on that stack into ``linecache`` for the life of the process; ``make_client``
lets those lines go. Run in a fresh interpreter: this test process has read much
source already (pytest's own tracebacks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import linecache, tracemalloc
tracemalloc.start()
from storage.db import make_client
client = make_client("mongodb://127.0.0.1:9/")
held = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, linecache.__file__)])
print(sum(stat.size for stat in held.statistics("filename")))
"""
MOST_BYTES = 16 * 1024
"""What ``linecache`` may still hold (its own small tables); the stack's files held
about 350 KiB here."""


def test_a_new_client_holds_no_source_lines(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    held = int(done.stdout.strip().splitlines()[-1])
    assert held < MOST_BYTES
