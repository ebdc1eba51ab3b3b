"""Benchmark: how many http monitors one process checks every 30 s with at most 1 s of
lateness, and the CPU that takes.

For each size, N monitors (copies of one stored as ``manage_monitor`` stores it) watch a
local aiohttp target that answers at once; ``Monitors`` starts as the app starts it
(first checks spread over one interval), and runs for ``--seconds`` (default 70: two
rounds and a bit). Printed per size: checks made, the latest start and the latest end
of a check against its due time (``CheckStats``), how many were over 1 s, and the CPU
of this process as a share of one core, beside that of the target and the database,
which run in their own processes so they are not counted as ours. Every check opens a
new connection, writes its result to ``monitors`` and counts it in ``monitor_checks``
(``--no-history``: not), as in production. Then what the monitors page reads for 50
monitors with a full month of counts (``CheckHistory.read``), and how long that takes.

Run: ``python bench/bench_monitors.py [--sizes 500,2000,8000] [--seconds 70]``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pymongo import AsyncMongoClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


from scheduler.monitors.monitor import MonitorLimits  # noqa: E402
from scheduler.monitors.service import Hooks, Monitors  # noqa: E402
from scheduler.monitors.store import MonitorStore  # noqa: E402
from storage.collections import ensure_indexes  # noqa: E402
from storage.repos.monitor_checks import SPARK_POINTS, CheckHistory, day_key, hour_key  # noqa: E402
from storage.repos.monitor_record import Monitor  # noqa: E402
from storage.repos.monitors import MonitorRepo  # noqa: E402

INTERVAL = 30
TARGET = """
import sys
from aiohttp import web
async def health(request):
    return web.Response(text="ok")
app = web.Application()
app.router.add_get("/health", health)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def wait_port(port: int, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def measure(
    db_uri: str, target_url: str, size: int, seconds: float, history: bool
) -> dict[str, Any]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        db_uri, directConnection=True, retryWrites=False, tz_aware=True
    )
    db = client[f"bench_{size}"]
    await client.drop_database(db.name)
    await ensure_indexes(db)
    limits = MonitorLimits(max_monitors=size)
    store = MonitorStore(MonitorRepo(db, now), limits)
    # One monitor made as manage_monitor makes it, copied N times (creating each one
    # checks the name and the count against the rest, which is quadratic past 50).
    first = await store.create("http", {"name": "m0", "url": target_url, "interval_seconds": 30})
    doc = await db["monitors"].find_one({"_id": first.id})
    assert doc is not None
    slots = [n for n in range(size) if n != doc["slot"]]  # the cap's slots, one each
    copies = [doc | {"_id": f"b{i}", "name": f"m{i}", "name_key": f"m{i}",
                     "slot": slots[i - 1], "url": f"{target_url}?m={i}"}
              for i in range(1, size)]  # fmt: skip
    for start in range(0, len(copies), 1000):
        await db["monitors"].insert_many(copies[start : start + 1000])
    downs: list[str] = []

    async def down(monitor: Monitor, reason: str) -> str:
        downs.append(reason)
        return "0"

    async def quiet(monitor: Monitor, *_: Any) -> None:
        return None

    hooks = Hooks(down=down, up=quiet, cleared=quiet, flapping=down)
    counts = CheckHistory(db) if history else None
    monitors = Monitors(store, hooks, now, history=counts)
    cpu, wall = time.process_time(), time.monotonic()
    await monitors.start()
    await asyncio.sleep(seconds)
    used, took = time.process_time() - cpu, time.monotonic() - wall
    stats = dataclasses.replace(monitors.stats)  # before the stop
    await monitors.stop()
    await client.drop_database(db.name)
    await client.close()
    return {
        "size": size,
        "checks": stats.checks,
        "late_max": stats.late_max,
        "late_over_1s": stats.late_over_second,
        "done_max": stats.done_max,
        "done_over_1s": stats.done_over_second,
        "cpu_share": used / took,
        "downs": len(downs),
        "first_down": downs[0] if downs else "",
    }


def now() -> datetime:
    return datetime.now(UTC)


async def measure_page(db_uri: str, monitors: int = 50, rounds: int = 5) -> None:
    """The monitors page's read of a full month of counts: each monitor's document
    with 24 hours, 31 days and a full ring of response times."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        db_uri, directConnection=True, retryWrites=False, tz_aware=True
    )
    db = client["bench_page"]
    await client.drop_database(db.name)
    await ensure_indexes(db)
    moment = now()
    hours = {hour_key(moment - timedelta(hours=h)): 120 for h in range(24)}
    days = {day_key(moment - timedelta(days=d)): 2880 for d in range(31)}
    docs = [
        {"_id": f"m{m}", "hc": hours, "hu": hours, "dc": days, "du": days,
         "ms": list(range(SPARK_POINTS)), "expires_at": moment}
        for m in range(monitors)
    ]  # fmt: skip
    await db["monitor_checks"].insert_many(docs)
    reader = CheckHistory(db)
    took = []
    for _ in range(rounds):
        began = time.monotonic()
        await reader.read([f"m{m}" for m in range(monitors)], moment)
        took.append(time.monotonic() - began)
    print(
        f"page read: {monitors} monitors, {len(docs)} documents, "
        f"best {min(took) * 1000:.0f} ms, worst {max(took) * 1000:.0f} ms of {rounds}"
    )
    await client.drop_database(db.name)
    await client.close()


async def measure_all(
    db_port: int,
    target_port: int,
    pids: tuple[int, int],
    sizes: list[int],
    seconds: float,
    history: bool,
) -> None:
    await wait_port(db_port)
    await wait_port(target_port)
    database, target = pids
    counted = "counted in monitor_checks" if history else "not counted"
    print(f"{os.cpu_count()} CPUs; interval {INTERVAL} s; {seconds:g} s per size; {counted}")
    print(
        f"{'monitors':>8} {'checks':>7} {'start late max':>14} {'>1 s':>5} "
        f"{'end late max':>12} {'>1 s':>5} {'CPU ours':>8} {'target':>7} {'db':>6}"
    )
    for size in sizes:
        db_cpu, target_cpu = cpu_seconds(database), cpu_seconds(target)
        started = time.monotonic()
        got = await measure(
            f"mongodb://127.0.0.1:{db_port}", f"http://127.0.0.1:{target_port}/health",
            size, seconds, history,
        )  # fmt: skip
        took = time.monotonic() - started
        db_share = (cpu_seconds(database) - db_cpu) / took
        target_share = (cpu_seconds(target) - target_cpu) / took
        print(
            f"{size:>8} {got['checks']:>7} {got['late_max']:>12.3f} s "
            f"{got['late_over_1s']:>5} {got['done_max']:>10.3f} s {got['done_over_1s']:>5} "
            f"{got['cpu_share']:>7.0%} {target_share:>7.0%} {db_share:>6.0%}"
            + (f"  downs: {got['downs']} ({got['first_down']})" if got["downs"] else "")
        )
    await measure_page(f"mongodb://127.0.0.1:{db_port}")


def main(sizes: list[int], seconds: float, history: bool) -> None:
    """The database and the target in their own processes, then each size in turn."""
    db_port, target_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as data:
        database = subprocess.Popen(
            [str(Path(sys.executable).parent / "secantusd-py"), "--port", str(db_port),
             "--storage-path", data, "--log-level", "ERROR", "--standalone"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        target = subprocess.Popen([sys.executable, "-c", TARGET, str(target_port)])
        try:
            pids = (database.pid, target.pid)
            asyncio.run(measure_all(db_port, target_port, pids, sizes, seconds, history))
        finally:
            for proc in (target, database):
                proc.terminate()
                proc.wait(timeout=30)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,2000,4000,8000")
    parser.add_argument("--seconds", type=float, default=70.0)
    parser.add_argument("--no-history", action="store_true", help="count no checks")
    options = parser.parse_args()
    chosen = [int(n) for n in options.sizes.split(",")]
    main(chosen, options.seconds, not options.no_history)
