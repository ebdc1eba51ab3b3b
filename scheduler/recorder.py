"""Run records end to end: the engine's side of every cron and pulse run.

The agent's runner only does the work and says how it went (a typed ``Outcome``);
this module opens the record before the work starts, closes it with the outcome,
turns an exception into ``failed``/``internal_error``, records skipped pulses, and
counts failure streaks, handing a streak of two or more to ``on_failures``. So a run
is recorded the same way whoever asked for it: a timer, ``/pulse run``, the API or
the model's ``run_now``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from scheduler.jobs import CronJob
from scheduler.runs import FAILED, Outcome, Reason, RunKindName, RunStore, Trigger

log = logging.getLogger(__name__)
Doc = dict[str, Any]
Clock = Callable[[], datetime]


@dataclass(frozen=True)
class RunTicket:
    """What the runner is told about the run it is doing."""

    id: str
    kind: RunKindName
    job_id: str | None
    scheduled_for: datetime
    trigger: Trigger


@dataclass(frozen=True)
class Skip:
    """A pulse that will not run (no model call), and why."""

    reason: Reason
    detail: str


@dataclass(frozen=True)
class Go:
    """A pulse that will run: what it was given to look at, and the work itself."""

    work: Callable[[RunTicket], Awaitable[Outcome]]
    facts: Doc = field(default_factory=dict)


CronWork = Callable[[CronJob, RunTicket], Awaitable[Outcome]]
PulsePlanner = Callable[[datetime, Trigger], Awaitable[Skip | Go]]
FailureStreak = Callable[[Doc, int, CronJob | None], Awaitable[None]]
"""(the finished run, failures in a row, the job for a cron run)."""


class RunRecorder:
    def __init__(
        self,
        runs: RunStore,
        clock: Clock,
        *,
        cron: CronWork,
        pulse: PulsePlanner,
        on_failures: FailureStreak | None = None,
    ) -> None:
        self.runs = runs
        self._clock = clock
        self._cron = cron
        self._pulse = pulse
        self._on_failures = on_failures
        self._turns: dict[str, asyncio.Lock] = {}

    def _one_at_a_time(self, key: str) -> asyncio.Lock:
        """Runs sharing a conversation (one job, or the pulse) take turns: each run
        appends to the conversation, which allows one writer at a time, and a pulse
        must see the one before it counted against the daily cap."""
        return self._turns.setdefault(key, asyncio.Lock())

    async def cron(
        self, job: CronJob, scheduled_for: datetime, trigger: Trigger = "schedule"
    ) -> Doc:
        async with self._one_at_a_time(f"cron:{job.id}"):
            return await self._cron_run(job, scheduled_for, trigger)

    async def _cron_run(self, job: CronJob, scheduled_for: datetime, trigger: Trigger) -> Doc:
        run = await self.runs.start(
            "cron", job.id, scheduled_for, self._clock(), trigger=trigger, extra={"name": job.name}
        )
        ticket = RunTicket(str(run["_id"]), "cron", job.id, scheduled_for, trigger)
        outcome = await self._guard(self._cron(job, ticket), ticket)
        return await self._close(run, outcome, job)

    async def pulse(self, scheduled_for: datetime, trigger: Trigger = "schedule") -> Doc:
        """One pulse: recorded as skipped when the planner says so, else run."""
        async with self._one_at_a_time("pulse"):
            return await self._pulse_run(scheduled_for, trigger)

    async def _pulse_run(self, scheduled_for: datetime, trigger: Trigger) -> Doc:
        now = self._clock()
        plan = await self._pulse(now, trigger)
        if isinstance(plan, Skip):
            return await self.runs.skipped(
                "pulse", None, scheduled_for, now, plan.detail, trigger=trigger, why=plan.reason
            )
        run = await self.runs.start(
            "pulse", None, scheduled_for, now, trigger=trigger, extra={"context": plan.facts}
        )
        ticket = RunTicket(str(run["_id"]), "pulse", None, scheduled_for, trigger)
        outcome = await self._guard(plan.work(ticket), ticket)
        return await self._close(run, outcome, None)

    async def _guard(self, work: Awaitable[Outcome], ticket: RunTicket) -> Outcome:
        try:
            return await work
        except Exception as exc:
            log.exception("%s run %s raised", ticket.kind, ticket.id)
            return Outcome("failed", error=f"{type(exc).__name__}: {exc}", reason="internal_error")

    async def _close(self, run: Doc, outcome: Outcome, job: CronJob | None) -> Doc:
        done = await self.runs.finish(run, outcome, self._clock())
        if done.get("status") in FAILED and self._on_failures is not None:
            streak = await self.runs.failure_streak(done["kind"], done.get("job_id"))
            if streak >= 2:
                try:
                    await self._on_failures(done, streak, job)
                except Exception:
                    log.exception("could not report %d failed runs in a row", streak)
        return done
