"""``scheduler.monitors`` on its own: the settings rules, and the state machine over the
real collection with hooks that record what they were asked to do (the alert router's
side is tested in ``tests/agent/app/test_monitors.py``).

Two services on one database stand for ``watchkeeper chat`` beside ``watchkeeper run``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
from pymongo.asynchronous.database import AsyncDatabase

from scheduler.monitors.check import check_http, down_for_text
from scheduler.monitors.monitor import MAX_BODY, MonitorLimits, settle
from scheduler.monitors.service import Hooks, Monitors
from scheduler.monitors.store import MonitorStore
from storage.repos.monitor_record import Monitor, MonitorError, MonitorSettings
from storage.repos.monitors import MonitorRepo
from tests.fakes.clock import FakeClock
from tests.fakes.huge_answer import MIB, huge_answer
from tests.fakes.monitor_target import Target
from tests.waiting import until, until_async

START = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)
QUICK = MonitorLimits(min_interval_seconds=1, timeout_seconds=0.5, review_seconds=0.05)
CONCURRENT_CREATES = 400
Doc = dict[str, Any]


@dataclass
class Told:
    """What the hooks were asked to do, in order."""

    events: list[tuple[str, str, str]] = field(default_factory=list)

    def hooks(self) -> Hooks:
        async def down(monitor: Monitor, reason: str) -> str:
            self.events.append(("down", monitor.name, reason))
            return str(len(self.events))

        async def up(monitor: Monitor, down_for: timedelta) -> None:
            self.events.append(("up", monitor.name, down_for_text(down_for)))

        async def cleared(monitor: Monitor, why: str) -> None:
            self.events.append(("cleared", monitor.name, why))

        async def flapping(monitor: Monitor, how: str) -> str:
            self.events.append(("flapping", monitor.name, how))
            return str(len(self.events))

        return Hooks(down=down, up=up, cleared=cleared, flapping=flapping)

    def kinds(self) -> list[str]:
        return [kind for kind, _, _ in self.events]


pytestmark = pytest.mark.clock(START)


async def service(db: AsyncDatabase[Doc], clock: FakeClock, told: Told) -> Monitors:
    monitors = Monitors(MonitorStore(MonitorRepo(db, clock), QUICK), told.hooks(), clock)
    await monitors.start()
    return monitors


@pytest.fixture
async def target() -> AsyncIterator[Target]:
    started = await Target().start()
    yield started
    await started.stop()


def test_private_and_home_network_targets_are_allowed() -> None:
    for url in (
        "http://192.168.1.10:5000/",
        "http://10.0.0.2/health",
        "https://nas.local/",
        "http://[fd00::1]:8080/",
        "http://localhost:9000",
    ):
        assert settle("http", {"name": "n", "url": url}, None, MonitorLimits()).url == url


def test_defaults_and_refusals() -> None:
    limits = MonitorLimits()
    http = settle("http", {"name": " NAS ", "url": "http://nas"}, None, limits)
    assert http == MonitorSettings(
        name="NAS", severity="warning", url="http://nas", interval_seconds=60,
        expect_status=None, keyword=None, failures_before_alert=2,
    )  # fmt: skip
    grace = {p: settle("heartbeat", {"name": "n", "period_seconds": p}, None, limits)
             for p in (60, 3600, 86_400)}  # fmt: skip
    assert [g.grace_seconds for g in grace.values()] == [60, 360, 3600]
    with pytest.raises(MonitorError, match="between 30 and 86400"):
        settle("http", {"name": "n", "url": "http://a", "interval_seconds": 29}, None, limits)
    with pytest.raises(MonitorError, match="whole number"):
        settle("http", {"name": "n", "url": "http://a", "interval_seconds": True}, None, limits)
    with pytest.raises(MonitorError, match="at most 80"):
        settle("heartbeat", {"name": "n" * 81, "period_seconds": 60}, None, limits)
    assert settle("http", {"expect_status": 0}, http, limits).expect_status is None
    assert settle("http", {"keyword": ""}, replace(http, keyword="ok"), limits).keyword is None


def test_how_long_it_was_down_reads_well() -> None:
    spans = (timedelta(seconds=45), timedelta(minutes=3, seconds=59), timedelta(hours=2),
             timedelta(hours=2, minutes=5), timedelta(days=1, hours=3))  # fmt: skip
    assert [down_for_text(s) for s in spans] == ["45 s", "3 min", "2 h", "2 h 5 min", "1 d 3 h"]


async def test_a_ping_through_another_process_moves_the_deadline(
    db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    """The process that got no ping reads the stored one before calling it late."""
    told_a, told_b = Told(), Told()
    a = await service(db, clock, told_a)
    made = await a.create("heartbeat", {"name": "Job", "period_seconds": 60, "grace_seconds": 0})
    b = await service(db, clock, told_b)
    try:
        clock.advance(seconds=50)
        assert made.token is not None and await a.ping(made.token)
        clock.advance(seconds=20)  # late by b's memory, in time by the database
        pinged = START + timedelta(seconds=50)
        await until(lambda: b.all()[0].last_ping_at == pinged, "b read the stored ping")
        assert told_a.events == told_b.events == []
        assert b.all()[0].state == "up"
        clock.advance(seconds=41)
        await until(lambda: told_b.kinds() == ["down"] or told_a.kinds() == ["down"])
        assert (await b.repo.reload(made.id)) is not None
        await until_async(_state(b, made.id, "down"))
    finally:
        await a.stop()
        await b.stop()


def _state(monitors: Monitors, monitor_id: str, wanted: str) -> Any:
    async def check() -> bool:
        stored = await monitors.repo.reload(monitor_id)
        return stored is not None and stored.state == wanted

    return check


async def test_pause_clears_a_down_monitor_and_resume_counts_afresh(
    db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    told = Told()
    monitors = await service(db, clock, told)
    try:
        made = await monitors.create("heartbeat", {"name": "Job", "period_seconds": 60})
        assert made.token is not None
        assert await monitors.ping(made.token, fail=True)
        assert told.kinds() == ["down"]
        paused = await monitors.pause("job")
        assert paused.paused and paused.state == "new" and paused.alert_code is None
        assert told.events[-1] == ("cleared", "Job", "paused")
        assert await monitors.ping(made.token, fail=True)  # recorded, no alert while paused
        assert told.kinds() == ["down", "cleared"]
        clock.advance(hours=5)
        resumed = await monitors.resume(made.id)
        assert resumed.deadline() == clock() + timedelta(seconds=120)
        assert await monitors.ping("not-a-token") is False
    finally:
        await monitors.stop()


async def test_a_new_url_starts_the_count_again(
    db: AsyncDatabase[Doc], clock: FakeClock, target: Target
) -> None:
    told = Told()
    monitors = await service(db, clock, told)
    try:
        made = await monitors.create(
            "http",
            {"name": "Web", "url": "http://127.0.0.1:9/", "interval_seconds": 1,
             "failures_before_alert": 3},
        )  # fmt: skip
        await until_async(_failures(monitors, made.id, 1))
        moved = await monitors.update(made.id, {"url": target.url})
        assert moved.failures == 0 and moved.revision == 2
        await until_async(_state(monitors, made.id, "up"))
        assert told.events == []
        with pytest.raises(MonitorError, match="no monitor with id"):
            await monitors.update("missing", {"name": "x"})
    finally:
        await monitors.stop()


def _failures(monitors: Monitors, monitor_id: str, wanted: int) -> Any:
    async def check() -> bool:
        stored = await monitors.repo.reload(monitor_id)
        return stored is not None and stored.failures >= wanted

    return check


async def test_a_process_beside_the_runner_edits_monitors_but_does_not_check_them(
    db: AsyncDatabase[Doc], clock: FakeClock, target: Target
) -> None:
    """``watchkeeper chat`` beside ``watchkeeper run``: one process counts failures."""
    told = Told()
    runner = await service(db, clock, told)
    beside = Monitors(
        MonitorStore(MonitorRepo(db, clock), QUICK), Told().hooks(), clock, watching=False
    )
    try:
        await runner.create("http", {"name": "NAS", "url": target.url, "interval_seconds": 1})
        assert await beside.start() == 0  # it knows the monitor, it runs no check
        assert [m.name for m in beside.all()] == ["NAS"]
        made = await beside.create(
            "heartbeat", {"name": "Backup", "period_seconds": 60, "grace_seconds": 0}
        )
        assert made.token is not None and await beside.ping(made.token)
        await until_async(_state(beside, made.id, "up"))
    finally:
        await beside.stop()
        await runner.stop()


async def test_a_readable_token_an_older_version_stored_is_dropped_and_still_pings(
    db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    """Before issue 36 a heartbeat's token was stored readable beside its hash: the
    start removes it, and the job's ping URL keeps working through the hash."""
    told = Told()
    first = await service(db, clock, told)
    made = await first.create("heartbeat", {"name": "Old", "period_seconds": 60})
    await first.stop()
    assert made.token is not None
    await db["monitors"].update_one({"_id": made.id}, {"$set": {"token": made.token}})
    again = await service(db, clock, told)
    try:
        doc = await db["monitors"].find_one({"_id": made.id})
        assert doc is not None and "token" not in doc and doc["token_key"]
        assert again.all()[0].token is None
        assert await again.ping(made.token)
        await until_async(_state(again, made.id, "up"))
    finally:
        await again.stop()


async def test_the_cap_holds_when_many_creates_run_at_once(
    db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    """Issue 36, point 10: 2,000 creates at once stored 55 monitors against a cap of 50
    (each counted, then inserted). Two processes share the database here, as
    ``watchkeeper chat`` beside ``watchkeeper run`` do."""
    limits = MonitorLimits()  # the real cap: 50
    a, b = (
        Monitors(
            MonitorStore(MonitorRepo(db, clock), limits), Told().hooks(), clock, watching=False
        )
        for _ in range(2)
    )
    await a.start()
    await b.start()
    try:
        made = await asyncio.gather(
            *(
                (a if n % 2 else b).create("heartbeat", {"name": f"job {n}", "period_seconds": 60})
                for n in range(CONCURRENT_CREATES)
            ),
            return_exceptions=True,
        )
        kept = [m for m in made if isinstance(m, Monitor)]
        refused = {str(m) for m in made if not isinstance(m, Monitor)}
        assert await db["monitors"].count_documents({}) == len(kept) == 50
        assert refused == {"there are already 50 monitors, the most allowed; delete one first"}
        await a.delete(kept[0].id)
        again = await b.create("http", {"name": "one more", "url": "http://nas.local/"})
        assert again.name == "one more"
        with pytest.raises(MonitorError, match="already 50 monitors"):
            await a.create("http", {"name": "too many", "url": "http://nas.local/"})
    finally:
        await a.stop()
        await b.stop()


async def test_monitors_from_before_the_slots_get_one_and_count(
    db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    limits = MonitorLimits(max_monitors=3)
    first = Monitors(
        MonitorStore(MonitorRepo(db, clock), limits), Told().hooks(), clock, watching=False
    )
    await first.start()
    for n in range(3):
        await first.create("heartbeat", {"name": f"old {n}", "period_seconds": 60})
    await first.stop()
    await db["monitors"].update_many({}, {"$unset": {"slot": ""}})  # as an older version left
    again = Monitors(
        MonitorStore(MonitorRepo(db, clock), limits), Told().hooks(), clock, watching=False
    )
    await again.start()
    try:
        slots = [d["slot"] async for d in db["monitors"].find({}).sort("created_at", 1)]
        assert sorted(slots) == [0, 1, 2]
        with pytest.raises(MonitorError, match="already 3 monitors"):
            await again.create("heartbeat", {"name": "new", "period_seconds": 60})
    finally:
        await again.stop()


async def test_a_target_answering_without_end_is_read_only_up_to_the_cap() -> None:
    """A monitored site that answers an endless body costs ``MAX_BODY`` bytes at most:
    no keyword, nothing is read; a keyword is looked for in the first MiB only."""
    made = START
    web = Monitor("m1", "Web", "http", "warning", False, 1, made, url="")
    async with huge_answer(1024 * MIB) as site, aiohttp.ClientSession() as http:
        plain = await check_http(http, replace(web, url=site.url), 5.0)
        assert plain.ok
        await site.done.wait()
        site.done.clear()
        seen = site.sent
        wanted = replace(web, url=site.url, keyword="Welcome")
        missing = await check_http(http, wanted, 5.0)
        assert not missing.ok and "without the keyword 'Welcome'" in missing.reason
        await site.done.wait()
    assert seen < 16 * MIB and site.sent - seen < MAX_BODY + 16 * MIB
    async with huge_answer(1024 * MIB, head=b"Welcome") as site, aiohttp.ClientSession() as http:
        assert (await check_http(http, replace(web, url=site.url, keyword="Welcome"), 5.0)).ok
        await site.done.wait()
    assert site.sent < 16 * MIB


async def test_twenty_fail_and_ping_cycles_make_a_few_messages_not_forty(
    db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    """Issue 36, point 10: 20 fail/ping cycles in 12 s sent 40 messages. The first
    change is told at once; the rest waits for the 5 min between messages, by which
    time the monitor is flapping (one alert); 15 min steady, it is up again (one more)."""
    told = Told()
    monitors = await service(db, clock, told)
    try:
        made = await monitors.create("heartbeat", {"name": "Job", "period_seconds": 3600})
        assert made.token is not None
        for _ in range(20):
            assert await monitors.ping(made.token, fail=True)
            clock.advance(seconds=0.3)
            assert await monitors.ping(made.token)
            clock.advance(seconds=0.3)
        assert told.kinds() == ["down"]  # each ping told what it had to say before answering
        clock.advance(minutes=5)
        await until(lambda: told.kinds()[-1] == "flapping", "one flapping alert")
        assert told.events[1:] == [
            ("cleared", "Job", "flapping"),
            ("flapping", "Job", "changed state 40 times in 11 s"),
        ]
        clock.advance(minutes=15)  # steady since its last ping
        await until(lambda: told.kinds()[-1] == "up", "steady again")
        assert told.events[-1] == ("up", "Job", "20 min")
        sent = [kind for kind in told.kinds() if kind != "cleared"]  # cleared says nothing
        assert sent == ["down", "flapping", "up"]

        async def stored_as_told() -> bool:  # told first, then stored that it was
            doc = await db["monitors"].find_one({"_id": made.id})
            return doc is not None and doc["told"] == "up" and doc["alert_code"] is None

        await until_async(stored_as_told, "the monitor stored as told up")
    finally:
        await monitors.stop()


async def test_a_monitor_down_before_the_damping_is_told_up_with_its_downtime(
    db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    """A store from before ``told``: a down monitor with its alert open was told down."""
    told = Told()
    first = await service(db, clock, told)
    made = await first.create("heartbeat", {"name": "Old", "period_seconds": 60})
    await first.stop()
    assert made.token is not None
    old_down = {"state": "down", "down_since": START, "alert_code": "7"}
    await db["monitors"].update_one(
        {"_id": made.id}, {"$set": old_down, "$unset": {"told": "", "told_since": ""}}
    )
    clock.advance(minutes=42)
    again = await service(db, clock, told)
    try:
        doc = await db["monitors"].find_one({"_id": made.id})
        assert doc is not None and (doc["told"], doc["told_since"]) == ("down", START)
        assert await again.ping(made.token)
        assert told.events == [("up", "Old", "42 min")]
    finally:
        await again.stop()
