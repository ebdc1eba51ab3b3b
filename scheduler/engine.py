"""The scheduling engine: MongoDB says when, APScheduler only wakes us up.

Each cron job and the pulse keep their next fire in the database (``next_fire_at``,
``next_pulse_at``). The engine arms one APScheduler ``DateTrigger`` per job at that
moment. A timer firing only asks for a sweep; the sweep (``run_due``) reads from the
database what is due, so a lost timer, a restart or a second process can never run a
fire twice or forget one:

* each fire to run or record as skipped is first claimed with a lease
  (``cron:<id>:<time>``, unique index), so only one process handles it;
* after downtime the latest fire missed by at most ``grace`` runs once; every older
  one (and any superseded one inside the window) is recorded as ``skipped``;
* the cursor moves to the next fire after now *before* the run starts, and the timer
  is re-armed, so a long run never delays the next one.

Timers that fire together are handled by one sweep with a few batched round trips,
so 200 jobs due in the same minute start together. The engine never imports the
agent: runs go through a ``RunRecorder``, which owns their records end to end and
calls the agent's runner for the work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from scheduler.backlog import Due, Plan, split_due
from scheduler.cron import CronError, next_fires, validate_timezone
from scheduler.jobs import CronJob, CronService
from scheduler.leases import LeaseStore
from scheduler.pulse_grid import PulseConfigError, next_pulse
from scheduler.pulse_state import PulseStore
from scheduler.recorder import RunRecorder
from scheduler.runs import RunStore, Trigger, skipped_doc
from storage.tasks import stop_task

log = logging.getLogger(__name__)
Clock = Callable[[], datetime]
PULSE_TIMER = "pulse"
RESYNC_TIMER = "resync"


@dataclass(frozen=True)
class EngineConfig:
    grace: timedelta = timedelta(minutes=10)
    """A fire missed by at most this much still runs (once); older ones are skipped."""
    resync_seconds: float = 60.0
    """How often the database is re-read for changes made by another process."""
    max_parallel: int = 256
    """Runs in flight at once (a runaway guard; model calls have their own limit)."""
    skip_records: int = 50
    """Missed fires recorded one by one per job and sweep; a longer backlog is summarised."""
    stop_grace: float = 5.0
    """Seconds runs in flight may take to finish when the engine stops."""


@dataclass
class Fire:
    kind: Literal["cron", "pulse"]
    job_id: str | None
    scheduled_for: datetime
    action: Literal["run", "skipped"]
    task: asyncio.Task[object] | None = field(default=None, repr=False)


class Engine:
    def __init__(
        self,
        *,
        jobs: CronService,
        pulse: PulseStore,
        runs: RunStore,
        leases: LeaseStore,
        clock: Clock,
        recorder: RunRecorder,
        config: EngineConfig | None = None,
        timer: bool = True,
    ) -> None:
        self.jobs = jobs
        self.pulse = pulse
        self.runs = runs
        self.leases = leases
        self.clock = clock
        self.recorder = recorder
        self.config = config or EngineConfig()
        self._use_timer = timer
        self._scheduler: AsyncIOScheduler | None = None
        self._armed: dict[str, datetime] = {}
        self._woken: set[str] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[object]] = set()
        self._slots = asyncio.Semaphore(self.config.max_parallel)
        self.state = "not started"
        """``running`` between ``start`` and ``stop``, then ``stopped`` (for /healthz)."""

    # --- lifecycle ---------------------------------------------------------------

    async def start(self) -> int:
        """Arm every enabled job and the pulse; returns how many timers are armed."""
        if self._use_timer:
            # Its own quiet logger: APScheduler logs every added job at INFO.
            quiet = logging.getLogger(f"{__name__}.apscheduler")
            quiet.setLevel(logging.WARNING)
            self._scheduler = AsyncIOScheduler(timezone=UTC, logger=quiet)
            self._scheduler.start()
            self._scheduler.add_job(
                self.resync,
                IntervalTrigger(seconds=self.config.resync_seconds),
                id=RESYNC_TIMER,
                coalesce=True,
                max_instances=1,
                misfire_grace_time=None,
            )
        if self.job_changed not in self.jobs.listeners:
            self.jobs.listeners.append(self.job_changed)
        if self.pulse_changed not in self.pulse.listeners:
            self.pulse.listeners.append(self.pulse_changed)
        armed = await self.load()
        self.state = "running"
        return armed

    async def stop(self) -> None:
        """Stop the timers; runs in flight get ``stop_grace`` to finish, then are cancelled
        (their records are closed as interrupted on the next start)."""
        self.state = "stopped"
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
            self._scheduler = None
        self._armed.clear()
        await stop_task(self._sweeper)
        tasks = list(self._tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=self.config.stop_grace)
        for task in tasks:
            await stop_task(task)

    async def load(self) -> int:
        """(Re)arm timers from the database, the source of truth."""
        await self.pulse.ensure_next(self.clock())
        times = await self.jobs.armed_times()
        live = {f"cron:{job_id}" for job_id in times}
        for key in [k for k in self._armed if k.startswith("cron:") and k not in live]:
            self._disarm(key)
        for job_id, at in times.items():
            self._arm(f"cron:{job_id}", at)
        self._arm(PULSE_TIMER, (await self.pulse.get()).next_pulse_at)
        return len(self._armed)

    async def resync(self) -> None:
        """Pick up changes made by another process, and anything a timer missed."""
        try:
            await self.load()
            await self.run_due(wait=False)
            await self.leases.prune(self.clock())
        except Exception:
            log.exception("scheduler resync failed")

    async def join(self) -> None:
        """Wait for every run started so far (tests, benchmarks)."""
        while self._tasks or (self._sweeper is not None and not self._sweeper.done()):
            if self._sweeper is not None and not self._sweeper.done():
                await asyncio.wait([self._sweeper])
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # --- timers --------------------------------------------------------------------

    def _arm(self, key: str, at: datetime | None) -> None:
        if at is None:
            self._disarm(key)
            return
        if self._armed.get(key) == at:
            return
        self._armed[key] = at
        if self._scheduler is None:
            return
        # Wait as long as the injectable clock says: the same instant in production.
        delay = max(timedelta(0), at - self.clock())
        self._scheduler.add_job(
            self._wake,
            DateTrigger(run_date=datetime.now(UTC) + delay),
            args=[key],
            id=key,
            replace_existing=True,
            misfire_grace_time=None,
            coalesce=True,
        )

    def _disarm(self, key: str) -> None:
        self._armed.pop(key, None)
        if self._scheduler is not None:
            with contextlib.suppress(Exception):
                self._scheduler.remove_job(key)

    @property
    def armed(self) -> dict[str, datetime]:
        """Timers this process holds, by key (``cron:<id>``, ``pulse``)."""
        return dict(self._armed)

    @property
    def timer_on(self) -> bool:
        return self._scheduler is not None

    async def job_changed(self, job_id: str) -> None:
        """A job was created, edited, toggled or deleted: re-arm it now."""
        found = await self.jobs.next_fire_map([job_id])
        self._armed.pop(f"cron:{job_id}", None)
        self._arm(f"cron:{job_id}", found[job_id])

    async def pulse_changed(self) -> None:
        self._armed.pop(PULSE_TIMER, None)
        self._arm(PULSE_TIMER, (await self.pulse.get()).next_pulse_at)

    async def _wake(self, key: str) -> None:
        """A timer fired: its job is no longer armed; sweep once for all that fired."""
        self._armed.pop(key, None)
        self._woken.add(key)
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def _sweep(self) -> None:
        await asyncio.sleep(0)  # timers firing together join this sweep
        while self._woken:
            woken, self._woken = self._woken, set()
            try:
                await self.run_due(wait=False)
            except Exception:
                log.exception("scheduler sweep failed")
            # A timer that fired early (nothing was due yet) is armed again.
            cron_ids = [k[5:] for k in woken if k.startswith("cron:") and k not in self._armed]
            for job_id, at in (await self.jobs.next_fire_map(cron_ids)).items():
                self._arm(f"cron:{job_id}", at)
            if PULSE_TIMER in woken and PULSE_TIMER not in self._armed:
                self._arm(PULSE_TIMER, (await self.pulse.get()).next_pulse_at)

    async def run_pulse_now(self, trigger: Trigger) -> dict[str, object]:
        """A pulse asked for by hand: recorded like a scheduled one, and it counts
        against the daily cap; it runs even when there is nothing new."""
        return await self.recorder.pulse(self.clock(), trigger)

    # --- due work --------------------------------------------------------------------

    async def run_due(self, now: datetime | None = None, *, wait: bool = True) -> list[Fire]:
        """Handle everything due at ``now`` (default: the clock); with ``wait``, return
        after the runs have finished. Tests drive time through this method."""
        now = now or self.clock()
        jobs = {job.id: job for job in await self.jobs.enabled_jobs(due_by=now)}
        shared: dict[tuple[str, str, datetime], Due | None] = {}
        plans = [plan for job in jobs.values() if (plan := self._plan_cron(job, now, shared))]
        pulse_plan = await self._plan_pulse(now)
        if pulse_plan is not None:
            plans.append(pulse_plan)
        if not plans:
            return []
        fires = await self._commit(plans, now)
        for fire in fires:
            if fire.action != "run":
                continue
            if fire.job_id is None:
                fire.task = self._spawn(self.recorder.pulse(fire.scheduled_for))
            else:
                fire.task = self._spawn(self.recorder.cron(jobs[fire.job_id], fire.scheduled_for))
        if wait:
            await asyncio.gather(*(f.task for f in fires if f.task), return_exceptions=True)
        return fires

    def _plan_cron(
        self, job: CronJob, now: datetime, shared: dict[tuple[str, str, datetime], Due | None]
    ) -> Plan | None:
        """Jobs with the same schedule and cursor share one computation (200 jobs at
        09:00 cost one)."""
        cursor = job.next_fire_at
        if cursor is None or cursor > now:
            return None
        memo = (job.cron_expression, job.timezone, cursor)
        if memo not in shared:
            try:
                tz = validate_timezone(job.timezone)
                shared[memo] = split_due(
                    cursor,
                    now,
                    lambda after, count: next_fires(job.cron_expression, tz, after, count),
                    grace=self.config.grace,
                    skip_records=self.config.skip_records,
                )
            except CronError:
                log.warning("cron job %s has an unusable schedule; not run", job.id)
                shared[memo] = None
        due = shared[memo]
        return None if due is None else Plan("cron", job.id, cursor, due)

    async def _plan_pulse(self, now: datetime) -> Plan | None:
        state = await self.pulse.get()
        cursor = state.next_pulse_at
        if cursor is None or cursor > now:
            return None
        try:
            schedule = state.schedule(self.pulse.tz)
        except PulseConfigError:
            log.warning("stored pulse settings are invalid; pulse not run")
            return None

        def next_after(after: datetime, count: int) -> list[datetime]:
            slots: list[datetime] = []
            while len(slots) < count and (slot := next_pulse(schedule, after)) is not None:
                slots.append(slot)
                after = slot
            return slots

        due = split_due(
            cursor, now, next_after, grace=self.config.grace, skip_records=self.config.skip_records
        )
        return Plan("pulse", None, cursor, due)

    async def _commit(self, plans: list[Plan], now: datetime) -> list[Fire]:
        """Claim the leases, record the skipped fires, move the cursors, re-arm: a few
        round trips for any number of jobs."""
        keys = [plan.key(moment) for plan in plans for moment, _ in plan.due.skipped]
        keys += [plan.key(plan.due.to_run) for plan in plans if plan.due.to_run]
        won = await self.leases.acquire_many(keys, now)
        fires: list[Fire] = []
        skipped_docs = []
        for plan in plans:
            for moment, reason in plan.due.skipped:
                if plan.key(moment) in won:
                    skipped_docs.append(skipped_doc(plan.kind, plan.job_id, moment, now, reason))
                    fires.append(Fire(plan.kind, plan.job_id, moment, "skipped"))
            run = plan.due.to_run
            if run is not None and plan.key(run) in won:
                fires.append(Fire(plan.kind, plan.job_id, run, "run"))
        await self.runs.skipped_many(skipped_docs)
        cron = {plan.job_id: plan for plan in plans if plan.job_id is not None}
        await self.jobs.advance_many([(i, p.cursor, p.due.upcoming) for i, p in cron.items()])
        for job_id, at in (await self.jobs.next_fire_map(list(cron))).items():
            self._armed.pop(f"cron:{job_id}", None)
            self._arm(f"cron:{job_id}", at)
        for plan in plans:
            if plan.job_id is None:
                await self.pulse.advance(plan.cursor, plan.due.upcoming)
                self._armed.pop(PULSE_TIMER, None)
                self._arm(PULSE_TIMER, (await self.pulse.get()).next_pulse_at)
        return fires

    def _spawn(self, work: Awaitable[object]) -> asyncio.Task[object]:
        async def bounded() -> object:
            async with self._slots:
                return await work

        task: asyncio.Task[object] = asyncio.get_running_loop().create_task(bounded())
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[object]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("scheduled run raised", exc_info=task.exception())
