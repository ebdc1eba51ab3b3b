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
  is re-armed, so a long run never delays the next one;
* a fire that cannot start or be recorded is tried again in its grace window, else
  recorded ``failed`` and reported (``scheduler.fires.retries``); so is a failed sweep;
* a run cut off with its process (its lease lapsed, or this process owns the database
  and started after it) is closed ``interrupted`` and tried again in its window or
  reported (``scheduler.fires.recovery``), at start-up or as soon as its lease lapses.

Timers (one APScheduler ``DateTrigger`` per key: ``cron:<id>``, ``pulse``, ``retry``,
plus the periodic resync) only call ``wake`` with their key; what is due is read from
the database. Timers that fire together are handled by one sweep with a few batched
round trips,
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

from scheduler.backlog import Plan, Shared, plan_cron, plan_pulse
from scheduler.cron.service import CronService
from scheduler.fires.claims import LeaseStore
from scheduler.fires.recorder import RunRecorder
from scheduler.fires.records import RunStore, Trigger, skipped_doc
from scheduler.fires.recovery import Reclaimer, recover_once
from scheduler.fires.retries import Retries, group_of
from scheduler.pulse.store import PulseStore
from storage.retry import unreachable
from storage.tasks import stop_task

log = logging.getLogger(__name__)
Clock = Callable[[], datetime]
PULSE_TIMER = "pulse"
RESYNC_TIMER = "resync"
RETRY_TIMER = "retry"


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
    retry_seconds: float = 15.0
    """How soon a sweep that failed (say, the database was unreachable) is tried again."""
    sole_owner: bool = False
    """This process started the only server of its database (the embedded one): runs
    other processes left ``running`` before it started are reclaimed at once."""


@dataclass
class Fire:
    kind: Literal["cron", "pulse"]
    job_id: str | None
    scheduled_for: datetime
    action: Literal["run", "skipped", "retry", "failed"]
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
        self._timers = Timers(clock, self._wake)
        self._woken: set[str] = set()
        self._unswept: set[str] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._pool = TaskPool(self.config.max_parallel, log)
        config = self.config
        self.retries = Retries(runs, jobs, recorder, clock, config.grace, self._timers.arm_retry)
        self.retries.soon = timedelta(seconds=config.retry_seconds)
        self.reclaim = Reclaimer(runs, jobs, recorder, config.grace, sole_owner=config.sole_owner)
        self._last_ok: datetime | None = None
        """When a sweep last reached the database (``_unreachable``: one failed since)."""
        self._unreachable = False
        self.state = "not started"
        """``running`` between ``start`` and ``stop``, then ``stopped`` (for /healthz)."""

    # --- lifecycle ---------------------------------------------------------------

    async def start(self) -> int:
        """Arm every enabled job and the pulse; returns how many timers are armed."""
        if self._use_timer:
            # Its own quiet logger: APScheduler logs every added job at INFO.
            quiet = logging.getLogger(f"{__name__}.apscheduler")
            quiet.setLevel(logging.WARNING)
            self._timers.start(self.resync, self.config.resync_seconds, quiet)
        if self.job_changed not in self.jobs.listeners:
            self.jobs.listeners.append(self.job_changed)
        if self.pulse_changed not in self.pulse.listeners:
            self.pulse.listeners.append(self.pulse_changed)
        armed = await self.load()
        self._last_ok = self.clock()
        self.state = "running"
        return armed

    async def stop(self) -> None:
        """Stop the timers; runs in flight get ``stop_grace`` to finish, then are cancelled
        (their leases are let go, so the next start reclaims them at once)."""
        self.state = "stopped"
        self._timers.stop()
        if held := self.retries.held:  # in memory only: the log is all that is left of them
            log.warning("stopping with %d fire(s) never started: %s", len(held), ", ".join(held))
        await stop_task(self._sweeper)
        await self._pool.stop(self.config.stop_grace)
        await self.recorder.leases.release()

    async def load(self) -> int:
        """(Re)arm timers from the database, the source of truth."""
        # The owner's settings too: another process may have changed the timezone
        # (the default for new jobs) or the quiet hours.
        owner = await self.pulse.owner.load()
        self.jobs.default_timezone = owner.timezone
        await self.reclaim.scan(self.clock())
        await recover_once(self.jobs, self.recorder, self.leases, self.clock(), self.config.grace)
        await self.pulse.ensure_next(self.clock())
        times = await self.jobs.armed_times()
        live = {f"cron:{job_id}" for job_id in times}
        for key in [k for k in self._timers.armed if k.startswith("cron:") and k not in live]:
            self._timers.disarm(key)
        for job_id, at in times.items():
            self._timers.arm(f"cron:{job_id}", at)
        self._timers.arm(PULSE_TIMER, (await self.pulse.get()).next_pulse_at)
        retry_at = await self.runs.next_retry()
        if retry_at is not None:
            self._timers.arm_retry(retry_at)
        if self.reclaim.next_check is not None:
            self._timers.arm_retry(self.reclaim.next_check)
        return len(self._timers.armed)

    async def resync(self) -> None:
        """Pick up changes made by another process, and anything a timer missed."""
        try:
            await self.load()
            await self.run_due(wait=False)
            await self.leases.prune(self.clock())
        except Exception as exc:
            self._trouble(exc)
            log.exception("scheduler resync failed")

    def _trouble(self, exc: BaseException) -> None:
        """A sweep failed: note whether the database was away, and sweep again soon."""
        if unreachable(exc):
            self._unreachable = True
        self._timers.arm_retry(self.clock() + self.retries.soon)

    async def join(self) -> None:
        """Wait for every run started so far (tests, benchmarks)."""
        while self._pool.busy or (self._sweeper is not None and not self._sweeper.done()):
            if self._sweeper is not None and not self._sweeper.done():
                await asyncio.wait([self._sweeper])
            await self._pool.join()

    # --- timers --------------------------------------------------------------------

    @property
    def armed(self) -> dict[str, datetime]:
        """Timers this process holds, by key (``cron:<id>``, ``pulse``)."""
        return dict(self._timers.armed)

    @property
    def timer_on(self) -> bool:
        return self._timers.on

    async def job_changed(self, job_id: str) -> None:
        """A job was created, edited, toggled or deleted: re-arm it now."""
        found = await self.jobs.next_fire_map([job_id])
        self._timers.armed.pop(f"cron:{job_id}", None)
        self._timers.arm(f"cron:{job_id}", found[job_id])

    async def pulse_changed(self) -> None:
        self._timers.armed.pop(PULSE_TIMER, None)
        self._timers.arm(PULSE_TIMER, (await self.pulse.get()).next_pulse_at)

    async def _wake(self, key: str) -> None:
        """A timer fired: its job is no longer armed; sweep once for all that fired."""
        self._timers.armed.pop(key, None)
        self._woken.add(key)
        self._woken |= self._unswept
        self._unswept.clear()
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def _sweep(self) -> None:
        await asyncio.sleep(0)  # timers firing together join this sweep
        while self._woken:
            woken, self._woken = self._woken, set()
            try:
                await self.run_due(wait=False)
                # A timer that fired early (nothing was due yet) is armed again.
                cron_ids = [
                    k[5:] for k in woken if k.startswith("cron:") and k not in self._timers.armed
                ]
                for job_id, at in (await self.jobs.next_fire_map(cron_ids)).items():
                    self._timers.arm(f"cron:{job_id}", at)
                if PULSE_TIMER in woken and PULSE_TIMER not in self._timers.armed:
                    self._timers.arm(PULSE_TIMER, (await self.pulse.get()).next_pulse_at)
            except Exception as exc:
                # The fires stay due in the database; the retry timer sweeps again, and
                # these timers are looked at again then.
                self._unswept |= woken
                self._trouble(exc)
                log.exception("scheduler sweep failed")

    async def run_pulse_now(self, trigger: Trigger) -> dict[str, object]:
        """A pulse asked for by hand: recorded like a scheduled one, and it counts
        against the daily cap; it runs even when there is nothing new."""
        return await self.recorder.pulse(self.clock(), trigger)

    # --- due work --------------------------------------------------------------------

    async def run_due(self, now: datetime | None = None, *, wait: bool = True) -> list[Fire]:
        """Handle everything due at ``now`` (default: the clock); with ``wait``, return
        after the runs have finished. Tests drive time through this method."""
        now = now or self.clock()
        try:
            fires = await self._due(now)
        except Exception as exc:
            self._trouble(exc)
            raise
        self._last_ok, self._unreachable = now, False
        if wait:
            await asyncio.gather(*(f.task for f in fires if f.task), return_exceptions=True)
        return fires

    async def _due(self, now: datetime) -> list[Fire]:
        if self.reclaim.due(now):  # another process's lease lapsed: its runs, tried again
            await self.reclaim.scan(now)
        jobs = {job.id: job for job in await self.jobs.enabled_jobs(due_by=now)}
        shared: Shared = {}
        grace, records = self.config.grace, self.config.skip_records
        plans = [p for j in jobs.values() if (p := plan_cron(j, now, shared, grace, records))]
        pulse_plan = plan_pulse(await self.pulse.get(), self.pulse.tz, now, grace, records)
        if pulse_plan is not None:
            plans.append(pulse_plan)
        fires = await self._commit(plans, now) if plans else []
        for fire in fires:
            if fire.action == "run":
                job = jobs[fire.job_id] if fire.job_id is not None else None
                fire.task = self._pool.spawn(self.retries.start(fire.kind, job, fire.scheduled_for))
        running = {group_of(f.kind, f.job_id) for f in fires if f.action == "run"}
        for item in await self.retries.due(now, running):
            fire = Fire(item.kind, item.job_id, item.scheduled_for, item.action)
            fire.task = self._pool.spawn(item.work)
            fires.append(fire)
        if (retry_at := await self.runs.next_retry()) is not None:
            self._timers.arm_retry(retry_at)
        if self.retries.waiting:
            self._timers.arm_retry(now + self.retries.soon)
        if self.reclaim.next_check is not None:
            self._timers.arm_retry(self.reclaim.next_check)
        return fires

    async def _commit(self, plans: list[Plan], now: datetime) -> list[Fire]:
        """Claim the leases, record the skipped fires, move the cursors, re-arm: a few
        round trips for any number of jobs."""
        keys = [plan.key(moment) for plan in plans for moment, _ in plan.due.skipped]
        keys += [plan.key(plan.due.to_run) for plan in plans if plan.due.to_run]
        won = await self.leases.acquire_many(keys, now)
        fires: list[Fire] = []
        skipped_docs = []
        # Fires that fell due after the last sweep that reached the database, and out of
        # their window while it was away, were lost to it: failed and reported, not missed.
        lost_after = self._last_ok if self._unreachable else None
        for plan in plans:
            for moment, reason in plan.due.skipped:
                if plan.key(moment) not in won:
                    continue
                if (
                    lost_after is not None
                    and moment > lost_after
                    and now - moment > self.config.grace
                ):
                    since = f"unreachable since {lost_after.isoformat(timespec='seconds')}"
                    self.retries.hold_fire(plan.kind, plan.job_id, moment, since, until=moment)
                    continue
                skipped_docs.append(skipped_doc(plan.kind, plan.job_id, moment, now, reason))
                fires.append(Fire(plan.kind, plan.job_id, moment, "skipped"))
            run = plan.due.to_run
            if run is not None and plan.key(run) in won:
                fires.append(Fire(plan.kind, plan.job_id, run, "run"))
        try:
            await self._advance(plans, skipped_docs)
        except Exception:
            # The fires won are this process's alone: held, a later sweep starts them.
            for fire in fires:
                if fire.action == "run":
                    self.retries.hold_fire(fire.kind, fire.job_id, fire.scheduled_for, "claimed")
            raise
        return fires

    async def _advance(self, plans: list[Plan], skipped_docs: list[dict[str, object]]) -> None:
        """Record the skipped fires, move the cursors, re-arm."""
        await self.runs.skipped_many(skipped_docs)
        cron = {plan.job_id: plan for plan in plans if plan.job_id is not None}
        await self.jobs.advance_many([(i, p.cursor, p.due.upcoming) for i, p in cron.items()])
        for job_id, at in (await self.jobs.next_fire_map(list(cron))).items():
            self._timers.armed.pop(f"cron:{job_id}", None)
            self._timers.arm(f"cron:{job_id}", at)
        for plan in plans:
            if plan.job_id is None:
                await self.pulse.advance(plan.cursor, plan.due.upcoming)
                self._timers.armed.pop(PULSE_TIMER, None)
                self._timers.arm(PULSE_TIMER, (await self.pulse.get()).next_pulse_at)


# --- timers: one per key, armed for a moment ------------------------------------------


class Timers:
    """One APScheduler ``DateTrigger`` per key plus the periodic resync, and the moment
    each key is armed for. A timer firing only calls ``wake`` with its key."""

    def __init__(self, clock: Clock, wake: Callable[[str], Awaitable[None]]) -> None:
        self.clock = clock
        self._wake = wake
        self._scheduler: AsyncIOScheduler | None = None
        self.armed: dict[str, datetime] = {}
        """Timers this process holds, by key; kept even with APScheduler off (``timer=False``)."""

    def start(
        self, resync: Callable[[], Awaitable[None]], seconds: float, logger: logging.Logger
    ) -> None:
        """Start APScheduler, with ``resync`` every ``seconds``."""
        self._scheduler = AsyncIOScheduler(timezone=UTC, logger=logger)
        self._scheduler.start()
        self._scheduler.add_job(
            resync,
            IntervalTrigger(seconds=seconds),
            id=RESYNC_TIMER,
            coalesce=True,
            max_instances=1,
            misfire_grace_time=None,
        )

    def stop(self) -> None:
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
            self._scheduler = None
        self.armed.clear()

    @property
    def on(self) -> bool:
        return self._scheduler is not None

    def arm_retry(self, at: datetime) -> None:
        """Wake for retries at ``at``, unless already woken earlier."""
        current = self.armed.get(RETRY_TIMER)
        if current is None or at < current:
            self.armed.pop(RETRY_TIMER, None)
            self.arm(RETRY_TIMER, at)

    def arm(self, key: str, at: datetime | None) -> None:
        if at is None:
            self.disarm(key)
            return
        if self.armed.get(key) == at:
            return
        self.armed[key] = at
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

    def disarm(self, key: str) -> None:
        self.armed.pop(key, None)
        if self._scheduler is not None:
            with contextlib.suppress(Exception):
                self._scheduler.remove_job(key)


# --- runs in flight -------------------------------------------------------------------


class TaskPool:
    """The engine's runs in flight: at most ``max_parallel`` at once, logged if one
    raises, and given a grace period to finish when the engine stops."""

    def __init__(self, max_parallel: int, log: logging.Logger) -> None:
        self._slots = asyncio.Semaphore(max_parallel)
        self._tasks: set[asyncio.Task[object]] = set()
        self._log = log
        """The engine's logger, so a run that raised is reported under its name."""

    @property
    def busy(self) -> bool:
        """Whether any run is still in flight."""
        return bool(self._tasks)

    def spawn(self, work: Awaitable[object]) -> asyncio.Task[object]:
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
            self._log.error("scheduled run raised", exc_info=task.exception())

    async def join(self) -> None:
        """Wait for every run in flight now."""
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def stop(self, grace: float) -> None:
        """Give the runs in flight ``grace`` seconds to finish, then cancel them (at once
        too when this stop is itself cancelled: the app's stop deadline passed)."""
        tasks = list(self._tasks)
        try:
            if tasks:
                await asyncio.wait(tasks, timeout=grace)
        finally:
            for task in tasks:
                task.cancel()  # all at once: one run slow to end does not hold the others
        for task in tasks:
            await stop_task(task)
