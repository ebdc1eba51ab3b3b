"""Benchmark: the scheduler at scale, and what a pulse costs in tokens.

1. 10,000 cron jobs: time to load them from the database and arm the one APScheduler
   timer for the earliest, and the resident memory of the process (targets: <= 2 s,
   <= 200 MB).
2. 200 jobs due in the same minute, real timers, an instant model, the whole path
   (lease, run record, agent, delivery): lateness of each start (target p99 <= 1 s).
3. Input tokens of one non-idle pulse request: system prompt + messages + tool schemas
   (target <= 3,000).

Uses the embedded database in a temporary directory. Run:
``python bench/bench_scheduler.py``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.app.application import Scheduling  # noqa: E402
from agent.app.core import App, build_app  # noqa: E402
from agent.app.features.scheduling import SchedulingOptions, scheduling  # noqa: E402
from agent.config import Settings  # noqa: E402
from agent.owner import OwnerSettings  # noqa: E402
from channels.types import InboundSink, OutboundMessage, SendResult  # noqa: E402
from runtime.loop import run as run_app_loop  # noqa: E402
from scheduler.cron.expression import next_fires  # noqa: E402
from scheduler.cron.job import CronJob, JobReader  # noqa: E402
from scheduler.cron.service import CronService  # noqa: E402
from scheduler.engine import Engine  # noqa: E402
from scheduler.fires.recorder import RunRecorder, Skip  # noqa: E402
from scheduler.pulse.store import PulseStore  # noqa: E402
from storage.db import open_database  # noqa: E402
from storage.repos.cron_jobs import CronJobStore  # noqa: E402
from storage.repos.leases import LeaseStore  # noqa: E402
from storage.repos.pulse import PulseRepo  # noqa: E402
from storage.repos.runs.store import RunStore  # noqa: E402
from tests.fakes.scripted import Request, ScriptedModel  # noqa: E402
from tests.tokens import count_tokens  # noqa: E402

JOBS = 10_000
SAME_MINUTE = 200
UTC_TZ = ZoneInfo("UTC")


def rss_mb(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def children_rss_mb() -> float:
    """The embedded database runs as a child process; count it too."""
    total = 0.0
    for task in Path("/proc/self/task").iterdir():
        for child in (task / "children").read_text().split():
            total += rss_mb(child)
    return total


class NullChannel:
    name = "console"

    def __init__(self) -> None:
        self.sent = 0

    async def start(self, sink: InboundSink) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send(self, message: OutboundMessage) -> SendResult:
        self.sent += 1
        return SendResult()

    async def typing(self, chat_id: str) -> None:
        return None

    def status(self) -> dict[str, Any]:
        return {"connected": True}


def _settings(data: Path) -> Settings:
    # 200 every-minute jobs are a load test, not something the model may set up.
    return Settings(  # type: ignore[call-arg]
        _env_file=None,
        data_dir=data,
        openai_api_key="sk-bench",
        max_cron_jobs=1_000,
        min_cron_interval_minutes=0,
    )


async def bench_load(data: Path) -> None:
    now = datetime.now(UTC)
    async with open_database(None, "bench_load", data) as database:
        db = database.db
        await db["cronjobs"].delete_many({})
        docs = []
        for i in range(JOBS):
            expression = f"{i % 60} {i % 24} * * {i % 7}"
            docs.append(
                {
                    "_id": f"{i:08x}",
                    "name": f"job {i}",
                    "instruction": f"Check item {i} and report anything unusual.",
                    "cron_expression": expression,
                    "timezone": "UTC",
                    "enabled": True,
                    "origin_channel": "console",
                    "origin_chat_id": "owner",
                    "created_at": now,
                    "next_fire_at": next_fires(expression, UTC_TZ, now, 1)[0],
                }
            )
        await db["cronjobs"].insert_many(docs)
        del docs

        async def never(*_: Any) -> Skip:
            return Skip("idle", "benchmark")

        runs = RunStore(db)
        wall_clock = partial(datetime.now, UTC)
        before = rss_mb()
        engine = Engine(
            jobs=CronService(CronJobStore(db, JobReader()), lambda: datetime.now(UTC), "UTC"),
            pulse=PulseStore(PulseRepo(db), wall_clock, OwnerSettings(db, wall_clock, "UTC")),
            runs=runs,
            leases=LeaseStore(db, "bench"),
            clock=lambda: datetime.now(UTC),
            recorder=RunRecorder(runs, lambda: datetime.now(UTC), cron=never, pulse=never),
        )
        started = time.perf_counter()
        armed = await engine.start()
        elapsed = time.perf_counter() - started
        after = rss_mb()
        database = children_rss_mb()
        await engine.stop()
    print(
        f"[1] {JOBS} cron jobs loaded, {armed} due moments, one timer armed, in {elapsed:.2f} s "
        "(target <= 2 s)"
    )
    print(
        f"    resident memory: {after + database:.0f} MB ({after:.0f} MB this process + "
        f"{database:.0f} MB embedded database process) (target <= 200 MB); loading and "
        f"arming added {after - before:.0f} MB"
    )


async def bench_same_minute(data: Path, distinct: bool) -> None:
    shift = [timedelta(0)]

    def clock() -> datetime:
        return datetime.now(UTC) + shift[0]

    model = ScriptedModel(lambda r: "done")
    channel = NullChannel()
    settings = _settings(data)
    settings.mongodb_db = f"bench_minute_{distinct}"
    async with build_app(
        settings,
        model=model,
        channels=[channel],
        clock=clock,
        features=[scheduling(SchedulingOptions(timer=True))],
        on_part=lambda _: None,
    ) as app:
        parts = app.scheduling
        assert parts is not None
        await parts.pulse.update_config(enabled=False)
        real = datetime.now(UTC)
        shift[0] = real.replace(second=45, microsecond=0) - real  # the minute ends in 15 s
        target = clock().replace(second=0, microsecond=0) + timedelta(minutes=1)
        for i in range(SAME_MINUTE):
            expression = "* * * * *"
            if distinct:  # another minute and hour each: 200 schedules that meet at target
                other_minute = (target.minute + 1 + i % 59) % 60
                other_hour = (target.hour + 1 + i // 59) % 24
                expression = f"{target.minute},{other_minute} {target.hour},{other_hour} * * *"
            job = await parts.jobs.create(
                name=f"job {i}",
                instruction=f"Report on item {i}.",
                cron_expression=expression,
                timezone="UTC",
            )
            assert job.next_fire_at == target, "job creation crossed the minute"
        deadline = time.monotonic() + 30
        runs: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            query = {"kind": "cron", "scheduled_for": target, "ended_at": {"$exists": True}}
            runs = await app.deps.db["runs"].find(query).to_list()
            if len(runs) >= SAME_MINUTE:
                break
        await parts.engine.join()
    late = sorted((r["started_at"] - r["scheduled_for"]).total_seconds() for r in runs)
    ok = sum(1 for r in runs if r["status"] == "success")
    p50 = statistics.median(late)
    p99 = late[max(0, int(len(late) * 0.99) - 1)]
    what = "200 different schedules" if distinct else "all '* * * * *'"
    print(
        f"[2] {len(runs)}/{SAME_MINUTE} jobs due in the same minute ({what}) ran ({ok} success, "
        f"{channel.sent} delivered): lateness p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
        f"max {late[-1] * 1000:.0f} ms (target p99 <= 1 s)"
    )


async def _busy_day(app: App, parts: Scheduling) -> None:
    """Notes, two open alerts, cron jobs due soon and one that just ran."""
    await parts.pulse.update_notes(
        "- Waiting for ACME to answer about invoice 2231 (sent Tue); chase on Friday.\n"
        "- Backup job failed twice last week; check tonight's result.\n"
        "- Owner flies to Lisbon on the 14th: remind about check-in 24 h before.\n"
        "- Watch the electricity price; alert if above 0.40/kWh tomorrow morning."
    )
    alerts = app.deps.alerts
    if alerts is not None:
        await alerts.raise_alert(
            severity="warning",
            title="Disk 91% full on nas",
            body="/volume1 at 91%.",
            dedupe_key="disk:nas",
        )
        await alerts.raise_alert(severity="info", title="ACME replied", body="Invoice paid.")
    now = app.clock()
    for i, minute in enumerate((20, 40)):
        at = (now + timedelta(minutes=minute)).astimezone(UTC)
        job = await parts.jobs.create(
            name=f"Check {i}",
            instruction="Check the backup log and report failures only.",
            cron_expression=f"{at.minute} {at.hour} * * *",
            timezone="UTC",
        )
    ran: CronJob = job
    await parts.engine.recorder.cron(ran, now)


async def bench_pulse_tokens(data: Path) -> None:
    seen: list[Request] = []

    def respond(request: Request) -> str:
        seen.append(request)
        return "ok"

    settings = _settings(data)
    settings.mongodb_db = "bench_pulse"
    settings.admin_token = None
    async with build_app(
        settings,
        model=ScriptedModel(respond),
        channels=[NullChannel()],
        on_part=lambda _: None,
    ) as app:  # default features: alerts and scheduling, as in production
        parts = app.scheduling
        assert parts is not None
        await _busy_day(app, parts)
        seen.clear()
        run = await parts.engine.recorder.pulse(app.clock())
    request = seen[0]
    system = count_tokens(request.system)
    messages = sum(count_tokens(m.text) for m in request.messages)
    tools = count_tokens(json.dumps([t.model_dump() for t in request.tools]))
    total = system + messages + tools
    print(
        f"[3] non-idle pulse request ({run.status}, {len(request.tools)} tools): "
        f"{total} input tokens = system {system} + brief {messages} + tool schemas {tools} "
        "(target <= 3,000)"
    )


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        await bench_load(data)
        await bench_same_minute(data, distinct=False)
        await bench_same_minute(data, distinct=True)
        await bench_pulse_tokens(data)


if __name__ == "__main__":
    run_app_loop(main())
