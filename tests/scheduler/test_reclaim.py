"""Runs cut off with their process: reclaimed within a lease (or at once, by the owner of
the database), tried again in their window or reported, and never left ``running``.

Each ``Process`` is one engine with its own run leases on the shared database, as one
``watchkeeper`` process; a crash cancels its runs without any clean-up, so their records
stay ``running`` under a lease nobody renews. Time is a ``FakeClock``.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bson import ObjectId
from pymongo.asynchronous.database import AsyncDatabase

from agent.app.features.scheduling import SchedulingOptions, build_parts
from agent.owner import OwnerSettings
from channels.types import OutboundMessage, SendResult
from scheduler.cron.job import CronJob, JobReader
from scheduler.cron.service import CronService
from scheduler.engine import RETRY_TIMER, Engine, EngineConfig, Fire
from scheduler.fires.leases import LeaseTerms, RunLeases
from scheduler.fires.recorder import Go, RunRecorder, RunTicket
from scheduler.fires.recovery import UNLEASED_HOLD, orphaned
from scheduler.pulse.store import PulseStore
from storage.ejson import aware
from storage.repos.cron_jobs import CronJobStore
from storage.repos.leases import LeaseStore
from storage.repos.pulse import PulseRepo
from storage.repos.runs.record import Outcome, Run, Trigger
from storage.repos.runs.store import RunStore
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import FakeClock
from tests.fakes.scripted import Request, ScriptedModel
from tests.scheduling_kit import call_tool, parts_of, scheduled_app

Doc = dict[str, Any]
T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
WATCHDOG = 30.0


class Process:
    """One engine as one process: its runs wait for ``answer`` (a model slow to answer)
    while ``hang`` is set, else succeed at once; failures reported to the owner are kept."""

    def __init__(
        self, db: AsyncDatabase[Doc], clock: FakeClock, *, hang: bool, sole_owner: bool = False
    ) -> None:
        self.hang = hang
        self.calls: list[tuple[str | None, int]] = []
        self.reported: list[Run] = []
        self.started = asyncio.Event()
        self.answer = asyncio.Event()
        """Set: the model answers the hanging runs."""
        self.jobs = CronService(CronJobStore(db, JobReader()), clock, "UTC")
        self.pulse = PulseStore(PulseRepo(db), clock, OwnerSettings(db, clock, "UTC"))
        self.runs = RunStore(db)
        # Renewed by hand in these tests (``renew``), as its renewer would every 10 s.
        self.leases = RunLeases(self.runs, clock, terms=LeaseTerms(ttl=LEASE, renew_every=3600))
        recorder = RunRecorder(
            self.runs, clock, cron=self._cron, pulse=self._pulse, on_failures=self._report,
            leases=self.leases,
        )  # fmt: skip
        self.engine = Engine(
            jobs=self.jobs,
            pulse=self.pulse,
            runs=self.runs,
            leases=LeaseStore(db, owner=self.leases.owner),
            clock=clock,
            recorder=recorder,
            config=EngineConfig(grace=timedelta(minutes=10), sole_owner=sole_owner),
            timer=False,
        )

    async def _work(self, job_id: str | None, ticket: RunTicket) -> Outcome:
        self.calls.append((job_id, ticket.attempt))
        if self.hang:
            self.started.set()
            await self.answer.wait()
        return Outcome("success", result="Time to stretch!")

    async def _cron(self, job: CronJob, ticket: RunTicket) -> Outcome:
        return await self._work(job.id, ticket)

    async def _pulse(self, now: datetime, trigger: Trigger) -> Go:
        return Go(lambda ticket: self._work(None, ticket))

    async def _report(self, run: Run, streak: int, job: CronJob | None) -> None:
        self.reported.append(run)

    async def run_then_crash(self) -> list[Fire]:
        """Start what is due, and die while it runs: no record closed, no lease let go."""
        fires = await self.engine.run_due(wait=False)
        async with asyncio.timeout(WATCHDOG):
            await self.started.wait()
        for fire in fires:
            if fire.task is not None:
                fire.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await fire.task
        return fires


async def _only_run(db: AsyncDatabase[Doc], **query: Any) -> Doc:
    [run] = await db["runs"].find(query).to_list()
    return run


async def _no_pulse(p: Process) -> None:
    await p.pulse.update_config(enabled=False)


async def test_a_one_time_run_cut_off_runs_again_as_soon_as_its_lease_lapses(
    db: AsyncDatabase[Doc],
) -> None:
    clock = FakeClock(T0)
    first = Process(db, clock, hang=True)
    await _no_pulse(first)
    job = await first.jobs.create(name="Stretch", instruction="Remind me", in_minutes=1)
    await first.engine.start()
    clock.advance(minutes=1, seconds=1)
    await first.run_then_crash()
    cut = await _only_run(db, job_id=job.id)
    assert cut["status"] == "running" and cut["owner"] == first.leases.owner

    clock.advance(seconds=5)  # restarted at once, on another client of the same MongoDB
    second = Process(db, clock, hang=False)
    await second.engine.start()
    try:
        # The first process's lease has 25 s left: the run may still be alive there.
        assert (await _only_run(db, job_id=job.id))["status"] == "running"
        lapse = aware(cut["lease_until"])
        assert lapse is not None and second.engine.armed[RETRY_TIMER] == lapse
        clock.set(lapse)
        fires = await second.engine.run_due()
    finally:
        await second.engine.stop()
    assert [(f.action, f.job_id) for f in fires] == [("retry", job.id)]
    assert second.calls == [(job.id, 2)]
    run = await _only_run(db, job_id=job.id)
    assert (run["status"], run["attempts"], run["resumed"]) == ("success", 2, True)
    assert run["reclaimed_by"] == run["owner"] == second.leases.owner
    done = await second.jobs.get(job.id)
    assert done.done and done.last_status == "success"
    assert first.reported == second.reported == []


async def test_a_run_whose_process_renews_its_lease_is_left_to_it(
    db: AsyncDatabase[Doc],
) -> None:
    clock = FakeClock(T0)
    first = Process(db, clock, hang=True)
    await _no_pulse(first)
    job = await first.jobs.create(name="Report", instruction="Sum up", in_minutes=1)
    await first.engine.start()
    clock.advance(minutes=1, seconds=1)
    fires = await first.engine.run_due(wait=False)
    async with asyncio.timeout(WATCHDOG):
        await first.started.wait()
    clock.advance(seconds=25)
    await first.leases.renew()  # alive: its renewer moves the lease ahead
    clock.advance(seconds=20)  # past the first lease, inside the renewed one
    second = Process(db, clock, hang=False)
    await second.engine.start()
    try:
        assert await second.engine.run_due() == []
        held = await _only_run(db, job_id=job.id)
        assert held["status"] == "running" and held["owner"] == first.leases.owner
        first.answer.set()  # the first process's run ends, in that process
        await asyncio.gather(*(f.task for f in fires if f.task is not None))
        clock.advance(minutes=5)
        assert await second.engine.run_due() == []
    finally:
        await second.engine.stop()
        await first.engine.stop()
    run = await _only_run(db, job_id=job.id)
    assert (run["status"], run["attempts"], run["owner"]) == ("success", 1, first.leases.owner)
    assert "reclaimed_by" not in run
    assert first.calls == [(job.id, 1)] and second.calls == []


async def test_the_owner_of_the_database_reclaims_at_once_what_ran_before_it_started(
    db: AsyncDatabase[Doc],
) -> None:
    clock = FakeClock(T0)
    first = Process(db, clock, hang=True)
    await _no_pulse(first)
    job = await first.jobs.create(name="Stretch", instruction="Remind me", in_minutes=1)
    await first.engine.start()
    clock.advance(minutes=1, seconds=1)
    await first.run_then_crash()

    clock.advance(seconds=1)  # its lease has 29 s left, but its database died with it
    second = Process(db, clock, hang=False, sole_owner=True)
    await second.engine.start()
    try:
        fires = await second.engine.run_due()
        assert [(f.action, f.job_id) for f in fires] == [("retry", job.id)]
        # A command attached to this database later runs its own job: not reclaimed.
        attached = Process(db, clock, hang=True)
        other = await attached.jobs.create(name="Other", instruction="Look", in_minutes=1)
        clock.advance(minutes=1, seconds=1)
        await attached.run_then_crash()
        await second.engine.load()  # a resync, inside the attached process's lease
        assert (await _only_run(db, job_id=other.id))["status"] == "running"
    finally:
        await second.engine.stop()
    run = await _only_run(db, job_id=job.id)
    assert (run["status"], run["attempts"]) == ("success", 2)
    assert second.calls == [(job.id, 2)]


async def test_a_recurring_fire_cut_off_is_retried_in_its_window_else_reported(
    db: AsyncDatabase[Doc],
) -> None:
    clock = FakeClock(T0 - timedelta(minutes=1))
    first = Process(db, clock, hang=True)
    await _no_pulse(first)
    job = await first.jobs.create(name="Hourly", instruction="Check", cron_expression="0 * * * *")
    await first.engine.start()
    clock.set(T0 + timedelta(seconds=1))
    await first.run_then_crash()
    clock.advance(minutes=2)  # restarted inside the fire's grace window (10 min)
    second = Process(db, clock, hang=False)
    await second.engine.start()
    fires = await second.engine.run_due()
    assert [(f.action, f.scheduled_for) for f in fires] == [("retry", T0)]

    second.hang = True
    clock.set(T0 + timedelta(hours=1, seconds=1))
    await second.run_then_crash()  # the next fire is cut off too
    clock.advance(minutes=20)  # and the process is back after that fire's window
    third = Process(db, clock, hang=False)
    await third.engine.start()
    try:
        assert await third.engine.run_due() == []
    finally:
        await third.engine.stop()
    runs = await db["runs"].find({"job_id": job.id}, sort=[("scheduled_for", 1)]).to_list()
    assert [(r["status"], r["attempts"]) for r in runs] == [("success", 2), ("failed", 1)]
    lost = runs[1]
    assert (lost["reason"], lost["gave_up"]) == ("interrupted", True)
    assert "retry_at" not in lost
    assert [r.id for r in third.reported] == [lost["_id"]]  # the owner is told, once
    assert second.calls == [(job.id, 2), (job.id, 1)] and third.calls == []


async def test_a_one_time_run_interrupted_twice_is_given_up_and_told_once(
    db: AsyncDatabase[Doc],
) -> None:
    clock = FakeClock(T0)
    first = Process(db, clock, hang=True)
    await _no_pulse(first)
    job = await first.jobs.create(name="Stretch", instruction="Remind me", in_minutes=1)
    await first.engine.start()
    clock.advance(minutes=1, seconds=1)
    await first.run_then_crash()
    clock.advance(seconds=1)
    second = Process(db, clock, hang=True, sole_owner=True)
    await second.engine.start()
    await second.run_then_crash()
    clock.advance(seconds=1)
    third = Process(db, clock, hang=False, sole_owner=True)
    await third.engine.start()
    try:
        await third.engine.load()  # a resync: nothing is reported twice
        assert await third.engine.run_due() == []
    finally:
        await third.engine.stop()
    run = await _only_run(db, job_id=job.id)
    assert (run["status"], run["reason"], run["gave_up"]) == ("failed", "interrupted", True)
    assert [r.id for r in third.reported] == [run["_id"]]
    done = await third.jobs.get(job.id)
    assert done.done and done.last_status == "failed"
    assert third.calls == []


async def test_a_pulse_cut_off_is_tried_again_in_its_window(db: AsyncDatabase[Doc]) -> None:
    clock = FakeClock(T0)
    first = Process(db, clock, hang=True)
    await first.pulse.owner.update(quiet_hours=[])
    await first.pulse.update_config(enabled=True, pulses_per_day=48)
    due = (await first.pulse.get()).next_pulse_at
    assert due is not None
    await first.engine.start()
    clock.set(due + timedelta(seconds=1))
    await first.run_then_crash()
    clock.advance(minutes=1)
    second = Process(db, clock, hang=False)
    await second.engine.start()
    try:
        fires = await second.engine.run_due()
    finally:
        await second.engine.stop()
    assert [(f.kind, f.action, f.scheduled_for) for f in fires] == [("pulse", "retry", due)]
    run = await _only_run(db, kind="pulse")
    assert (run["status"], run["attempts"]) == ("success", 2)
    assert second.calls == [(None, 2)]


def test_which_running_records_are_orphaned() -> None:
    now = T0
    ids = {n: ObjectId() for n in range(1, 6)}
    docs: list[Doc] = [
        {"_id": 1, "owner": "me", "started_at": now - timedelta(hours=1), "lease_until": now},
        {"_id": 2, "owner": "dead", "started_at": now - timedelta(minutes=1), "lease_until": now},
        {"_id": 3, "owner": "live", "started_at": now, "lease_until": now + UNLEASED_HOLD},
        {"_id": 4, "started_at": now - UNLEASED_HOLD},  # from before leases, long begun
        {"_id": 5, "started_at": now - timedelta(minutes=1)},  # from before leases, recent
    ]
    records = [Run.from_doc({**d, "_id": ids[d["_id"]], "kind": "cron"}) for d in docs]
    number = {oid: n for n, oid in ids.items()}
    found = orphaned(records, now, held={ids[1]})  # 1: in flight in this process
    assert [number[r.id] for r in found.runs] == [2, 4]
    assert found.next_lapse == now + timedelta(minutes=4)
    # The sole owner of the database since a moment ago: whatever began before it died.
    found = orphaned(records, now, held={ids[1]}, sole_since=now - timedelta(seconds=1))
    assert [number[r.id] for r in found.runs] == [2, 4, 5]
    assert found.next_lapse == now + UNLEASED_HOLD


class SendsThenHangs(RecordingChannel):
    """Delivers, then never returns: the process dies before the send is recorded."""

    hang = True

    async def send(self, message: OutboundMessage) -> SendResult:
        result = await super().send(message)
        if self.hang:
            await asyncio.Event().wait()
        return result


async def test_an_answer_sent_before_the_crash_is_not_asked_for_or_sent_again(
    app_db: AppDb, tmp_path: Path
) -> None:
    clock = FakeClock(T0)

    def answer(request: Request) -> str:
        return "Time to stretch!" if "Task: Remind me" in request.messages[-1].text else ""

    model = ScriptedModel(answer)
    telegram = SendsThenHangs(name="telegram")
    async with scheduled_app(app_db, tmp_path, model, clock, channels=[telegram]) as app:
        ctx = owner_ctx(app.deps, channel="telegram", chat_id="777")
        created = await call_tool(
            app, "manage_cronjob", ctx, action="create", name="Stretch",
            instruction="Remind me to stretch", in_minutes=5,
        )  # fmt: skip
        job_id = created["created"]["job_id"]
        first = parts_of(app).engine
        clock.advance(minutes=5, seconds=1)
        fires = await first.run_due(wait=False)
        async with asyncio.timeout(WATCHDOG):
            await telegram.delivered.wait()
        for fire in fires:  # killed after the answer went out, before anything was recorded
            assert fire.task is not None
            fire.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await fire.task
        telegram.hang = False
        second, runner = build_parts(app, SchedulingOptions(timer=False))
        await second.engine.start(runner)
        try:
            clock.advance(LEASE)  # the first process's lease lapses
            assert [f.action for f in await second.engine.run_due()] == ["retry"]
        finally:
            await second.engine.stop()
        run = await app.deps.db["runs"].find_one({"job_id": job_id})
        job = (await call_tool(app, "manage_cronjob", action="list"))["jobs"][0]
    assert [m.text for m in telegram.sent] == ["Stretch\nTime to stretch!"]
    assert len(model.requests) == 1
    assert run is not None and (run["status"], run["attempts"]) == ("success", 2)
    assert run["result"] == "Stretch\nTime to stretch!"
    assert job["job_id"] == job_id and job["state"] == "done"
