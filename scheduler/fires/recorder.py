"""Run records end to end: the engine's side of every cron and pulse run.

The agent's runner only does the work and says how it went (a typed ``Outcome``);
this module opens the record before the work starts, closes it with the outcome,
turns an exception into ``failed`` (``internal_error``, or ``database_unavailable``
when the database could not be reached), records skipped pulses, and counts failure
streaks, handing failures to ``on_failures`` as the job's ``on_failure`` policy says
(by default a streak of two or more), and fires missed past their grace window to
``on_missed``. So a run is recorded the same way whoever
asked for it: a timer, ``/pulse run``, the API or the model's ``run_now``.

A scheduled fire is never lost silently. The engine gives it ``retry_until`` (its
grace window): a try that fails for a passing reason (``PASSING``) is tried again
after a wait from ``RETRY_BACKOFF``, by the engine, while the window lasts; the runner is told on
each try whether a failure will be retried (``RunTicket.will_retry``). A fire whose
tries run out is marked ``gave_up`` and reported to ``on_failures`` at once, streak
or not. A fire whose record cannot even be opened raises ``NotStarted``, and the
engine tries it again; one that never could run is recorded by ``lost``.

Each try holds a lease on its record while it runs (``scheduler.fires.leases``), so a
try cut off with its process is found and finished by another (``scheduler.fires.recovery``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Protocol

from runtime.backoff import Backoff
from runtime.clock import Clock
from scheduler.cron.job import CronJob
from scheduler.fires.leases import RunLeases
from storage.repos.runs.record import FAILED, PASSING, Outcome, Reason, Run, RunKind, Trigger
from storage.repos.runs.store import RunStore
from storage.retry import unreachable

log = logging.getLogger(__name__)
RETRY_BACKOFF = Backoff(first=30.0, cap=240.0, retries=4)
"""From a failed try to the next: 30, 60, 120, 240 s; each must also start inside the
fire's grace window."""


class NotStarted(Exception):
    """The fire's run record could not be opened: the database could not be reached."""


@dataclass(frozen=True)
class RunTicket:
    """What the runner is told about the run it is doing."""

    id: str
    kind: RunKind
    job_id: str | None
    scheduled_for: datetime
    trigger: Trigger
    attempt: int = 1
    will_retry: bool = False
    """A failure for a passing reason (model or database unreachable) will be tried
    again within the fire's grace window, so it is not the last word on this fire."""


@dataclass(frozen=True)
class Skip:
    """A pulse that will not run (no model call), and why."""

    reason: Reason
    detail: str


@dataclass(frozen=True)
class Go:
    """A pulse that will run: what it was given to look at, and the work itself."""

    work: Callable[[RunTicket], Awaitable[Outcome]]
    facts: Mapping[str, int] = field(default_factory=dict)


CronWork = Callable[[CronJob, RunTicket], Awaitable[Outcome]]
PulsePlanner = Callable[[datetime, Trigger], Awaitable[Skip | Go]]
FailureStreak = Callable[[Run, int, CronJob | None], Awaitable[None]]
"""(the finished run, failures in a row, the job for a cron run)."""
MissedFires = Callable[[Sequence[Run], Mapping[str, CronJob]], Awaitable[None]]
"""(the records of fires missed past their grace window, their jobs by id)."""
Work = Callable[[RunTicket], Awaitable[Outcome]]


class RunWork(Protocol):
    """The work of the runs, done by the agent's runner (``agent.runs.runner.Runner``):
    handed to ``RunRecorder.start`` as the engine starts, as a channel gets its sink,
    because the agent's tools start runs through the engine."""

    async def run_cron(self, job: CronJob, ticket: RunTicket) -> Outcome: ...

    async def plan_pulse(self, now: datetime, trigger: Trigger) -> Skip | Go: ...

    async def warn_failures(self, run: Run, streak: int, job: CronJob | None) -> None: ...

    async def warn_missed(self, runs: Sequence[Run], jobs: Mapping[str, CronJob]) -> None: ...


@dataclass(frozen=True)
class Calls:
    """``RunWork`` from plain callables (tests and benchmarks: work without an agent)."""

    cron: CronWork
    pulse: PulsePlanner
    on_failures: FailureStreak | None = None
    on_missed: MissedFires | None = None

    async def run_cron(self, job: CronJob, ticket: RunTicket) -> Outcome:
        return await self.cron(job, ticket)

    async def plan_pulse(self, now: datetime, trigger: Trigger) -> Skip | Go:
        return await self.pulse(now, trigger)

    async def warn_failures(self, run: Run, streak: int, job: CronJob | None) -> None:
        if self.on_failures is not None:
            await self.on_failures(run, streak, job)

    async def warn_missed(self, runs: Sequence[Run], jobs: Mapping[str, CronJob]) -> None:
        if self.on_missed is not None:
            await self.on_missed(runs, jobs)


class RunRecorder:
    def __init__(
        self,
        runs: RunStore,
        clock: Clock,
        *,
        cron: CronWork | None = None,
        pulse: PulsePlanner | None = None,
        on_failures: FailureStreak | None = None,
        backoff: Backoff = RETRY_BACKOFF,
        leases: RunLeases | None = None,
        on_missed: MissedFires | None = None,
    ) -> None:
        """The work comes with ``start`` (the app's runner), or as plain callables here
        (``cron`` and ``pulse``; tests and benchmarks)."""
        self.runs = runs
        self.leases = leases or RunLeases(runs, clock)
        """This process's hold on the runs it has in flight."""
        self._clock = clock
        self._work: RunWork | None = None
        if cron is not None and pulse is not None:
            self._work = Calls(cron, pulse, on_failures, on_missed)
        self._backoff = backoff
        self._turns: dict[str, asyncio.Lock] = {}
        """Runs sharing a conversation (one job, or the pulse) take turns: each run
        appends to the conversation, which allows one writer at a time, and a pulse
        must see the one before it counted against the daily cap."""
        self._unsaved: list[_Closing] = []

    def start(self, work: RunWork) -> None:
        """Do the runs with ``work`` from now on (``Engine.start``: the runner, which
        exists only once the agent does)."""
        self._work = work

    @property
    def work(self) -> RunWork:
        if self._work is None:
            raise RuntimeError("the recorder has no work: start the engine with its runner")
        return self._work

    def retry_at(self, attempt: int, until: datetime | None, now: datetime) -> datetime | None:
        """When the try after ``attempt`` may start, or None when there is none."""
        if until is None or not self._backoff.allows(attempt):
            return None
        at = now + timedelta(seconds=self._backoff.delay(attempt))
        return at if at <= until else None

    # --- a fire ----------------------------------------------------------------------

    async def cron(
        self,
        job: CronJob,
        scheduled_for: datetime,
        trigger: Trigger = "schedule",
        *,
        retry_until: datetime | None = None,
        then: Callable[[Run], Awaitable[None]] | None = None,
    ) -> Run:
        """One fire of ``job``: its record opened (``NotStarted`` if it cannot be), the
        runner's try, the record closed; ``then`` is given the closed record (a
        one-time job is settled by it)."""
        async with self._turns.setdefault(f"cron:{job.id}", asyncio.Lock()):
            now = self._clock()
            run = Run.first_try(
                "cron", job.id, scheduled_for, now, trigger=trigger, name=job.name,
                retry_until=retry_until, holder=self.leases.holder(now),
            )  # fmt: skip
            try:
                await self.runs.open(run)
            except Exception as exc:
                if unreachable(exc):
                    raise NotStarted(f"{type(exc).__name__}: {exc}") from exc
                raise
            ticket = self._begin(run)  # the try, as ``_attempt``, in this one frame
            try:
                outcome = await self.work.run_cron(job, ticket)
            except Exception as exc:
                outcome = self._failed(ticket, exc)
            except BaseException:  # cancelled: its lease lapses, the record is reclaimed
                self.leases.drop(run.id)
                raise
            done = await self._end(run, job, ticket, outcome)
        if then is not None:
            await then(done)
        return done

    async def pulse(
        self,
        scheduled_for: datetime,
        trigger: Trigger = "schedule",
        *,
        retry_until: datetime | None = None,
    ) -> Run:
        """One pulse: recorded as skipped when the planner says so, else run."""
        async with self._turns.setdefault("pulse", asyncio.Lock()):
            now = self._clock()
            try:
                plan = await self.work.plan_pulse(now, trigger)
                if isinstance(plan, Skip):
                    return await self.runs.skipped(
                        "pulse", None, scheduled_for, now, plan.detail, trigger=trigger,
                        why=plan.reason,
                    )  # fmt: skip
                run = Run.first_try(
                    "pulse", None, scheduled_for, now, trigger=trigger, context=plan.facts,
                    retry_until=retry_until, holder=self.leases.holder(now),
                )  # fmt: skip
                await self.runs.open(run)
            except Exception as exc:
                if unreachable(exc):
                    raise NotStarted(f"{type(exc).__name__}: {exc}") from exc
                raise
            return await self._attempt(run, None, plan.work)

    async def retry(self, run: Run, job: CronJob | None) -> Run:
        """Try again a fire whose last try failed for a passing reason (the engine
        claimed the retry). The same record and run id: acting tool calls of an earlier
        try are not repeated (the effect log is keyed by run id)."""
        key = f"cron:{job.id}" if job is not None else "pulse"
        async with self._turns.setdefault(key, asyncio.Lock()):
            now = self._clock()
            work: Work | None = None
            if job is None:
                plan = await self.work.plan_pulse(now, run.trigger)
                if isinstance(plan, Skip):
                    skipped = Outcome("skipped", error=plan.detail, reason=plan.reason)
                    return await self.runs.finish(run, skipped, now)
                work = plan.work
            run = await self.runs.reopen(run, now, self.leases.holder(now))
            return await self._attempt(run, job, work)

    async def give_up(self, run: Run, job: CronJob | None, note: str, *, tell: bool) -> Run:
        """A retry that will not happen: out of time (``tell``: the owner hears), or
        superseded by a later fire, disabled or deleted (quietly)."""
        done = await self.runs.give_up(run, note)
        if tell:
            await self._report(done, job, first_close=False)
        return done

    async def reclaimed(self, done: Run, job: CronJob | None) -> None:
        """A run whose process died, closed with no try left (``scheduler.fires.recovery``): the
        owner hears as the job's ``on_failure`` says."""
        await self._report(done, job, first_close=False)

    async def lost(
        self, kind: RunKind, job: CronJob | None, moments: Sequence[datetime], detail: str
    ) -> list[Run]:
        """Fires that never ran because the database could not be reached in their
        window: recorded as failed, and the latest one reported."""
        now = self._clock()
        job_id, name = (job.id, job.name) if job is not None else (None, None)
        runs = [Run.lost(kind, job_id, at, now, detail, name=name) for at in sorted(moments)]
        await self.runs.skipped_many(runs)
        if runs:
            await self._report(runs[-1], job, first_close=False)
        return runs

    async def missed(self, runs: Sequence[Run], jobs: Mapping[str, CronJob]) -> None:
        """Fires missed past their grace window (the process was down, or stalled), as
        recorded (``alert_pending``): the owner hears of them in one alert, except of
        jobs whose ``on_failure`` is ``none`` (and of jobs gone since); then their
        records say so. An alert that could not go out leaves them pending: the next
        start tells (``Engine.start``)."""
        told = [
            run
            for run in runs
            if (job := jobs.get(run.job_id or "")) is not None and job.on_failure != "none"
        ]
        if isinstance(self._work, Calls) and self._work.on_missed is None:
            return  # work without an owner to tell (tests): left pending
        if told:
            try:
                await self.work.warn_missed(told, jobs)
            except Exception:
                log.exception("could not alert the owner of %d missed fire(s)", len(told))
                return
        await self.runs.alerted([run.id for run in runs])

    # --- one try ---------------------------------------------------------------------

    async def _attempt(self, run: Run, job: CronJob | None, work: Work | None = None) -> Run:
        """One try: the cron runner for ``job``, else ``work`` (a pulse's); an exception
        becomes ``failed`` (``_failed``). ``cron`` does the same inline."""
        ticket = self._begin(run)
        try:
            if work is not None:
                outcome = await work(ticket)
            elif job is not None:
                outcome = await self.work.run_cron(job, ticket)
            else:
                raise TypeError("a try needs its job or its work")
        except Exception as exc:
            outcome = self._failed(ticket, exc)
        except BaseException:  # cancelled (a stop): its lease lapses, the record is reclaimed
            self.leases.drop(run.id)
            raise
        return await self._end(run, job, ticket, outcome)

    def _begin(self, run: Run) -> RunTicket:
        """A try's ticket, its record's lease held from now on (``_end`` lets it go)."""
        attempt, until = run.attempts, run.retry_until
        ticket = RunTicket(
            id=str(run.id),
            kind=run.kind,
            job_id=run.job_id,
            scheduled_for=run.scheduled_for or run.began or self._clock(),
            trigger=run.trigger,
            attempt=attempt,
            will_retry=self.retry_at(attempt, until, self._clock()) is not None,
        )
        self.leases.hold(run.id)
        return ticket

    @staticmethod
    def _failed(ticket: RunTicket, exc: Exception) -> Outcome:
        """The outcome of a try that raised: ``failed``, ``internal_error``, or
        ``database_unavailable`` when the database could not be reached."""
        if unreachable(exc):
            log.warning("%s run %s: database unreachable: %s", ticket.kind, ticket.id, exc)
            reason: Reason = "database_unavailable"
        else:
            log.exception("%s run %s raised", ticket.kind, ticket.id, exc_info=exc)
            reason = "internal_error"
        return Outcome("failed", error=f"{type(exc).__name__}: {exc}", reason=reason)

    async def _end(self, run: Run, job: CronJob | None, ticket: RunTicket, outcome: Outcome) -> Run:
        """The try's end: its record closed with ``outcome`` and when to try again, or
        that no try is left; the lease let go, unless the outcome waits to be written."""
        attempt, until = run.attempts, run.retry_until
        unsaved = False
        try:
            now = self._clock()
            passing = outcome.status in FAILED and outcome.reason in PASSING
            retry_at = self.retry_at(attempt, until, now) if passing else None
            gave_up = passing and until is not None and retry_at is None
            if retry_at is not None:
                log.warning(
                    "%s run %s failed (%s); trying again at %s",
                    ticket.kind, ticket.id, outcome.reason, retry_at.isoformat(timespec="seconds"),
                )  # fmt: skip
            closing = _Closing(run, outcome, job, attempt, now, retry_at, gave_up)
            try:
                return await self._save(closing)
            except Exception as exc:
                if not unreachable(exc):
                    raise
                log.warning("%s run %s: outcome kept until the database is back: %s",
                            ticket.kind, ticket.id, exc)  # fmt: skip
                self._unsaved.append(closing)
                unsaved = True  # held until its outcome is written
                return replace(run, status=outcome.status, reason=outcome.reason, unsaved=True)
        finally:
            if not unsaved:
                self.leases.drop(run.id)

    async def _save(self, closing: _Closing) -> Run:
        done = await self.runs.finish(
            closing.run,
            closing.outcome,
            closing.now,
            retry_at=closing.retry_at,
            gave_up=closing.gave_up,
        )
        if done.reclaimed:  # taken for dead meanwhile: the reclaimer has spoken
            log.warning(
                "run %s was reclaimed by another process before it ended; its outcome "
                "(%s) is not recorded", closing.run.id, closing.outcome.status,
            )  # fmt: skip
            return done
        if done.failed:
            await self._report(done, closing.job, first_close=closing.attempt == 1)
        return done

    @property
    def unsaved(self) -> int:
        """Finished runs whose outcome is waiting for the database."""
        return len(self._unsaved)

    async def flush(self) -> list[Run]:
        """Record the outcomes that could not be written when their runs ended."""
        waiting, self._unsaved = self._unsaved, []
        saved: list[Run] = []
        for closing in waiting:
            try:
                saved.append(await self._save(closing))
            except Exception as exc:
                if not unreachable(exc):
                    log.exception("could not record run %s", closing.run.id)
                    self.leases.drop(closing.run.id)  # its lease lapses: reclaimed
                    continue
                self._unsaved.append(closing)
                continue
            self.leases.drop(closing.run.id)  # recorded: held no longer
        return saved

    async def _report(self, done: Run, job: CronJob | None, *, first_close: bool) -> None:
        """Failures reach the owner as the job's ``on_failure`` says: ``warning`` (the
        default, and the pulse's): a fire given up at once, others from a streak of two
        (counted once per fire, at its first try); ``critical``, and any one-time job:
        each fire's failure once no try is left; ``none``: recorded only."""
        if not done.failed or (isinstance(self._work, Calls) and self._work.on_failures is None):
            return
        policy = job.on_failure if job is not None else "warning"
        if policy == "none":
            return
        try:
            streak = await self.runs.failure_streak(done.kind, done.job_id)
            if policy == "critical" or (job is not None and job.once):
                report = done.retry_at is None
            else:
                report = done.gave_up or (first_close and streak >= 2)
            if report:
                await self.work.warn_failures(done, streak, job)
        except Exception:
            log.exception("could not report the failed run %s", done.id)


@dataclass(frozen=True)
class _Closing:
    """A try's end, to be written to its record."""

    run: Run
    outcome: Outcome
    job: CronJob | None
    attempt: int
    now: datetime
    retry_at: datetime | None
    gave_up: bool
