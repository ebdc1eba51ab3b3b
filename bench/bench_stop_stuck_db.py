"""SIGTERM to a real ``watchkeeper run`` while its embedded database is stuck (issue 28).

A document is stored first; then a quadratic ``$regex`` on a 256,000-character value is
sent straight to the database child (past the sandbox, through ``DATA_DIR/db.uri``), so
the child holds its interpreter lock for hours. Once the child has burnt a second of CPU
on it, the run gets SIGTERM. Printed: seconds until the run exited and its exit code,
the stop's log lines, then the seconds until a second ``watchkeeper run`` on the same
``DATA_DIR`` was healthy and whether it still found the document.

    python bench/bench_stop_stuck_db.py [--signal INT] [--idle]

``--idle``: the same stop without the stuck match, for comparison.

The database runs in a process of its own (``EMBEDDED_DB_SEPARATE_PROCESS=1``): on a
thread of the agent's (the default) the match would hold the agent's interpreter lock
too, and only SIGKILL would end it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a plain script

from pymongo import MongoClient  # noqa: E402

from tests.agent.cli.procs import (  # noqa: E402
    children_of,
    free_port,
    gone,
    output_of,
    run_env,
    start,
    wait_healthy,
)

VALUE = "a" * 256_000
QUADRATIC = {"$regex": "[a-z]+[0-9]"}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stick(uri: str, child: int) -> None:
    """Send the quadratic match from a thread; return once the child is busy in it."""
    client: MongoClient[dict[str, object]] = MongoClient(
        uri, directConnection=True, serverSelectionTimeoutMS=5000
    )
    client.watchkeeper.ai_bench.insert_one({"_id": "long", "s": VALUE})

    def match() -> None:
        with contextlib.suppress(Exception):  # the server goes away under it
            client.watchkeeper.ai_bench.find_one({"s": QUADRATIC})

    threading.Thread(target=match, daemon=True).start()
    idle = cpu_seconds(child)
    while cpu_seconds(child) < idle + 1.0:
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--signal", default="TERM", choices=["TERM", "INT"])
    parser.add_argument("--idle", action="store_true", help="no stuck match")
    args = parser.parse_args()
    sig = signal.SIGTERM if args.signal == "TERM" else signal.SIGINT
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        port = free_port()
        env = run_env(tmp_path, port, EMBEDDED_DB_SEPARATE_PROCESS="1")
        proc = start(env, tmp_path)
        try:
            wait_healthy(proc, port, 60)
            uri = (tmp_path / "data" / "db.uri").read_text().strip()
            with MongoClient(uri, directConnection=True) as client:
                client.watchkeeper.ai_bench.insert_one({"_id": "kept", "note": "pay rent"})
            (child,) = children_of(proc.pid)
            if not args.idle:
                stick(uri, child)
            began, sent_at = time.monotonic(), time.time()
            proc.send_signal(sig)
            proc.wait(120)
            took = time.monotonic() - began
            output = output_of(proc)
            print(f"SIG{args.signal} -> exit {proc.returncode} after {took:.1f} s")
            print(
                f"    signal sent at {time.strftime('%H:%M:%S', time.localtime(sent_at))}"
                f",{int(sent_at % 1 * 1000):03d}"
            )
            print(f"database child gone: {gone(child)}")
            lines = output.splitlines()
            first = next(i for i, line in enumerate(lines) if "watchkeeper: stopping" in line)
            for line in lines[first:]:
                if " INFO " in line or " WARNING " in line or " ERROR " in line:
                    print("   ", line[:160])
        finally:
            if proc.poll() is None:
                proc.kill()
        began = time.monotonic()
        again = start(env, tmp_path)
        try:
            wait_healthy(again, port, 60)
            took = time.monotonic() - began
            uri = (tmp_path / "data" / "db.uri").read_text().strip()
            with MongoClient(uri, directConnection=True) as client:
                kept = client.watchkeeper.ai_bench.find_one({"_id": "kept"})
            print(f"restart healthy after {took:.1f} s; earlier document found: {kept is not None}")
            again.send_signal(signal.SIGTERM)
            again.wait(60)
        finally:
            if again.poll() is None:
                again.kill()


if __name__ == "__main__":
    main()
