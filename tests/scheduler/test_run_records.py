"""The engine's recorder owns run records end to end, whatever the runner does."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from bson import ObjectId
from pymongo.asynchronous.database import AsyncDatabase

from scheduler.cron.job import CronJob, JobReader
from scheduler.cron.service import CronService
from scheduler.fires.recorder import Go, RunRecorder, RunTicket, Skip
from storage.repos.cron_jobs import CronJobStore
from storage.repos.runs.record import Outcome, Run, Trigger
from storage.repos.runs.store import RunStore
from tests.fakes.clock import FakeClock

Doc = dict[str, Any]
START = datetime(2026, 3, 6, 9, 0, tzinfo=UTC)


class Runner:
    def __init__(self) -> None:
        self.cron_outcomes: list[Outcome | Exception] = []
        self.pulse_plan: Skip | Go | None = None
        self.streaks: list[tuple[str, int, str | None]] = []
        self.tickets: list[RunTicket] = []

    async def cron(self, job: CronJob, ticket: RunTicket) -> Outcome:
        self.tickets.append(ticket)
        result = self.cron_outcomes.pop(0)
        if isinstance(result, Exception):
            raise result
        return result

    async def pulse(self, now: datetime, trigger: Trigger) -> Skip | Go:
        assert self.pulse_plan is not None
        return self.pulse_plan

    async def failures(self, run: Run, streak: int, job: CronJob | None) -> None:
        self.streaks.append((run.status, streak, job.id if job else None))


async def _kit(db: AsyncDatabase[Doc]) -> tuple[RunRecorder, Runner, CronJob, FakeClock]:
    clock = FakeClock(START)
    runner = Runner()
    runs = RunStore(db)
    recorder = RunRecorder(
        runs, clock, cron=runner.cron, pulse=runner.pulse, on_failures=runner.failures
    )
    job = await CronService(CronJobStore(db, JobReader()), clock, "UTC").create(
        name="Backups", instruction="check", cron_expression="0 * * * *"
    )
    return recorder, runner, job, clock


async def test_a_runner_that_raises_is_recorded_as_failed_with_a_typed_reason(
    db: AsyncDatabase[Doc],
) -> None:
    recorder, runner, job, _ = await _kit(db)
    runner.cron_outcomes = [RuntimeError("boom"), Outcome("timeout", reason="timeout")]
    first = await recorder.cron(job, START)
    assert first.status == "failed" and first.reason == "internal_error"
    assert runner.streaks == []  # one failure is not a streak
    second = await recorder.cron(job, START, trigger="manual")
    assert second.status == "timeout" and second.reason == "timeout"
    assert second.trigger == "manual"
    assert runner.streaks == [("timeout", 2, job.id)]
    assert [t.id for t in runner.tickets] == [str(first.id), str(second.id)]
    stored = await db["runs"].find({"job_id": job.id}).to_list()
    assert [r["status"] for r in stored] == ["failed", "timeout"]


async def test_a_success_ends_the_streak(db: AsyncDatabase[Doc]) -> None:
    recorder, runner, job, _ = await _kit(db)
    runner.cron_outcomes = [
        Outcome("failed", reason="model_unavailable"),
        Outcome("success", result="fine"),
        Outcome("failed", reason="out_of_steps"),
    ]
    for _ in range(3):
        await recorder.cron(job, START)
    assert runner.streaks == []


async def test_a_skipped_pulse_is_recorded_without_running(db: AsyncDatabase[Doc]) -> None:
    recorder, runner, _, _ = await _kit(db)
    runner.pulse_plan = Skip("idle", "idle: nothing new")
    run = await recorder.pulse(START)
    assert run.status == "skipped" and run.reason == "idle"
    assert run.error == "idle: nothing new"


async def test_a_pulse_that_runs_is_opened_before_and_closed_after(
    db: AsyncDatabase[Doc],
) -> None:
    recorder, runner, _, clock = await _kit(db)
    seen: list[Doc | None] = []

    async def work(ticket: RunTicket) -> Outcome:
        seen.append(await db["runs"].find_one({"_id": ObjectId(ticket.id)}))
        clock.advance(seconds=2)
        return Outcome("success", result="all quiet")

    runner.pulse_plan = Go(work, facts={"notes": 3})
    run = await recorder.pulse(START, trigger="api")
    assert seen[0] is not None and seen[0]["status"] == "running"
    assert run.status == "success" and run.duration_ms == 2000.0
    assert run.context == {"notes": 3} and run.trigger == "api"
