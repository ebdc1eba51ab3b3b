"""``watchkeeper run`` stops on SIGTERM while its embedded database is stuck (issue 28).

The field report: SIGTERM arrived while the database child was busy in one long
operation, and the run was "not done after 20 s" (it took about a minute: each part's
stop waited out the database's timeouts, then the database got 20 s before SIGKILL).
Here a quadratic ``$regex`` on a 256,000-character value goes straight to the database
child (past the sandbox, through ``DATA_DIR/db.uri``), which then holds its interpreter
lock for hours; the run gets SIGTERM once the child is busy in it. The run must exit,
cleanly, and the next start must find what was stored before. How long the stop takes
is measured by ``bench/bench_stop_stuck_db.py``; here only a generous watchdog.

A database in a process of its own (``EMBEDDED_DB_SEPARATE_PROCESS``): only there can it
be killed alone. On a thread of the agent's process (the default) such a match holds
the agent's interpreter lock too; the sandbox refuses the patterns that could, and only
a local process that reads ``DATA_DIR/db.uri`` can send one past it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from tests.agent.cli.procs import (
    children_of,
    free_port,
    gone,
    output_of,
    run_env,
    start,
    wait_healthy,
)

ADMIN = "admin-secret-0123456789"  # run_env's ADMIN_TOKEN
STOP_WATCHDOG = 40.0
"""Seconds a stop may take here before the test fails: a hang, not a slow machine (it
took about 60 s before the stop had one deadline)."""
Doc = dict[str, Any]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _api(port: int, path: str, body: Doc | None = None) -> Doc:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return dict(json.loads(resp.read()))


def _stick(uri: str, child: int) -> MongoClient[Doc]:
    """The database child busy in a quadratic match (from a thread that never returns
    an answer); returns once the match has had a second of the child's CPU."""
    client: MongoClient[Doc] = MongoClient(uri, directConnection=True)
    client.watchkeeper.ai_scratch.insert_one({"_id": "long", "s": "a" * 256_000})

    def match() -> None:
        with contextlib.suppress(Exception):  # the server is killed under it
            client.watchkeeper.ai_scratch.find_one({"s": {"$regex": "[a-z]+[0-9]"}})

    threading.Thread(target=match, daemon=True).start()
    idle = _cpu_seconds(child)
    while _cpu_seconds(child) < idle + 1.0:
        time.sleep(0.05)
    return client


def _stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM, then the output once it exited; fails if it runs past the watchdog."""
    proc.send_signal(signal.SIGTERM)
    try:
        output, _ = proc.communicate(timeout=STOP_WATCHDOG)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {STOP_WATCHDOG:.0f} s after SIGTERM:\n{output_of(proc)}")
    return output or ""


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@pytest.mark.timeout(240)  # two starts and stops of a real process, a busy machine
def test_sigterm_stops_run_while_its_database_is_stuck(tmp_path: Path) -> None:
    port = free_port()
    env = run_env(tmp_path, port, EMBEDDED_DB_SEPARATE_PROCESS="1")
    data_dir = tmp_path / "data"
    proc = start(env, tmp_path)
    child = 0
    stuck: MongoClient[Doc] | None = None
    try:
        wait_healthy(proc, port, 60)
        raised = _api(port, "/api/alerts", {"severity": "warning", "title": "Backup failed"})
        (child,) = children_of(proc.pid)
        stuck = _stick((data_dir / "db.uri").read_text().strip(), child)
        output = _stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        if child and not gone(child):
            os.kill(child, signal.SIGKILL)  # busy for hours otherwise
        if stuck is not None:
            stuck.close()
    assert proc.returncode == 0, output
    assert output.rstrip().endswith("stopped"), output
    assert gone(child), "the database child outlived the run"
    assert "killing it" in output, output  # it was stuck: SIGTERM alone could not stop it

    again = start(env, tmp_path)
    try:
        wait_healthy(again, port, 60)
        alerts = _api(port, "/api/status")["alerts"]
        with MongoClient((data_dir / "db.uri").read_text().strip(), directConnection=True) as db:
            kept = db.watchkeeper.ai_scratch.find_one({"_id": "long"}, {"_id": 1})
        output = _stop(again)
    finally:
        if again.poll() is None:
            again.kill()
    assert [(a["code"], a["title"]) for a in alerts] == [(raised["code"], "Backup failed")]
    assert kept == {"_id": "long"}
    assert again.returncode == 0, output
