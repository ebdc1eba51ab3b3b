"""``CronService``: cron jobs in ``cronjobs``, validated create/update/delete, and each
job's next fire.

Every write goes through ``CronService`` (the ``manage_cronjob`` tool, the alert
router's "make this weekly"), so a stored job always has a valid expression and
timezone and an up-to-date ``next_fire_at``. Listeners (the engine) hear about each
change at once, so a change takes effect without a restart.
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

from pymongo import ReturnDocument, UpdateOne
from pymongo.asynchronous.database import AsyncDatabase

from channels.registry import ChannelName
from runtime.clock import Clock
from runtime.listeners import Listeners
from scheduler.backlog import window
from scheduler.cron.expression import CronError, Schedule, next_fires, validate_timezone
from scheduler.cron.job import (
    CHOICES,
    DONE_KEPT,
    INSTRUCTION_LIMIT,
    NAME_LIMIT,
    NO_LIMITS,
    PENDING,
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
from storage import collections as c
from storage import retry
from storage.records import BadRecord, Doc, each, moment, parsed
from storage.repos.provenance import Provenance

log = logging.getLogger(__name__)
Listener = Callable[[str], Awaitable[None]]


class CronService:
    def __init__(
        self,
        db: AsyncDatabase[Doc],
        clock: Clock,
        default_timezone: str | Callable[[], str],
        limits: JobLimits = NO_LIMITS,
    ) -> None:
        """``default_timezone``: a new job's zone when it names none; a callable is the
        owner's timezone as it is now (the app's: it follows the owner's settings, read
        again by the engine's resync), a name is fixed until ``move_timezone``."""
        self._coll = db[c.CRONJOBS]
        self._clock = clock
        self._default_timezone = default_timezone
        self.limits = limits
        """The scheduling feature passes the settings' limits; direct use has none."""
        self.listeners: Listeners[Listener] = Listeners()
        self._schedule_of = functools.lru_cache(maxsize=1024)(Schedule.of)
        """Schedules checked once per process, not at every read of their jobs (a
        stored expression was checked when it was written)."""

    @property
    def default_timezone(self) -> str:
        zone = self._default_timezone
        return zone if isinstance(zone, str) else zone()

    def _job(self, doc: Doc) -> CronJob:
        return CronJob.from_doc(doc, self._schedule_of)

    def _first_fire(self, expression: str, timezone: str) -> datetime:
        return next_fires(expression, validate_timezone(timezone), self._clock(), 1)[0]

    async def _changed(self, job_id: str) -> None:
        for listener in self.listeners:
            try:
                await listener(job_id)
            except Exception:
                log.exception("cron change listener failed for %s", job_id)

    def _schedule_fields(
        self,
        which: str,
        cron_expression: str | None,
        run_at: str | None,
        in_minutes: int | None,
        timezone: str,
        now: datetime,
    ) -> Doc:
        """The stored schedule of a recurring or a one-time job, with its first fire."""
        if which == "cron_expression":
            expression, tz = checked_schedule(cron_expression or "", timezone)
            check_interval(expression, tz, now, self.limits.min_interval)
            first = self._first_fire(expression, tz)
            return {"kind": "recurring", "cron_expression": expression, "timezone": tz,
                    "next_fire_at": first}  # fmt: skip
        zone = zone_of(timezone)
        when = one_time_at(run_at, in_minutes, zone, now).astimezone(UTC)
        return {"kind": "once", "run_at": when, "timezone": zone.key, "next_fire_at": when}

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
        schedule = self._schedule_fields(which, cron_expression, run_at, in_minutes, zone, now)
        policy = on_failure_of(on_failure)
        most = self.limits.max_jobs
        if most is not None and await self._coll.count_documents(PENDING) >= most:
            raise JobError(
                f"there are already {most} cron jobs, the most allowed; delete or merge some "
                "before creating another"
            )
        doc: Doc = {
            "name": name,
            "instruction": instruction,
            **schedule,
            "enabled": enabled,
            "on_failure": policy,
            "origin_channel": origin_channel,
            "origin_chat_id": origin_chat_id,
            "created_at": now,
            "updated_at": now,
            **({"source": source.to_doc()} if source else {}),
        }
        if not await retry.insert_new(self._coll, doc, lambda: secrets.token_hex(4)):
            raise JobError("could not allocate a job id; try again")
        await self._changed(doc["_id"])
        return self._job(doc)

    def _read(self, doc: Doc) -> CronJob:
        """One stored job, or a JobError saying it cannot be read (logged)."""
        try:
            return self._job(doc)
        except (BadRecord, KeyError) as exc:
            log.warning("cron job %r does not parse: %s", doc.get("_id"), exc)
            unread = f"cron job {doc.get('_id')!r} is stored in a form that cannot be read"
            raise JobError(unread) from None

    async def get(self, job_id: str | None) -> CronJob:
        if not job_id:
            raise JobError("job_id is required; use action 'list' to see the ids")
        doc = await self._coll.find_one({"_id": job_id})
        if doc is None:
            raise JobError(f"no cron job with id {job_id!r}; use action 'list' to see the ids")
        return self._read(doc)

    async def list_jobs(self, limit: int = 0) -> list[CronJob]:
        """Jobs, pending first then done (one-time jobs that ran), oldest first."""
        order = [("done_at", 1), ("created_at", 1), ("_id", 1)]
        cursor = self._coll.find({}, sort=order, limit=limit)
        return each(await cursor.to_list(), self._job, "cron job")

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
        fields: Doc = {}
        unset: Doc = {}
        if name is not None:
            fields["name"] = text_field(name, "name", NAME_LIMIT)
        if instruction is not None:
            fields["instruction"] = text_field(instruction, "instruction", INSTRUCTION_LIMIT)
        which = which_schedule(cron_expression, run_at, in_minutes)
        if which is None and timezone is not None and not job.once:
            which, cron_expression = "cron_expression", job.cron_expression
        if which is not None:
            zone = timezone or job.timezone
            fields.update(
                self._schedule_fields(which, cron_expression, run_at, in_minutes, zone, now)
            )
            unset = {"run_at": ""} if which == "cron_expression" else {"cron_expression": ""}
        elif timezone is not None:  # a one-time job keeps its instant; only shown anew
            fields["timezone"] = zone_of(timezone).key
        if on_failure is not None:
            fields["on_failure"] = on_failure_of(on_failure)
        if enabled is not None:
            fields["enabled"] = bool(enabled)
        if enabled and not job.enabled and "next_fire_at" not in fields:
            fields["next_fire_at"] = self._resumed_fire(job, now)
        if not fields:
            raise JobError(f"nothing to update: give {UPDATABLE}")
        if instruction is not None:  # the new instruction's own origin
            if source:
                fields["source"] = source.to_doc()
            else:
                unset = {**unset, "source": ""}
        fields["updated_at"] = now
        if by:  # who made the latest change, when not the usual callers
            fields["updated_by"] = by
        else:
            unset = {**unset, "updated_by": ""}
        change: Doc = {"$set": fields, **({"$unset": unset} if unset else {})}
        doc = await retry.retried(  # $set by _id: safe to repeat
            lambda: self._coll.find_one_and_update(
                {"_id": job.id}, change, return_document=ReturnDocument.AFTER
            ),
            "update a cron job",
        )
        if doc is None:
            raise JobError(f"cron job {job.id!r} was deleted meanwhile")
        await self._changed(job.id)
        return self._read(doc)

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
        await retry.retried(lambda: self._coll.delete_one({"_id": job.id}), "delete a cron job")
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
        recurring = {"cron_expression": {"$type": "string"}}
        query = {"timezone": old, "$or": [recurring, {"kind": "once", **PENDING}]}
        ids = [str(doc["_id"]) async for doc in self._coll.find(query, projection={"_id": 1})]
        moved: list[str] = []
        for job_id in ids:
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
        query: Doc = {"_id": job_id, "kind": "once", "run_at": run_at, **PENDING}
        done: Doc = {"enabled": False, "done_at": now, "last_status": status, "updated_at": now}
        done.update(next_fire_at=None, prune_at=now + DONE_KEPT)
        result = await retry.retried(  # compare-and-set: a repeat changes nothing
            lambda: self._coll.update_one(query, {"$set": done}), "mark a one-time job done"
        )
        if result.modified_count:
            await self._changed(job_id)
        return bool(result.modified_count)

    async def stranded_once(self) -> list[CronJob]:
        """Enabled one-time jobs whose fire was claimed (no next fire) but not yet done."""
        query = {"kind": "once", "enabled": True, "next_fire_at": None, **PENDING}
        return each(await self._coll.find(query).to_list(), self._job, "cron job")

    async def restore_once(self, job_id: str, run_at: datetime) -> None:
        """Put back the fire of a one-time job whose claim left no run behind."""
        query: Doc = {"_id": job_id, "run_at": run_at, "next_fire_at": None, **PENDING}
        await retry.retried(
            lambda: self._coll.update_one(query, {"$set": {"next_fire_at": run_at}}),
            "restore a one-time job",
        )
        await self._changed(job_id)

    async def prune_done(self, now: datetime) -> int:
        """Remove one-time jobs done more than ``DONE_KEPT`` ago."""
        result = await retry.retried(
            lambda: self._coll.delete_many({"prune_at": {"$lte": now}}), "prune done jobs"
        )
        return int(result.deleted_count)

    # --- for the engine and the pulse -------------------------------------------------

    async def enabled_jobs(self, due_by: datetime | None = None) -> list[CronJob]:
        query: Doc = {"enabled": True}
        if due_by is not None:
            query["next_fire_at"] = {"$lte": due_by}
        return each(await self._coll.find(query).to_list(), self._job, "cron job")

    def advance_many(
        self, moves: Sequence[tuple[str, datetime | None, datetime | None]]
    ) -> Awaitable[object]:
        """Move each job's next fire from its expected value to a new one, in one round
        trip; a job changed meanwhile (edited, or advanced by another process) is left.
        The write, for the caller to await (a plain call: the engine's sweep waits in
        the driver alone); ``moves`` holds one at least."""
        if not moves:
            raise ValueError("advance_many: no job to move")
        updates = [
            UpdateOne({"_id": job_id, "next_fire_at": old}, {"$set": {"next_fire_at": new}})
            for job_id, old, new in moves
        ]
        # Compare-and-set: a repeat finds the cursor already moved and changes nothing.
        return retry.retried(
            lambda: self._coll.bulk_write(updates, ordered=False), "advance cron jobs"
        )

    async def armed_times(self) -> dict[str, datetime | None]:
        """Every enabled job's next fire, without the rest of the document (cheap resync)."""
        cursor = self._coll.find({"enabled": True}, projection={"next_fire_at": 1})
        return {str(doc["_id"]): _next_fire(doc) async for doc in cursor}

    async def count(self) -> int:
        return await self._coll.count_documents({})

    async def next_fire_map(self, job_ids: list[str]) -> dict[str, datetime | None]:
        """Each enabled job's stored next fire; disabled or deleted jobs map to None."""
        found: dict[str, datetime | None] = dict.fromkeys(job_ids)
        query = {"_id": {"$in": job_ids}, "enabled": True}
        async for doc in self._coll.find(query, projection={"next_fire_at": 1}):
            found[str(doc["_id"])] = _next_fire(doc)
        return found

    async def fires_within(
        self, start: datetime, end: datetime, limit: int = 20
    ) -> list[tuple[datetime, CronJob]]:
        """Enabled jobs' fires in ``(start, end]``, soonest first, at most ``limit``."""
        found: list[tuple[datetime, CronJob]] = []
        query = {"enabled": True, "next_fire_at": {"$lte": end}}
        async for doc in self._coll.find(query):
            job = parsed(doc, self._job, "cron job")
            if job is None:
                continue
            try:
                times = fires_window(job, start, end, limit)
            except CronError:
                times = []
            found.extend((moment, job) for moment in times)
        found.sort(key=lambda item: item[0])
        return found[:limit]


def _next_fire(doc: Doc) -> datetime | None:
    """A job's stored next fire; one that is not a date is none (logged)."""
    try:
        return moment(doc, "next_fire_at")
    except BadRecord as exc:
        log.warning("cron job %r: %s; it is not armed", doc.get("_id"), exc)
        return None


def fires_window(job: CronJob, start: datetime, end: datetime, limit: int = 200) -> list[datetime]:
    """A job's fires in ``(start, end]``; a job firing too often yields its first ``limit``."""
    return window(job.next_fires, start, end, limit)
