"""``CronService``: cron jobs, validated create/update/delete, and each job's next fire.

Every write goes through ``CronService`` (the ``manage_cronjob`` tool, the alert
router's "make this weekly"), so a stored job always has a valid expression and
timezone and an up-to-date ``next_fire_at``. Listeners (the engine) hear about each
change at once, so a change takes effect without a restart. The jobs are stored by
``store`` (``storage.repos.cron_jobs``), which the engine and the pulse read directly.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from channels.registry import ChannelName
from runtime.clock import Clock
from runtime.listeners import Listeners
from scheduler.backlog import window
from scheduler.cron.expression import CronError, next_fires, validate_timezone
from scheduler.cron.job import (
    CHOICES,
    INSTRUCTION_LIMIT,
    NAME_LIMIT,
    NO_LIMITS,
    UPDATABLE,
    CronJob,
    JobError,
    JobLimits,
    check_interval,
    checked_schedule,
    done_text,
    local_text,
    now_text,
    on_failure_of,
    one_time_at,
    text_field,
    which_schedule,
    zone_of,
)
from storage.records import BadRecord
from storage.repos.cron_jobs import CronJobStore, JobChange, JobSchedule, NewJob
from storage.repos.provenance import Provenance

log = logging.getLogger(__name__)
Listener = Callable[[str], Awaitable[None]]


class CronService:
    def __init__(
        self,
        store: CronJobStore[CronJob],
        clock: Clock,
        default_timezone: str | Callable[[], str],
        limits: JobLimits = NO_LIMITS,
    ) -> None:
        """``store``: the jobs (``CronJobStore(db, JobReader())``).
        ``default_timezone``: a new job's zone when it names none; a callable is the
        owner's timezone as it is now (the app's: it follows the owner's settings, read
        again by the engine's resync), a name is fixed until ``move_timezone``."""
        self._clock = clock
        self._default_timezone = default_timezone
        self.limits = limits
        """The scheduling feature passes the settings' limits; direct use has none."""
        self.listeners: Listeners[Listener] = Listeners()
        self.store = store
        """The jobs as stored, each read as a ``CronJob`` (its ``read``: ``JobReader``);
        the engine reads and moves them there directly."""

    @property
    def default_timezone(self) -> str:
        zone = self._default_timezone
        return zone if isinstance(zone, str) else zone()

    def _first_fire(self, expression: str, timezone: str) -> datetime:
        return next_fires(expression, validate_timezone(timezone), self._clock(), 1)[0]

    async def _changed(self, job_id: str) -> None:
        for listener in self.listeners:
            try:
                await listener(job_id)
            except Exception:
                log.exception("cron change listener failed for %s", job_id)

    def _schedule(
        self,
        which: str,
        cron_expression: str | None,
        run_at: str | None,
        in_minutes: int | None,
        timezone: str,
        now: datetime,
    ) -> JobSchedule:
        """The schedule of a recurring or a one-time job, checked, with its first fire."""
        if which == "cron_expression":
            expression, tz = checked_schedule(cron_expression or "", timezone)
            check_interval(expression, tz, now, self.limits.min_interval)
            first = self._first_fire(expression, tz)
            return JobSchedule("recurring", tz, first, cron_expression=expression)
        zone = zone_of(timezone)
        when = one_time_at(run_at, in_minutes, zone, now).astimezone(UTC)
        return JobSchedule("once", zone.key, when, run_at=when)

    async def create(
        self,
        *,
        name: str | None,
        instruction: str | None,
        cron_expression: str | None = None,
        run_at: str | None = None,
        in_minutes: int | None = None,
        timezone: str | None = None,
        enabled: bool = True,
        on_failure: str | None = None,
        origin_channel: str = ChannelName.CONSOLE,
        origin_chat_id: str = "owner",
        source: Provenance | None = None,
    ) -> CronJob:
        """A recurring job (``cron_expression``) or a one-time one (``run_at`` or
        ``in_minutes``); exactly one of the three. ``source``: where the instruction
        came from, when not from the owner (``CronJob.source``)."""
        name = text_field(name, "name", NAME_LIMIT)
        instruction = text_field(instruction, "instruction", INSTRUCTION_LIMIT)
        which = which_schedule(cron_expression, run_at, in_minutes) or ""
        if not which:
            raise JobError(CHOICES)
        now = self._clock()
        zone = timezone or self.default_timezone
        schedule = self._schedule(which, cron_expression, run_at, in_minutes, zone, now)
        policy = on_failure_of(on_failure)
        most = self.limits.max_jobs
        if most is not None and await self.store.pending() >= most:
            raise JobError(
                f"there are already {most} cron jobs, the most allowed; delete or merge some "
                "before creating another"
            )
        new = NewJob(
            name, instruction, schedule, enabled, policy, origin_channel, origin_chat_id, now,
            source=source,
        )  # fmt: skip
        job = await self.store.insert(new, lambda: secrets.token_hex(4))
        if job is None:
            raise JobError("could not allocate a job id; try again")
        await self._changed(job.id)
        return job

    async def get(self, job_id: str | None) -> CronJob:
        if not job_id:
            raise JobError("job_id is required; use action 'list' to see the ids")
        try:
            job = await self.store.get(job_id)
        except BadRecord as exc:
            raise JobError(str(exc)) from None
        if job is None:
            raise JobError(f"no cron job with id {job_id!r}; use action 'list' to see the ids")
        return job

    async def list_jobs(self, limit: int = 0) -> list[CronJob]:
        """Jobs, pending first then done (one-time jobs that ran), oldest first."""
        return await self.store.all(limit)

    async def update(
        self,
        job_id: str | None,
        *,
        name: str | None = None,
        instruction: str | None = None,
        cron_expression: str | None = None,
        run_at: str | None = None,
        in_minutes: int | None = None,
        timezone: str | None = None,
        enabled: bool | None = None,
        on_failure: str | None = None,
        by: str | None = None,
        source: Provenance | None = None,
    ) -> CronJob:
        """Change any of the fields; a new schedule or re-enabling recomputes the next fire
        from now, so fires missed while paused are not replayed. ``cron_expression`` makes
        a one-time job recurring, ``run_at``/``in_minutes`` a recurring one one-time.
        ``by`` names who changed it when not the usual callers (``dashboard``), kept as
        ``updated_by``. A new ``instruction`` takes ``source`` as its own (None: the
        owner's words)."""
        job = await self.get(job_id)
        if job.done:
            raise JobError(done_text(job))
        now = self._clock()
        which = which_schedule(cron_expression, run_at, in_minutes)
        if which is None and timezone is not None and not job.once:
            which, cron_expression = "cron_expression", job.cron_expression
        schedule: JobSchedule | None = None
        zone: str | None = None
        if which is not None:
            schedule = self._schedule(
                which, cron_expression, run_at, in_minutes, timezone or job.timezone, now
            )
        elif timezone is not None:  # a one-time job keeps its instant; only shown anew
            zone = zone_of(timezone).key
        resumed = enabled and not job.enabled and schedule is None
        change = JobChange(
            at=now,
            name=text_field(name, "name", NAME_LIMIT) if name is not None else None,
            instruction=(
                text_field(instruction, "instruction", INSTRUCTION_LIMIT)
                if instruction is not None
                else None
            ),
            source=source if instruction is not None else None,
            schedule=schedule,
            timezone=zone,
            on_failure=on_failure_of(on_failure) if on_failure is not None else None,
            enabled=bool(enabled) if enabled is not None else None,
            next_fire_at=self._resumed_fire(job, now) if resumed else None,
            by=by,
        )
        if change.empty:
            raise JobError(f"nothing to update: give {UPDATABLE}")
        try:
            changed = await self.store.change(job.id, change)
        except BadRecord as exc:
            raise JobError(str(exc)) from None
        if changed is None:
            raise JobError(f"cron job {job.id!r} was deleted meanwhile")
        await self._changed(job.id)
        return changed

    def _resumed_fire(self, job: CronJob, now: datetime) -> datetime:
        if not job.once:
            return self._first_fire(job.cron_expression, job.timezone)
        if job.run_at is None or job.run_at <= now:
            due = local_text(job.run_at, zone_of(job.timezone)) if job.run_at else "never"
            raise JobError(
                f"one-time job {job.id!r} was due at {due}, which has passed; "
                f"{now_text(now, zone_of(job.timezone))}; give a new run_at or in_minutes"
            )
        return job.run_at

    async def toggle(
        self, job_id: str | None, enabled: bool | None = None, *, by: str | None = None
    ) -> CronJob:
        job = await self.get(job_id)
        flipped = (not job.enabled) if enabled is None else enabled
        return await self.update(job.id, enabled=flipped, by=by)

    async def delete(self, job_id: str | None, *, by: str | None = None) -> CronJob:
        job = await self.get(job_id)
        await self.store.delete(job.id)
        log.info("cron job %s (%s) deleted by %s", job.id, job.name, by or "model")
        await self._changed(job.id)
        return job

    async def move_timezone(self, old: str, new: str) -> list[str]:
        """The owner's timezone changed: recurring jobs in ``old`` move to ``new``, each
        with its next fire recomputed (``update``); pending one-time jobs in ``old`` keep
        their moment and are shown in ``new`` from now on (a later ``run_at`` without an
        offset is read on the owner's new clock). The ids of the jobs moved."""
        if isinstance(self._default_timezone, str):  # else it follows the owner already
            self._default_timezone = new
        if old == new:
            return []
        moved: list[str] = []
        for job_id in await self.store.in_zone(old):
            try:
                await self.update(job_id, timezone=new)
            except JobError as exc:
                log.warning("cron job %s kept timezone %s: %s", job_id, old, exc)
                continue
            moved.append(job_id)
        return moved

    # --- one-time jobs: done, recovered, pruned ---------------------------------------

    async def finish_once(self, job_id: str, run_at: datetime, status: str, now: datetime) -> bool:
        """Keep a one-time job as done after its run for ``run_at`` is over. Only once,
        and not when it was given a new time meanwhile."""
        done = await self.store.finish_once(job_id, run_at, status, now)
        if done:
            await self._changed(job_id)
        return done

    async def restore_once(self, job_id: str, run_at: datetime) -> None:
        """Put back the fire of a one-time job whose claim left no run behind."""
        await self.store.restore_once(job_id, run_at)
        await self._changed(job_id)

    async def count(self) -> int:
        """How many jobs there are, done one-time jobs included."""
        return await self.store.count()

    async def fires_within(
        self, start: datetime, end: datetime, limit: int = 20
    ) -> list[tuple[datetime, CronJob]]:
        """Enabled jobs' fires in ``(start, end]``, soonest first, at most ``limit``."""
        found: list[tuple[datetime, CronJob]] = []
        for job in await self.store.due_by(end):
            try:
                times = fires_window(job, start, end, limit)
            except CronError:
                times = []
            found.extend((moment, job) for moment in times)
        found.sort(key=lambda item: item[0])
        return found[:limit]


def fires_window(job: CronJob, start: datetime, end: datetime, limit: int = 200) -> list[datetime]:
    """A job's fires in ``(start, end]``; a job firing too often yields its first ``limit``."""
    return window(job.next_fires, start, end, limit)
