"""The scheduling engine: MongoDB says when, one APScheduler timer wakes us up.

Each cron job and the pulse keep their next fire in the database (``next_fire_at``,
``next_pulse_at``). The engine keeps, in memory, the moment each of them (and any
retry) is next due, and arms one APScheduler ``DateTrigger`` for the earliest. When it
fires, ``run_due`` (the one name for handling what is due, used by the timer, the
periodic resync and tests alike) reads from the database what is due, so a lost timer,
a restart or a second process can never run a fire twice or forget one:

* each fire to run or record as skipped is first claimed with a lease
  (``cron:<id>:<time>``, unique index), so only one process handles it;
* after downtime the latest fire missed by at most ``grace`` runs once; every older
  one is recorded ``skipped`` (``missed``) and, for a cron job, the owner is alerted,
  once per sweep (and at the next start, if the process stopped before the alert went
  out; a missed pulse loses nothing, the next one looks at all since the last); one
  superseded inside the window is recorded ``skipped`` (``superseded``);
* the cursor moves to the next fire after now *before* the run starts, and the timer
  is re-armed, so a long run never delays the next one;
* a fire that cannot start or be recorded is tried again in its grace window, else
  recorded ``failed`` and reported (``scheduler.fires.retries``); so is a failed sweep;
* a run cut off with its process (its lease lapsed, or this process owns the database
  and started after it) is closed ``interrupted`` and tried again in its window or
  reported (``scheduler.fires.recovery``), at start-up or as soon as its lease lapses.

Other work kept in the database for a moment (``Timed``: the owner's timezone change
set for later) rides the same timer and resync; it runs at the start of the sweep that
finds it due, before the jobs are read, and makes sure itself that it runs once.

Fires due together are handled by one ``run_due`` with a few batched round trips, so
200 jobs due in the same minute start together. The engine never imports the agent:
runs go through a ``RunRecorder``, which owns their records end to end and calls the
agent's runner for the work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from runtime.clock import Clock
from runtime.tasks import stop_task
from scheduler.backlog import Plan, Shared, plan_cron, plan_pulse
from scheduler.cron.job import CronJob
from scheduler.cron.service import CronService
from scheduler.fires.claims import run_now_key
from scheduler.fires.recorder import NotStarted, RunRecorder, RunWork
from scheduler.fires.recovery import Reclaimer, recover_once
from scheduler.fires.retries import Retries, group_of
from scheduler.pulse.store import PulseStore
from storage.repos.leases import LeaseStore
from storage.repos.runs.record import Reason, Run, RunKind, Trigger
from storage.repos.runs.store import RunStore
from storage.retry import unreachable

log = logging.getLogger(__name__)
PULSE_TIMER = "pulse"
RETRY_TIMER = "retry"
"""Keys of ``Engine.armed`` besides ``cron:<id>``: the pulse, and the next retry."""
DUE_JOB = "due"
RESYNC_JOB = "resync"
"""APScheduler's two jobs: the one timer, and the periodic resync."""


class Timed(Protocol):
    """Work stored for a moment, woken by the engine's one timer (``key`` in ``armed``)."""

    @property
    def key(self) -> str: ...

    async def due_at(self) -> datetime | None:
        """When it is next due, read from the database (None: nothing waits)."""
        ...

    async def run(self, now: datetime) -> None:
        """Do what is due at ``now``; safe to call twice, and from two processes."""
        ...


@dataclass(frozen=True)
class EngineConfig:
    grace: timedelta = timedelta(minutes=10)
    """A fire missed by at most this much still runs (once); older ones are skipped."""
    resync_seconds: float = 60.0
    """How often the database is re-read for changes made by another process."""
    skip_records: int = 50
    """Missed fires recorded one by one per job and sweep; a longer backlog is summarised."""
    stop_grace: float = 5.0
    """Seconds runs in flight may take to finish when the engine stops."""
    retry_seconds: float = 15.0
    """How soon a sweep that failed (say, the database was unreachable) is tried again."""
    sole_owner: bool = False
    """This process started the only server of its database (the embedded one): runs
    other processes left ``running`` before it started are reclaimed at once."""


class AlreadyRunning(Exception):
    """A run asked for by hand while one of the same job (or pulse) is under way, in
    this process or another: refused, not queued behind it."""

    def __init__(self, since: datetime | None) -> None:
        super().__init__("a run of it is already under way")
        self.since = since
        """When the run under way began (None: only its claim is known so far)."""


@dataclass
class Fire:
    kind: Literal["cron", "pulse"]
    job_id: str | None
    scheduled_for: datetime
    action: Literal["run", "skipped", "missed", "retry", "failed"]
    task: asyncio.Task[object] | None = field(default=None, repr=False)
    """The run's task; it raises ``NotStarted`` when the run's record could not be
    opened (the fire is held for a later sweep: ``Retries.launch``)."""


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
        timed: tuple[Timed, ...] = (),
    ) -> None:
        self.jobs = jobs
        self.timed = timed
        self.pulse = pulse
        self.runs = runs
        self.leases = leases
        self.clock = clock
        self.recorder = recorder
        self.config = config = config or EngineConfig()
        self._use_timer = timer
        self._timer = Timer(clock, self.run_due)
        self._due_at: dict[str, datetime] = {}
        """When each key (``cron:<id>``, ``pulse``, ``retry``) is next due, as this
        process knows it; the one timer is armed for the earliest."""
        self._loaded = False
        """``load`` has read when everything is due (else a sweep reads the pulse too)."""
        self._sweeping = asyncio.Lock()
        """One ``run_due`` at a time: a timer firing during a sweep waits for it."""
        self._runs: set[asyncio.Task[object]] = set()
        self.retries = Retries(
            runs,
            jobs,
            recorder,
            clock,
            config.grace,
            self._retry_at,
            soon=timedelta(seconds=config.retry_seconds),
        )
        self.reclaim = Reclaimer(runs, jobs, recorder, config.grace, sole_owner=config.sole_owner)
        self._last_ok: datetime | None = None
        """When a sweep last reached the database (``_unreachable``: one failed since)."""
        self._unreachable = False
        self.state = "not started"
        """``running`` between ``start`` and ``stop``, then ``stopped`` (for /healthz)."""

    # --- lifecycle ---------------------------------------------------------------

    async def start(self, work: RunWork | None = None) -> int:
        """Arm the timer for every enabled job and the pulse, the runs done by ``work``
        (the agent's runner, which exists only once the agent does, and the agent's
        tools start runs here: it comes now, as a channel's sink comes to its start;
        None: the recorder was built with its work); returns how many are due at a
        known moment."""
        if work is not None:
            self.recorder.start(work)
        if self._use_timer:
            # Its own quiet logger: APScheduler logs every added job at INFO.
            quiet = logging.getLogger(f"{__name__}.apscheduler")
            quiet.setLevel(logging.WARNING)
            self._timer.start(self.resync, self.config.resync_seconds, quiet)
        if self.job_changed not in self.jobs.listeners:
            self.jobs.listeners.append(self.job_changed)
        if self.pulse_changed not in self.pulse.listeners:
            self.pulse.listeners.append(self.pulse_changed)
        armed = await self.load()
        self._last_ok = self.clock()
        self.state = "running"
        await self.alert_missed()
        return armed

    async def alert_missed(self) -> None:
        """Tell the owner of missed fires recorded before a stop cut their alert off,
        one alert per sweep that recorded them (as it would have been)."""
        try:
            pending = await self.runs.pending_alerts()
            if not pending:
                return
            jobs = {job.id: job for job in await self.jobs.store.enabled()}
            sweeps: dict[datetime | None, list[Run]] = {}
            for run in pending:
                sweeps.setdefault(run.started_at, []).append(run)
            for runs in sweeps.values():
                await self.recorder.missed(runs, jobs)
        except Exception:  # kept pending: the next start tells
            log.exception("missed fires not alerted now")

    async def stop(self) -> None:
        """Stop the timer; runs in flight get ``stop_grace`` to finish, then are
        cancelled all at once (at once too when this stop is itself cancelled: the app's
        stop deadline passed). Their leases are let go, so the next start reclaims them."""
        self.state = "stopped"
        self._timer.stop()
        self._due_at.clear()
        with contextlib.suppress(TimeoutError):  # a sweep under way starts its runs first
            async with asyncio.timeout(self.config.stop_grace), self._sweeping:
                pass
        if held := self.retries.held:  # in memory only: the log is all that is left of them
            log.warning("stopping with %d fire(s) never started: %s", len(held), ", ".join(held))
        tasks = list(self._runs)
        try:
            if tasks:
                await asyncio.wait(tasks, timeout=self.config.stop_grace)
        finally:
            for task in tasks:
                task.cancel()  # all at once: one run slow to end does not hold the others
        for task in tasks:
            await stop_task(task)
        await self.recorder.leases.release()

    async def load(self) -> int:
        """(Re)read from the database, the source of truth, when each job, the pulse and
        the next retry are due, and arm the timer for the earliest."""
        # The owner's settings too: another process may have changed the timezone
        # (the default for new jobs) or the quiet hours.
        await self.pulse.owner.load()  # a new job's default zone follows it (CronService)
        await self.reclaim.scan(self.clock())
        await recover_once(self.jobs, self.recorder, self.leases, self.clock(), self.config.grace)
        await self.pulse.ensure_next(self.clock())
        due_at = {f"cron:{i}": at for i, at in (await self.jobs.store.armed_times()).items() if at}
        if (pulse_at := (await self.pulse.get()).next_pulse_at) is not None:
            due_at[PULSE_TIMER] = pulse_at
        retries = [at for at in (await self.runs.next_retry(), self.reclaim.next_check) if at]
        if current := self._due_at.get(RETRY_TIMER):
            retries.append(current)
        if retries:
            due_at[RETRY_TIMER] = min(retries)
        for work in self.timed:
            if (at := await work.due_at()) is not None:
                due_at[work.key] = at
        self._due_at, self._loaded = due_at, True
        self._timer.arm(min(due_at.values(), default=None))
        return len(due_at)

    async def resync(self) -> None:
        """Pick up changes made by another process, and anything the timer missed."""
        try:
            await self.load()
            await self.run_due(wait=False)
            await self.leases.prune(self.clock())
        except Exception:
            log.exception("scheduler resync failed")

    async def join(self) -> None:
        """Wait for every run started so far (tests, benchmarks)."""
        while self._runs or self._sweeping.locked():
            async with self._sweeping:
                pass
            await asyncio.gather(*list(self._runs), return_exceptions=True)

    # --- the timer -----------------------------------------------------------------

    @property
    def armed(self) -> dict[str, datetime]:
        """When each key (``cron:<id>``, ``pulse``, ``retry``) is next due, as this
        process knows it; the one timer is armed for the earliest."""
        return dict(self._due_at)

    @property
    def next_wake(self) -> datetime | None:
        """When the one timer fires next (kept with APScheduler off, ``timer=False``)."""
        return self._timer.at

    @property
    def timer_on(self) -> bool:
        return self._timer.on

    def _note(self, key: str, at: datetime | None) -> None:
        """Note when ``key`` is next due (None: never); outside a sweep, re-arm the
        timer (a sweep arms it once, as it ends)."""
        if at is None:
            self._due_at.pop(key, None)
        else:
            self._due_at[key] = at
        if not self._sweeping.locked():
            self._timer.arm(min(self._due_at.values(), default=None))

    def _retry_at(self, at: datetime) -> None:
        """Sweep at ``at`` for retries, unless a sweep for them is due earlier."""
        current = self._due_at.get(RETRY_TIMER)
        if current is None or at < current:
            self._note(RETRY_TIMER, at)

    async def job_changed(self, job_id: str) -> None:
        """A job was created, edited, toggled or deleted: re-arm at once."""
        self._note(f"cron:{job_id}", (await self.jobs.store.next_fire_map([job_id]))[job_id])

    async def pulse_changed(self) -> None:
        self._note(PULSE_TIMER, (await self.pulse.get()).next_pulse_at)

    async def timed_changed(self) -> None:
        """A ``Timed`` moment was set or dropped: re-arm at once."""
        for work in self.timed:
            self._note(work.key, await work.due_at())

    def _timed_due(self, now: datetime) -> bool:
        """Whether ``Timed`` work may be due by ``now`` (before ``load``: it is read)."""
        if not self._loaded:
            return bool(self.timed)
        due = (self._due_at.get(work.key) for work in self.timed)
        return any(at is not None and at <= now for at in due)

    async def _run_timed(self, now: datetime) -> None:
        """The ``Timed`` work due by ``now``, before the jobs are read (a zone change
        moves them). One that fails is logged and tried again soon; the jobs go on."""
        for work in self.timed:
            at = self._due_at.get(work.key) if self._loaded else await work.due_at()
            if at is None or at > now:
                continue
            try:
                await work.run(now)
                self._note(work.key, await work.due_at())
            except Exception:
                log.exception("scheduled %s failed; tried again soon", work.key)
                self._retry_at(now + self.retries.soon)

    async def run_pulse_now(self, trigger: Trigger) -> Run:
        """A pulse asked for by hand: recorded like a scheduled one, and it counts
        against the daily cap; it runs even when there is nothing new."""
        return await self.recorder.pulse(self.clock(), trigger)

    async def run_pulse_alone(self, trigger: Trigger) -> Run:
        """``run_pulse_now``, refused (``AlreadyRunning``) while a pulse is under way in
        any process (``_claim_now``): ``POST /api/pulse/run`` twice at once runs one."""
        key = await self._claim_now("pulse", None)
        return await self._claimed(key, self.run_pulse_now(trigger))

    async def start_now(self, job: CronJob) -> None:
        """Run ``job`` now, asked for by hand (the dashboard's "Run now"): recorded like a
        scheduled fire (trigger ``manual``, the answer delivered to the job's chat) and
        started in the background, so the caller answers at once; ``stop`` waits for it
        like any run. ``AlreadyRunning`` while a run of the job is under way (see
        ``_claim_now``): a second click starts nothing."""
        key = await self._claim_now("cron", job.id)
        self._spawn(self._claimed(key, self.recorder.cron(job, self.clock(), "manual")))

    async def _claim_now(self, kind: RunKind, job_id: str | None) -> str:
        """Claim the one run by hand a job (or the pulse) may have at a time, across
        processes: its lease ``run_now_key``, unique in ``leases``, held until the run
        ends. Refused (``AlreadyRunning``) while any run of it holds a live run lease
        (``RunStore.in_progress``: a scheduled one too), or the claim is taken; a claim
        left by a process that died is free once older than a run lease lasts and no run
        of the job is under way."""
        now = self.clock()
        key = run_now_key(job_id)
        running = await self.runs.in_progress(kind, job_id, now)
        if running is None:
            if await self.leases.acquire(key, now):
                return key
            stale = now - self.recorder.leases.terms.ttl
            if await self.leases.release_stale(key, stale) and await self.leases.acquire(key, now):
                return key
        raise AlreadyRunning(running.began if running is not None else None)

    async def _claimed(self, key: str, work: Awaitable[Run]) -> Run:
        """``work``, then the claim ``key`` let go."""
        try:
            return await work
        finally:
            await self.leases.release(key)

    # --- due work --------------------------------------------------------------------

    async def run_due(self, now: datetime | None = None, *, wait: bool = True) -> list[Fire]:
        """Handle everything due at ``now`` (default: the clock): claim, record the
        skipped, move the cursors, re-arm, start the runs and the retries; with
        ``wait``, return after the runs have finished. The timer calls it without
        ``wait``; tests drive time through it."""
        async with self._sweeping:
            now = now or self.clock()
            try:
                reclaimed = self.reclaim.next_check is not None and now >= self.reclaim.next_check
                if reclaimed:
                    await self.reclaim.scan(now)  # another process's lease lapsed
                if self._timed_due(now):
                    await self._run_timed(now)
                jobs = {job.id: job for job in await self.jobs.store.enabled(due_by=now)}
                shared: Shared = {}
                grace, records = self.config.grace, self.config.skip_records
                plans = [
                    p for j in jobs.values() if (p := plan_cron(j, now, shared, grace, records))
                ]
                # The pulse is read when it may be due: a change to it re-arms at once
                # (``pulse_changed``), and the resync reads it anyway.
                pulse_at = self._due_at.get(PULSE_TIMER)
                if not self._loaded or (pulse_at is not None and pulse_at <= now):
                    pulse = await self.pulse.get()
                    due = pulse.next_pulse_at is not None and pulse.next_pulse_at <= now
                    if due and (p := plan_pulse(pulse, self.pulse.tz, now, grace, records)):
                        plans.append(p)
                fires: list[Fire] = []
                if plans:  # claimed, recorded, cursors moved: a few round trips in all
                    keys = [p.key(at) for p in plans for at, _ in p.due.skipped]
                    keys += [p.key(p.due.to_run) for p in plans if p.due.to_run]
                    won = await self.leases.acquire_many(keys, now)
                    fires, skipped, missed = self._sort(plans, won, jobs, now)
                    recorded = False
                    try:
                        if skipped or missed:
                            await self.runs.skipped_many(skipped + missed)
                        recorded = True
                        moves = [
                            (p.job_id, p.cursor, p.due.upcoming)
                            for p in plans
                            if p.job_id is not None
                        ]
                        if moves:
                            await self.jobs.store.advance_many(moves)
                        for plan in plans:
                            if plan.job_id is None:
                                await self.pulse.advance(plan.cursor, plan.due.upcoming)
                    except Exception:
                        self._hold(fires, recorded=recorded)
                        raise
                    self._claimed_fires(plans, fires, missed, jobs, now)
                # Retries, when one may be due: its moment came, something waits in
                # memory, or runs were just reclaimed (``load`` notes the stored ones).
                retry_at = self._due_at.get(RETRY_TIMER)
                retry_due = retry_at is not None and retry_at <= now
                if retry_due or reclaimed or self.retries.waiting or not self._loaded:
                    if retry_due:
                        self._due_at.pop(RETRY_TIMER, None)
                    fires += await self._retry(now, fires)
                if self.reclaim.next_check is not None:
                    self._retry_at(self.reclaim.next_check)
                # Keys still due by now were not this process's to run (another process
                # took the fire, or the job was disabled there): read where they stand.
                stale = [k for k, at in self._due_at.items() if at <= now and k != RETRY_TIMER]
                if stale:
                    await self._read_again(stale)
            except Exception as exc:
                # The fires stay due in the database: a sweep soon looks again.
                if unreachable(exc):
                    self._unreachable = True
                self._retry_at(self.clock() + self.retries.soon)
                raise
            finally:
                # Never armed in the past: what this sweep could not handle waits for
                # the retry timer or the resync rather than spinning.
                soonest = min((at for at in self._due_at.values() if at > now), default=None)
                self._timer.arm(soonest, fresh=True)
            self._last_ok, self._unreachable = now, False
        if wait:
            await asyncio.gather(*(f.task for f in fires if f.task), return_exceptions=True)
        return fires

    async def _retry(self, now: datetime, fires: list[Fire]) -> list[Fire]:
        """The retries due at ``now`` started, and the next one's moment noted; a fire
        of the same job starting in this sweep (``fires``) supersedes its retry."""
        started: list[Fire] = []
        running = {group_of(f.kind, f.job_id) for f in fires if f.action == "run"}
        for item in await self.retries.due(now, running):
            fire = Fire(item.kind, item.job_id, item.scheduled_for, item.action)
            fire.task = self._spawn(item.work)
            started.append(fire)
        if (retry_at := await self.runs.next_retry()) is not None:
            self._retry_at(retry_at)
        if self.retries.waiting:
            self._retry_at(now + self.retries.soon)
        return started

    async def _read_again(self, stale: list[str]) -> None:
        """When the keys ``stale`` are next due, read from the database."""
        ids = [key[5:] for key in stale if key.startswith("cron:")]
        for job_id, fire_at in (await self.jobs.store.next_fire_map(ids)).items():
            self._note(f"cron:{job_id}", fire_at)
        if PULSE_TIMER in stale:
            self._note(PULSE_TIMER, (await self.pulse.get()).next_pulse_at)
        for work in self.timed:
            if work.key in stale:
                self._note(work.key, await work.due_at())

    def _sort(
        self, plans: list[Plan], won: set[str], jobs: dict[str, CronJob], now: datetime
    ) -> tuple[list[Fire], list[Run], list[Run]]:
        """The fires whose claims (``won``) this process holds, and the records of those
        not to run: (fires, skipped, missed past their window)."""
        fires: list[Fire] = []
        skipped: list[Run] = []
        missed: list[Run] = []
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
                if now - moment > self.config.grace:  # the process was down or stalled
                    if plan.job_id is None:  # the next pulse looks at all since the last
                        skipped.append(Run.skipped(plan.kind, None, moment, now, reason))
                    else:
                        name = jobs[plan.job_id].name
                        late = Run.skipped(plan.kind, plan.job_id, moment, now, reason, name=name)
                        missed.append(replace(late, alert_pending=True))
                    fires.append(Fire(plan.kind, plan.job_id, moment, "missed"))
                    continue
                why: Reason = "superseded"  # a later fire inside the window runs instead
                skipped.append(Run.skipped(plan.kind, plan.job_id, moment, now, reason, why=why))
                fires.append(Fire(plan.kind, plan.job_id, moment, "skipped"))
            run = plan.due.to_run
            if run is not None and plan.key(run) in won:
                fires.append(Fire(plan.kind, plan.job_id, run, "run"))
        return fires, skipped, missed

    def _hold(self, fires: list[Fire], *, recorded: bool) -> None:
        """The claimed fires' records or cursors could not be written. The fires won are
        this process's alone: held, a later sweep starts them; one to be recorded skipped
        or missed whose record was not written (not ``recorded``) is recorded lost
        (failed, and reported) by it, never left unrecorded."""
        for fire in fires:
            if fire.action == "run":
                self.retries.hold_fire(fire.kind, fire.job_id, fire.scheduled_for, "claimed")
            elif not recorded:
                moment = fire.scheduled_for
                note = "claimed, but its record could not be written"
                self.retries.hold_fire(fire.kind, fire.job_id, moment, note, until=moment)

    def _claimed_fires(
        self,
        plans: list[Plan],
        fires: list[Fire],
        missed: list[Run],
        jobs: dict[str, CronJob],
        now: datetime,
    ) -> None:
        """After the claims are written: note when each is next due, tell the owner of
        the missed fires, start the runs won."""
        # The cursors moved as planned (compare-and-set: one another process moved
        # first is read again when its stale moment comes); a moment a change set
        # meanwhile (``job_changed``, ``pulse_changed``) is kept.
        for plan in plans:
            key = f"cron:{plan.job_id}" if plan.job_id is not None else PULSE_TIMER
            known = self._due_at.get(key)
            if known is not None and known > now:
                continue
            if plan.due.upcoming is None:
                self._due_at.pop(key, None)
            else:
                self._due_at[key] = plan.due.upcoming  # the timer is armed as the sweep ends
        if missed:  # the owner hears, once for the sweep, while the runs start
            first = next(f for f in fires if f.action == "missed")
            first.task = self._spawn(self.recorder.missed(missed, jobs))
        for fire in fires:
            if fire.action == "run":
                job = jobs[fire.job_id] if fire.job_id is not None else None
                # Waited for on stop, logged if it raises.
                fire.task = self._spawn(self.retries.launch(fire.kind, job, fire.scheduled_for))

    def _spawn(self, work: Awaitable[object]) -> asyncio.Task[object]:
        """Run ``work`` as a task (or take the task it is) the engine waits for on
        ``stop``; logged if it raises."""
        task: asyncio.Task[object] = asyncio.ensure_future(work)
        self._runs.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[object]) -> None:
        self._runs.discard(task)
        if task.cancelled() or isinstance(task.exception(), NotStarted):
            return  # a fire not started is held (``Retries.launch``)
        if task.exception() is not None:
            log.error("scheduled run raised", exc_info=task.exception())


# --- the one timer --------------------------------------------------------------------


class Timer:
    """One APScheduler ``DateTrigger`` armed for a moment (the earliest due), calling
    ``due`` when it comes, plus the periodic resync."""

    def __init__(self, clock: Clock, due: Callable[..., Awaitable[object]]) -> None:
        self.clock = clock
        self._due = due
        self._scheduler: AsyncIOScheduler | None = None
        self.at: datetime | None = None

    def start(
        self, resync: Callable[[], Awaitable[None]], seconds: float, logger: logging.Logger
    ) -> None:
        """Start APScheduler, with ``resync`` every ``seconds``."""
        self._scheduler = AsyncIOScheduler(timezone=UTC, logger=logger)
        self._scheduler.start()
        self._scheduler.add_job(
            resync,
            IntervalTrigger(seconds=seconds),
            id=RESYNC_JOB,
            coalesce=True,
            max_instances=1,
            misfire_grace_time=None,
        )
        if self.at is not None:
            at, self.at = self.at, None
            self.arm(at)

    def stop(self) -> None:
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
            self._scheduler = None
        self.at = None

    @property
    def on(self) -> bool:
        return self._scheduler is not None

    def arm(self, at: datetime | None, *, fresh: bool = False) -> None:
        """Fire at ``at`` (None: not at all), replacing the moment armed before;
        ``fresh``: even when it is the moment armed (it may have fired already)."""
        if at == self.at and not fresh:
            return
        self.at = at
        if self._scheduler is None:
            return
        if at is None:
            with contextlib.suppress(Exception):
                self._scheduler.remove_job(DUE_JOB)
            return
        # Wait as long as the injectable clock says: the same instant in production.
        delay = max(timedelta(0), at - self.clock())
        self._scheduler.add_job(
            self._due,
            DateTrigger(run_date=datetime.now(UTC) + delay),
            kwargs={"wait": False},
            id=DUE_JOB,
            replace_existing=True,
            misfire_grace_time=None,
            coalesce=True,
            # One sweeping and one waiting for it: a wake meanwhile is covered by the
            # one waiting, which sweeps after it.
            max_instances=2,
        )
