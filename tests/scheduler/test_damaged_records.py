"""A stored record that does not parse (written by hand, or by an older version) is
logged and skipped at its store: the scheduler's loop goes on with the others."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from scheduler.monitors.monitor import MonitorLimits
from scheduler.monitors.service import Monitors
from scheduler.monitors.store import MonitorStore
from storage.repos.monitors import MonitorRepo
from storage.repos.pulse import PULSE_ID
from tests.fakes.clock import FakeClock
from tests.scheduler.test_engine import Harness, _pulse_off, utc
from tests.scheduler.test_monitors import Told

Doc = dict[str, Any]


async def test_a_damaged_run_record_is_skipped_and_the_jobs_still_fire(
    db: AsyncDatabase[Doc], caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(utc(2026, 3, 2, 7, 59))  # Monday 08:59 Berlin
    h = Harness(db, clock)
    await _pulse_off(h)
    job = await h.job("0 9 * * *")
    past = clock() - timedelta(hours=1)
    await db["runs"].insert_many(
        [
            # Left running by a process long gone, with a count no reader can use.
            {"kind": "cron", "job_id": "gone", "status": "running", "attempts": "two",
             "started_at": past, "owner": "dead:1:x", "lease_until": past},
            # A retry due now whose start is not a date.
            {"kind": "cron", "job_id": job.id, "status": "failed", "started_at": "yesterday",
             "retry_at": past, "retry_until": clock() + timedelta(hours=1)},
        ]
    )  # fmt: skip
    caplog.set_level(logging.WARNING)
    await h.engine.start()  # reclaims what it can read: the damaged record is skipped
    try:
        clock.set(utc(2026, 3, 2, 8, 0, 1))
        fires = await h.engine.run_due()
    finally:
        await h.engine.stop()
    assert [(f.job_id, f.action) for f in fires] == [(job.id, "run")]
    assert h.cron_calls == [(job.id, utc(2026, 3, 2, 8, 0))]
    assert "does not parse" in caplog.text
    # Nothing was rewritten but the retry that could not be read: it is not claimed again.
    damaged = await db["runs"].find_one({"attempts": "two"})
    assert damaged is not None and damaged["status"] == "running"
    assert await db["runs"].count_documents({"retry_at": {"$exists": True}}) == 0


async def test_a_damaged_pulse_setting_keeps_its_default_and_the_jobs_still_fire(
    db: AsyncDatabase[Doc], caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(utc(2026, 3, 2, 7, 59))  # Monday 08:59 Berlin
    h = Harness(db, clock)
    job = await h.job("0 9 * * *")
    await db["settings"].update_one(
        {"_id": PULSE_ID}, {"$set": {"pulses_per_day": "lots"}}, upsert=True
    )
    caplog.set_level(logging.WARNING)
    await h.engine.start()
    try:
        clock.set(utc(2026, 3, 2, 8, 0, 1))
        await h.engine.run_due()
        state = await h.pulse.get()
    finally:
        await h.engine.stop()
    assert h.cron_calls == [(job.id, utc(2026, 3, 2, 8, 0))]
    assert state.pulses_per_day == 12 and state.next_pulse_at is not None
    assert "pulses_per_day kept at its default" in caplog.text


async def test_a_damaged_monitor_is_skipped_and_the_others_are_watched(
    db: AsyncDatabase[Doc], caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(utc(2026, 11, 26, 10, 0))
    quick = MonitorLimits(min_interval_seconds=1, timeout_seconds=0.5, review_seconds=0.05)
    first = Monitors(MonitorStore(MonitorRepo(db, clock), quick), Told().hooks(), clock)
    await first.start()
    try:
        made = await first.create("heartbeat", {"name": "Backups", "period_seconds": 60})
    finally:
        await first.stop()
    # Edited by hand: no kind, and a period that is not a number.
    await db["monitors"].insert_one({"_id": "hand", "name": "Hand", "period_seconds": "1h"})
    caplog.set_level(logging.WARNING)
    again = Monitors(MonitorStore(MonitorRepo(db, clock), quick), Told().hooks(), clock)
    await again.start()
    try:
        assert [m.id for m in again.all()] == [made.id]
    finally:
        await again.stop()
    assert "monitor 'hand' skipped: it does not parse" in caplog.text
