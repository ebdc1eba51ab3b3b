"""``storage.repos.monitor_checks``: each check counted into its hour and its day by the
running service (http checks, pings, ``/fail`` and a missed deadline), bounded per
hour, read back as the monitors page's figures, and gone with its monitor."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from scheduler.monitors.history import expected_pings, uptime
from scheduler.monitors.service import Monitors
from scheduler.monitors.store import MonitorStore
from storage.repos.monitor_checks import SPARK_POINTS, CheckHistory, Counts
from storage.repos.monitors import MonitorRepo
from tests.fakes.clock import FakeClock
from tests.fakes.monitor_target import Target
from tests.scheduler.test_monitors import QUICK, Told
from tests.waiting import until_async

START = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)
Doc = dict[str, Any]

pytestmark = pytest.mark.clock(START)


@pytest.fixture
async def target() -> AsyncIterator[Target]:
    started = await Target().start()
    yield started
    await started.stop()


async def running(db: AsyncDatabase[Doc], clock: FakeClock) -> Monitors:
    history = CheckHistory(db)
    monitors = Monitors(
        MonitorStore(MonitorRepo(db, clock), QUICK), Told().hooks(), clock, history=history
    )
    await monitors.start()
    return monitors


def counted(db: AsyncDatabase[Doc], monitor_id: str, checks: int, of: str = "dc") -> Any:
    """Until at least ``checks`` are counted today (``of="du"``: good ones only)."""

    async def check() -> bool:
        doc = await db["monitor_checks"].find_one({"_id": monitor_id})
        return doc is not None and doc.get(of, {}).get("d20261126", 0) >= checks

    return check


async def test_the_check_loop_counts_each_check_with_its_response_time(
    db: AsyncDatabase[Doc], clock: FakeClock, target: Target
) -> None:
    monitors = await running(db, clock)
    try:
        made = await monitors.create(
            "http", {"name": "Web", "url": target.url, "interval_seconds": 1}
        )
        # Good ones: on a busy machine a check can outlast its 0.5 s and count as down
        # without reaching the target, and then fewer than two would be up.
        await until_async(counted(db, made.id, 2, of="du"), "two good checks counted")
        target.status = 500
        before = target.hits
        await until_async(counted(db, made.id, before + 2), "failed checks counted")
        assert monitors.history is not None
        figures = (await monitors.history.read([made.id], clock()))[made.id]
    finally:
        await monitors.stop()
    doc = await db["monitor_checks"].find_one({"_id": made.id})
    assert doc is not None and doc["expires_at"] == datetime(2026, 12, 27, 10, 0, tzinfo=UTC)
    assert doc["hc"]["h2026112610"] == doc["dc"]["d20261126"] == figures.day.checks
    assert figures.day.checks >= 4 and 2 <= figures.day.ups < figures.day.checks
    assert figures.month == figures.day  # the same checks, all today
    assert all(isinstance(t, int) and t >= 0 for t in figures.recent[:2])
    assert figures.recent[-1] is None  # the latest check failed


async def test_pings_fail_pings_and_a_missed_deadline_are_counted(
    db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    monitors = await running(db, clock)
    try:
        beat = await monitors.create(
            "heartbeat", {"name": "Job", "period_seconds": 60, "grace_seconds": 0}
        )
        assert beat.token is not None
        assert await monitors.ping(beat.token) and await monitors.ping(beat.token)
        assert await monitors.ping(beat.token, fail=True)
        assert await monitors.ping(beat.token)  # up again
        clock.advance(seconds=61)  # no ping within the period: a missed one
        await until_async(counted(db, beat.id, 5), "the missed deadline counted")
        assert monitors.history is not None
        figures = (await monitors.history.read([beat.id], clock()))[beat.id]
    finally:
        await monitors.stop()
    assert (figures.day.checks, figures.day.ups) == (5, 3)


async def test_a_monitor_keeps_one_bounded_document_and_a_delete_takes_it(
    db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    history = CheckHistory(db)
    for i in range(SPARK_POINTS + 30):
        await history.record("m1", START + timedelta(seconds=i), True, i)
    for hours in range(0, 40 * 24, 7):  # a check every 7 hours for 40 days
        await history.record("m2", START + timedelta(hours=hours), False, None)
    m1 = await db["monitor_checks"].find_one({"_id": "m1"})
    m2 = await db["monitor_checks"].find_one({"_id": "m2"})
    assert m1 is not None and m1["hc"] == {"h2026112610": SPARK_POINTS + 30}
    assert m1["ms"] == list(range(30, SPARK_POINTS + 30))  # the latest kept
    assert m2 is not None and len(m2["hc"]) <= 4 and set(m2["hu"]) == set(m2["hc"])
    assert len(m2["dc"]) == 31 and min(m2["dc"]) == "d20261206"  # a month, the rest dropped
    monitors = Monitors(
        MonitorStore(MonitorRepo(db, clock), QUICK), Told().hooks(), clock, history=history
    )
    made = await monitors.create("heartbeat", {"name": "Gone", "period_seconds": 60})
    await history.record(made.id, START, True, None)
    await monitors.delete(made.id)
    left = await db["monitor_checks"].distinct("_id")
    assert sorted(left) == ["m1", "m2"]


async def test_the_figures_cover_the_last_24_hours_and_30_days(
    db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    history = CheckHistory(db)
    now = START
    await history.record("m", now - timedelta(days=31), False, None)  # out of the month
    for _ in range(6):
        await history.record("m", now - timedelta(days=10), False, None)
    await history.record("m", now - timedelta(hours=24), False, None)  # a day ago: out
    for hours in range(23, -1, -1):  # one check an hour; the one 5 h ago failed
        await history.record("m", now - timedelta(hours=hours), hours != 5, 100 + hours)
    figures = await history.read(["m", "none"], now)
    got = figures["m"]
    assert got.day == Counts(24, 23)
    assert got.month == Counts(31, 23)
    assert got.recent[-1] == 100 and got.recent[-6] is None and len(got.recent) == 32
    assert uptime(got.day) == pytest.approx(23 / 24)
    assert figures["none"].day == Counts() and uptime(figures["none"].day) is None


def test_a_heartbeat_owes_one_ping_per_period_since_it_was_watched() -> None:
    since = START - timedelta(hours=5)
    assert expected_pings(3600, since, START - timedelta(hours=24), START) == 5
    assert expected_pings(3600, since - timedelta(days=3), START - timedelta(hours=24), START) == 24
    assert uptime(Counts(3, 3), expected=5) == pytest.approx(3 / 5)  # two never came
    assert uptime(Counts(7, 7), expected=5) == 1.0  # early pings: no more than all
