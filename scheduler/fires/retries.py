"""Fires tried again: none is lost silently while the model or the database is away.

A fire can fail to run when due in three ways, each handled inside its grace window
(``EngineConfig.grace``, given to the recorder as ``retry_until``):

* its try failed for a passing reason (``storage.repos.runs.PASSING``): the recorder
  closed the record with ``retry_at``, and ``due`` claims it when that time comes;
* its record could not be opened (``NotStarted``): ``launch`` keeps it here, in memory
  (``hold_fire``), and ``due`` starts it again on the next sweep;
* the sweep itself could not reach the database: the engine sweeps again soon, and
  fires that came due meanwhile and fell out of their window are held here as lost.

A held fire out of its window is recorded ``failed`` (``database_unavailable``) and
reported, once per job and sweep; a stored retry out of its window is given up and
reported; one superseded by a later fire of the same job, or whose job was disabled
or deleted, is given up quietly (the later fire speaks for the job).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from scheduler.cron.job import CronJob, JobError
from scheduler.cron.service import CronService
from scheduler.fires.claims import cron_key, pulse_key
from scheduler.fires.recorder import NotStarted, RunRecorder
from storage.repos.runs.record import Run, RunKind, Trigger
from storage.repos.runs.store import RunStore
from storage.retry import unreachable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Unstarted:
    """A fire that has not run, kept until it runs or is recorded as lost."""

    kind: RunKind
    job_id: str | None
    scheduled_for: datetime
    trigger: Trigger
    until: datetime
    """The end of its grace window: it may start until then."""
    error: str

    @property
    def group(self) -> str:
        return group_of(self.kind, self.job_id)


@dataclass(frozen=True)
class Retried:
    """Work ``due`` hands to the engine to run, and what it is."""

    kind: RunKind
    job_id: str | None
    scheduled_for: datetime
    action: Literal["retry", "failed"]
    work: Awaitable[object]
    """Its work: to run (a coroutine), or running (a held fire started again)."""


def group_of(kind: RunKind, job_id: str | None) -> str:
    return f"cron:{job_id}" if kind == "cron" else "pulse"


class Retries:
    def __init__(
        self,
        runs: RunStore,
        jobs: CronService,
        recorder: RunRecorder,
        clock: Callable[[], datetime],
        grace: timedelta,
        sweep_at: Callable[[datetime], None],
        *,
        soon: timedelta = timedelta(seconds=15),
    ) -> None:
        self.runs = runs
        self.jobs = jobs
        self.recorder = recorder
        self._clock = clock
        self._grace = grace
        self.soon = soon
        """How soon a held fire, an unsaved outcome or a failed sweep is tried again
        (the engine passes its ``EngineConfig.retry_seconds``)."""
        self._sweep_at = sweep_at
        """Asks the engine to sweep at a moment (for a retry, or a held fire)."""
        self.held: dict[str, Unstarted] = {}
        """Fires not started, by lease key."""

    def launch(
        self,
        kind: RunKind,
        job: CronJob | None,
        scheduled_for: datetime,
        trigger: Trigger = "schedule",
    ) -> asyncio.Task[Run]:
        """Start a fire, in a task of its own, with its grace window; one whose record
        cannot be opened (the task raises ``NotStarted``) is held and started again by
        a later sweep (``_ended``), and a one-time job's is settled as it ends."""
        until = scheduled_for + self._grace
        if job is not None and job.once:  # a late one-time fire gets its window from now
            until = max(until, self._clock() + self._grace)
        work: Coroutine[object, None, Run]
        if job is None:
            work = self.recorder.pulse(scheduled_for, trigger, retry_until=until)
        else:
            then = functools.partial(self.settle, job) if job.once else None
            work = self.recorder.cron(job, scheduled_for, trigger, retry_until=until, then=then)
        task = asyncio.get_running_loop().create_task(work)
        job_id = job.id if job is not None else None
        fire = Unstarted(kind, job_id, scheduled_for, trigger, until, "")
        task.add_done_callback(functools.partial(self._ended, fire))
        return task

    def _ended(self, fire: Unstarted, task: asyncio.Task[Run]) -> None:
        """A fire's task is over: one not started is held; a sweep comes when a retry
        or an outcome waiting for the database is due."""
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, NotStarted):
            log.warning("%s fire %s could not start (%s); trying again",
                        fire.kind, fire.job_id, exc)  # fmt: skip
            moment, until, trigger = fire.scheduled_for, fire.until, fire.trigger
            self.hold_fire(fire.kind, fire.job_id, moment, str(exc), until=until, trigger=trigger)
            self._sweep_at(self._clock() + self.soon)
            return
        if exc is not None:
            return  # the engine logs it
        done = task.result()
        if done.retry_at is not None:
            self._sweep_at(done.retry_at)
        elif done.unsaved:
            self._sweep_at(self._clock() + self.soon)

    def hold_fire(
        self,
        kind: RunKind,
        job_id: str | None,
        scheduled_for: datetime,
        error: str,
        *,
        until: datetime | None = None,
        trigger: Trigger = "schedule",
    ) -> None:
        """Keep a fire that has not run, to start (in its window) or record as lost."""
        key = cron_key(job_id, scheduled_for) if job_id is not None else pulse_key(scheduled_for)
        end = until if until is not None else scheduled_for + self._grace
        self.held[key] = Unstarted(kind, job_id, scheduled_for, trigger, end, error)

    @property
    def waiting(self) -> bool:
        """Something only a later sweep can finish (a held fire, an unsaved outcome)."""
        return bool(self.held) or self.recorder.unsaved > 0

    async def due(self, now: datetime, running: set[str]) -> list[Retried]:
        """Everything to try again at ``now``; ``running`` holds the groups (``cron:<id>``,
        ``pulse``) with a later fire starting in this sweep, which supersedes a retry."""
        if self.recorder.unsaved:
            await self.recorder.flush()
        out: list[Retried] = []
        for run in await self.runs.due_retries(now):
            try:
                out.append(await self._stored(run, now, running))
            except Exception:  # its claim lapses after RETRY_LEASE, and it comes back
                log.exception("retry of run %s not handled now", run.id)
        # Taken out before any await: a sweep running alongside cannot start one twice.
        taken, self.held = self.held, {}
        groups: dict[str, list[tuple[str, Unstarted]]] = {}
        for key, fire in taken.items():
            if now <= fire.until and fire.group not in running:
                groups.setdefault(f"start {key}", []).append((key, fire))
            else:
                groups.setdefault(fire.group, []).append((key, fire))
        pending = list(groups.items())
        while pending:
            name, items = pending[0]
            first = items[0][1]
            try:
                job = await self._job(first.kind, first.job_id)
            except Exception:  # kept for the next sweep, those not handled yet
                self.held.update(dict(item for _, rest in pending for item in rest))
                log.exception("held fires not handled now")
                break
            pending.pop(0)
            if name.startswith("start "):
                if first.kind == "cron" and job is None:
                    log.info("held fire %s dropped: its job was disabled or deleted", name[6:])
                    continue
                task = self.launch(first.kind, job, first.scheduled_for, first.trigger)
                out.append(Retried(first.kind, first.job_id, first.scheduled_for, "retry", task))
            else:
                last = max(fire.scheduled_for for _, fire in items)
                out.append(
                    Retried(first.kind, first.job_id, last, "failed", self._lose(items, job))
                )
        return out

    async def _stored(self, run: Run, now: datetime, running: set[str]) -> Retried:
        kind, job_id = run.kind, run.job_id
        job = await self._job(kind, job_id)
        until, scheduled = run.retry_until, run.scheduled_for or now
        work: Coroutine[object, None, Run]
        if kind == "cron" and job is None:
            note = "not retried: the job was disabled or deleted"
            work = self.recorder.give_up(run, None, note, tell=False)
        elif group_of(kind, job_id) in running or await self.runs.later_fire(run):
            note = "not retried: a later fire superseded it"
            work = self.recorder.give_up(run, job, note, tell=False)
        elif until is None or now > until:
            work = self.recorder.give_up(run, job, "its grace window ended", tell=True)
        else:
            work = self.recorder.retry(run, job)
            return Retried(kind, job_id, scheduled, "retry", self._settled(work, job))
        return Retried(kind, job_id, scheduled, "failed", self._settled(work, job))

    async def _settled(self, work: Awaitable[Run], job: CronJob | None) -> Run:
        done = await work
        await self.settle(job, done)
        return done

    async def settle(self, job: CronJob | None, done: Run) -> None:
        """A one-time job whose run is over (no try left) is kept as done."""
        if job is None or not job.once or not done.final:
            return
        try:
            now = self._clock()
            await self.jobs.finish_once(job.id, done.scheduled_for or now, done.status, now)
        except Exception:  # the engine's resync settles it (scheduler.fires.recovery)
            log.exception("could not mark one-time job %s done", job.id)

    async def _lose(self, items: list[tuple[str, Unstarted]], job: CronJob | None) -> object:
        fire = items[-1][1]
        if fire.kind == "cron" and job is None:
            log.info("%d fire(s) of a deleted or disabled job not recorded", len(items))
            return None
        detail = f"could not run: the database could not be reached ({fire.error})"
        try:
            runs = await self.recorder.lost(
                fire.kind, job, [held.scheduled_for for _, held in items], detail
            )
            if runs:
                await self.settle(job, runs[-1])
            return runs
        except Exception as exc:
            if not unreachable(exc):
                raise
            for key, held in items:  # recorded on a later sweep
                self.held[key] = held
            return None

    async def _job(self, kind: RunKind, job_id: str | None) -> CronJob | None:
        if kind != "cron":
            return None
        try:
            job = await self.jobs.get(job_id)
        except JobError:
            return None
        return job if job.enabled else None
