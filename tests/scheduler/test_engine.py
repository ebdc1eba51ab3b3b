"""The engine on a real database with stub runners: leases, missed fires, DST, timers."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from agent.owner import OwnerSettings
from scheduler.cron.job import CronJob, JobReader
from scheduler.cron.service import CronService
from scheduler.engine import Engine, EngineConfig
from scheduler.fires.claims import cron_key, pulse_key
from scheduler.fires.recorder import Go, RunRecorder, RunTicket
from scheduler.pulse.store import PulseStore
from storage.repos.cron_jobs import CronJobStore
from storage.repos.leases import LeaseStore
from storage.repos.pulse import PulseRepo
from storage.repos.runs.record import Outcome, Trigger
from storage.repos.runs.store import RunStore
from tests.fakes.clock import BERLIN, FakeClock
from tests.waiting import until

Doc = dict[str, Any]


class Harness:
    """One engine (one "process") with runners that only record what they were asked."""

    def __init__(
        self,
        db: AsyncDatabase[Doc],
        clock: Any,
        name: str = "a",
        timer: bool = False,
        hold: asyncio.Event | None = None,
    ) -> None:
        self.clock = clock
        self.hold = hold
        """When given, a cron run stays in progress until it is set."""
        self.jobs = CronService(CronJobStore(db, JobReader()), clock, "Europe/Berlin")
        self.pulse = PulseStore(PulseRepo(db), clock, OwnerSettings(db, clock, BERLIN.key))
        self.runs = RunStore(db)
        self.cron_calls: list[tuple[str, datetime]] = []
        self.pulse_calls: list[datetime] = []
        self.engine = Engine(
            jobs=self.jobs,
            pulse=self.pulse,
            runs=self.runs,
            leases=LeaseStore(db, owner=name),
            clock=clock,
            recorder=RunRecorder(self.runs, clock, cron=self._cron, pulse=self._pulse),
            config=EngineConfig(grace=timedelta(minutes=10)),
            timer=timer,
        )

    async def _cron(self, job: CronJob, ticket: RunTicket) -> Outcome:
        self.cron_calls.append((job.id, ticket.scheduled_for))
        if self.hold is not None:
            await self.hold.wait()
        return Outcome("success", result="ok")

    async def _pulse(self, now: datetime, trigger: Trigger) -> Go:
        async def work(ticket: RunTicket) -> Outcome:
            self.pulse_calls.append(ticket.scheduled_for)
            return Outcome("success", result="checked")

        return Go(work)

    async def job(self, expression: str, tz: str = "Europe/Berlin") -> CronJob:
        return await self.jobs.create(
            name="job", instruction="do it", cron_expression=expression, timezone=tz
        )


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


async def _pulse_off(h: Harness) -> None:
    await h.pulse.update_config(enabled=False)


async def test_two_engines_on_one_database_run_a_fire_once(db: AsyncDatabase[Doc]) -> None:
    clock = FakeClock(utc(2026, 3, 2, 7, 59))  # Monday 08:59 Berlin
    release = asyncio.Event()
    first, second = Harness(db, clock, "a", hold=release), Harness(db, clock, "b", hold=release)
    await _pulse_off(first)
    job = await first.job("0 9 * * *")
    await first.engine.start()
    await second.engine.start()
    clock.set(utc(2026, 3, 2, 8, 0, 3))
    due = [asyncio.create_task(h.engine.run_due()) for h in (first, second)]

    # Both try the fire while one of them is still running it: held there until the
    # other has given up (or, were the lease broken, has started it too).
    def started() -> int:
        return len(first.cron_calls + second.cron_calls)

    await until(lambda: started() == 2 or (started() == 1 and any(t.done() for t in due)))
    release.set()
    await asyncio.gather(*due)
    await asyncio.gather(first.engine.run_due(), second.engine.run_due())
    calls = first.cron_calls + second.cron_calls
    assert calls == [(job.id, utc(2026, 3, 2, 8, 0))]
    assert await db["runs"].count_documents({"job_id": job.id}) == 1
    lease = await db["leases"].find_one({"key": cron_key(job.id, utc(2026, 3, 2, 8))})
    assert lease is not None and lease["key"] == f"cron:{job.id}:2026-03-02T08:00:00.000000Z"
    assert (await first.jobs.get(job.id)).next_fire_at == utc(2026, 3, 3, 8, 0)


async def test_missed_fire_inside_the_grace_window_runs_once(db: AsyncDatabase[Doc]) -> None:
    clock = FakeClock(utc(2026, 3, 2, 7, 30))
    h = Harness(db, clock)
    await _pulse_off(h)
    job = await h.job("0 9 * * *")
    clock.set(utc(2026, 3, 2, 8, 7))  # the process was down at 09:00 Berlin, back at 09:07
    await h.engine.start()
    fires = await h.engine.run_due()
    assert [(f.action, f.scheduled_for) for f in fires] == [("run", utc(2026, 3, 2, 8))]
    assert h.cron_calls == [(job.id, utc(2026, 3, 2, 8))]
    assert await h.engine.run_due() == []  # once
    assert await db["runs"].count_documents({"status": "skipped"}) == 0


async def test_missed_fires_outside_the_grace_window_are_skipped(db: AsyncDatabase[Doc]) -> None:
    clock = FakeClock(utc(2026, 3, 2, 8, 30))
    h = Harness(db, clock)
    await _pulse_off(h)
    job = await h.job("0 * * * *")  # hourly
    clock.set(utc(2026, 3, 2, 13, 30))  # down from 09:30 to 14:30 Berlin
    fires = await h.engine.run_due()
    assert h.cron_calls == []
    skipped = await db["runs"].find({"job_id": job.id}, sort=[("scheduled_for", 1)]).to_list()
    assert [r["scheduled_for"] for r in skipped] == [utc(2026, 3, 2, h_, 0) for h_ in range(9, 14)]
    assert all(r["status"] == "skipped" and "missed by" in r["error"] for r in skipped)
    assert "missed by 30 min (grace 10 min)" in skipped[-1]["error"]
    assert len(fires) == 5
    assert (await h.jobs.get(job.id)).next_fire_at == utc(2026, 3, 2, 14, 0)


async def test_backlog_runs_only_the_latest_fire(db: AsyncDatabase[Doc]) -> None:
    clock = FakeClock(utc(2026, 3, 2, 8, 0, 30))
    h = Harness(db, clock)
    await _pulse_off(h)
    job = await h.job("*/5 * * * *")
    clock.set(utc(2026, 3, 2, 8, 21, 10))  # fires 08:05 .. 08:20 missed
    await h.engine.run_due()
    assert h.cron_calls == [(job.id, utc(2026, 3, 2, 8, 20))]
    runs = await db["runs"].find({"status": "skipped"}, sort=[("scheduled_for", 1)]).to_list()
    reasons = {r["scheduled_for"].minute: r["error"] for r in runs}
    assert set(reasons) == {5, 10, 15}
    assert reasons[5].startswith("missed by 16 min")
    assert reasons[15].startswith("superseded")


async def test_a_long_backlog_is_summarised(db: AsyncDatabase[Doc]) -> None:
    clock = FakeClock(utc(2026, 3, 2, 8, 0, 30))
    h = Harness(db, clock)
    await _pulse_off(h)
    await h.job("* * * * *")
    clock.advance(days=2)
    await h.engine.run_due()
    missed = await db["runs"].count_documents({"error": {"$regex": "^missed by"}})
    superseded = await db["runs"].count_documents({"error": {"$regex": "^superseded"}})
    assert missed == EngineConfig().skip_records and superseded == 9  # 10 inside the window
    assert len(h.cron_calls) == 1
    assert await db["runs"].count_documents({"error": {"$regex": "not recorded one by one"}}) == 1


async def test_cron_across_the_berlin_dst_change(db: AsyncDatabase[Doc]) -> None:
    clock = FakeClock(utc(2026, 3, 28, 12))
    h = Harness(db, clock)
    await _pulse_off(h)
    job = await h.job("30 2 * * *")  # 02:30 does not exist on 29 March 2026 in Berlin
    assert job.next_fire_at == utc(2026, 3, 29, 1, 0)  # 03:00 CEST, the end of the gap
    clock.set(utc(2026, 3, 29, 1, 0, 5))
    await h.engine.run_due()
    assert h.cron_calls == [(job.id, utc(2026, 3, 29, 1, 0))]
    assert (await h.jobs.get(job.id)).next_fire_at == utc(2026, 3, 30, 0, 30)  # 02:30 CEST


async def test_pulse_grid_on_the_berlin_dst_day(db: AsyncDatabase[Doc]) -> None:
    clock = FakeClock(utc(2026, 3, 28, 22, 30))  # Saturday 23:30 CET
    h = Harness(db, clock)
    await h.pulse.owner.update(quiet_hours=[])
    await h.pulse.update_config(enabled=True, pulses_per_day=12)
    for _ in range(23 * 12):  # to Sunday 23:30 CEST
        clock.advance(minutes=5)
        await h.engine.run_due()
    local = [t.astimezone(BERLIN).strftime("%H:%M") for t in h.pulse_calls]
    # Sunday 29 March: 02:00 does not exist, so that slot moves to the gap end, 03:00.
    assert local == ["00:00", "03:00", *[f"{n:02d}:00" for n in range(4, 24, 2)]]
    instants = [t.astimezone(UTC) for t in h.pulse_calls]
    steps = [b - a for a, b in itertools.pairwise(instants)]
    assert steps[:2] == [timedelta(hours=2), timedelta(hours=1)]
    assert set(steps[2:]) == {timedelta(hours=2)}


async def test_changes_rearm_the_timer_at_once(db: AsyncDatabase[Doc]) -> None:
    clock = FakeClock(utc(2026, 3, 2, 7, 0))
    h = Harness(db, clock, timer=True)
    await _pulse_off(h)
    await h.engine.start()
    try:
        job = await h.job("0 9 * * *")
        assert h.engine.armed[f"cron:{job.id}"] == utc(2026, 3, 2, 8, 0)
        await h.jobs.update(job.id, cron_expression="30 8 * * *")
        assert h.engine.armed[f"cron:{job.id}"] == utc(2026, 3, 2, 7, 30)
        await h.jobs.toggle(job.id)
        assert f"cron:{job.id}" not in h.engine.armed
        await h.jobs.toggle(job.id)
        assert f"cron:{job.id}" in h.engine.armed
        await h.jobs.delete(job.id)
        assert f"cron:{job.id}" not in h.engine.armed
        await h.pulse.owner.update(quiet_hours=[])
        await h.pulse.update_config(enabled=True, pulses_per_day=24)
        assert h.engine.armed["pulse"] == utc(2026, 3, 2, 7, 0) + timedelta(hours=1)
    finally:
        await h.engine.stop()


async def test_one_timer_is_armed_for_the_earliest_due_moment(db: AsyncDatabase[Doc]) -> None:
    clock = FakeClock(utc(2026, 3, 2, 7, 0))
    first, second = Harness(db, clock, "a"), Harness(db, clock, "b")
    await _pulse_off(first)
    late = await first.job("0 9 * * *")  # 08:00 UTC
    early = await first.job("30 8 * * *")  # 07:30 UTC
    await first.engine.start()
    await second.engine.start()
    try:
        assert first.engine.next_wake == utc(2026, 3, 2, 7, 30)
        # The other engine runs the early fire; this one, woken for it, finds it taken,
        # reads where the job stands and is armed for the next moment, not a past one.
        clock.set(utc(2026, 3, 2, 7, 30, 1))
        await second.engine.run_due()
        assert second.cron_calls == [(early.id, utc(2026, 3, 2, 7, 30))]
        await first.engine.run_due()
        assert first.cron_calls == []
        assert first.engine.armed[f"cron:{early.id}"] == utc(2026, 3, 3, 7, 30)
        assert first.engine.next_wake == utc(2026, 3, 2, 8, 0)
        await first.jobs.delete(late.id)
        assert first.engine.next_wake == utc(2026, 3, 3, 7, 30)
    finally:
        await first.engine.stop()
        await second.engine.stop()


async def test_the_real_timer_wakes_the_engine(db: AsyncDatabase[Doc]) -> None:
    """Production path: APScheduler fires at the next minute, the engine runs the job."""
    real = datetime.now(UTC)
    boundary = real.replace(second=59, microsecond=700_000)
    offset = boundary - real

    def clock() -> datetime:
        return datetime.now(UTC) + offset

    h = Harness(db, clock, timer=True)
    await _pulse_off(h)
    await h.engine.start()
    try:
        job = await h.job("* * * * *", tz="UTC")
        await until(lambda: h.cron_calls, "the timer fired the job")
        await h.engine.join()
        assert len(h.cron_calls) == 1 and h.cron_calls[0][0] == job.id
        assert h.engine.armed[f"cron:{job.id}"] == h.cron_calls[0][1] + timedelta(minutes=1)
    finally:
        await h.engine.stop()


async def test_pulse_leases(db: AsyncDatabase[Doc]) -> None:
    clock = FakeClock(utc(2026, 3, 2, 10))
    leases = LeaseStore(db, "a")
    assert await leases.acquire(pulse_key(clock()), clock())
    assert not await LeaseStore(db, "b").acquire(pulse_key(clock()), clock())
    assert pulse_key(clock(), "manual").startswith("pulse:manual:")
    assert await leases.prune(clock() + timedelta(days=8)) == 1
