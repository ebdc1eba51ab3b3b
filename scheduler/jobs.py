"""Cron jobs in ``cronjobs``: validated create/update/delete, and each job's next fire.

Every write goes through ``CronService`` (the ``manage_cronjob`` tool, the alert
router's "make this weekly"), so a stored job always has a valid expression and
timezone and an up-to-date ``next_fire_at``. Listeners (the engine) hear about each
change at once, so a change takes effect without a restart.
"""

from __future__ import annotations

import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo import ReturnDocument, UpdateOne
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from scheduler.backlog import window
from scheduler.cron import CronError, next_fires, validate_cron, validate_timezone
from storage import collections as c
from storage import retry

log = logging.getLogger(__name__)
Doc = dict[str, Any]
Clock = Callable[[], datetime]
Listener = Callable[[str], Awaitable[None]]
NAME_LIMIT = 100
INSTRUCTION_LIMIT = 2_000


class JobError(ValueError):
    """A job request that cannot be done; the message says why (shown to the model)."""


@dataclass(frozen=True)
class CronJob:
    id: str
    name: str
    instruction: str
    cron_expression: str
    timezone: str
    enabled: bool
    origin_channel: str
    origin_chat_id: str
    created_at: datetime
    next_fire_at: datetime | None

    @classmethod
    def from_doc(cls, doc: Doc) -> CronJob:
        return cls(
            id=str(doc["_id"]),
            name=doc.get("name", ""),
            instruction=doc.get("instruction", ""),
            cron_expression=doc["cron_expression"],
            timezone=doc.get("timezone", "UTC"),
            enabled=bool(doc.get("enabled", True)),
            origin_channel=doc.get("origin_channel", "console"),
            origin_chat_id=str(doc.get("origin_chat_id", "owner")),
            created_at=_aware(doc.get("created_at")) or datetime.min.replace(tzinfo=UTC),
            next_fire_at=_aware(doc.get("next_fire_at")),
        )

    def next_fires(self, after: datetime, count: int = 3) -> list[datetime]:
        """The next ``count`` fires in the job's own timezone."""
        return next_fires(self.cron_expression, validate_timezone(self.timezone), after, count)


def _aware(value: Any) -> datetime | None:
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _text(value: str | None, what: str, limit: int) -> str:
    text = (value or "").strip()
    if not text:
        raise JobError(f"{what} is required")
    if len(text) > limit:
        raise JobError(f"{what} is {len(text)} characters; the limit is {limit}")
    return text


def _schedule(expression: str, timezone: str) -> tuple[str, str]:
    try:
        return validate_cron(expression), validate_timezone(timezone).key
    except CronError as exc:
        raise JobError(str(exc)) from None


@dataclass(frozen=True)
class JobLimits:
    """What the model may set up (DESIGN.md, limits); ``None`` fields are unlimited."""

    max_jobs: int | None = 50
    min_interval: timedelta = timedelta(minutes=5)


NO_LIMITS = JobLimits(max_jobs=None, min_interval=timedelta(0))


def _check_interval(expression: str, timezone: str, now: datetime, least: timedelta) -> None:
    """A recurring job fires at most every ``least`` (any two fires in the next week)."""
    if least <= timedelta(0):
        return
    fires = next_fires(expression, validate_timezone(timezone), now, 64)
    gaps = [b - a for a, b in itertools.pairwise(fires)]
    if gaps and min(gaps) < least:
        shortest = int(min(gaps).total_seconds() // 60)
        most = int(least.total_seconds() // 60)
        raise JobError(
            f"{expression!r} fires {shortest} minute(s) apart; a recurring job may fire at "
            f"most every {most} minutes, e.g. '*/{most} * * * *'"
        )


class CronService:
    def __init__(
        self,
        db: AsyncDatabase[Doc],
        clock: Clock,
        default_timezone: str,
        limits: JobLimits = NO_LIMITS,
    ) -> None:
        self._coll = db[c.CRONJOBS]
        self._clock = clock
        self.default_timezone = default_timezone
        self.limits = limits
        """The scheduling feature passes the settings' limits; direct use has none."""
        self.listeners: list[Listener] = []

    def _first_fire(self, expression: str, timezone: str) -> datetime:
        return next_fires(expression, validate_timezone(timezone), self._clock(), 1)[0]

    async def _changed(self, job_id: str) -> None:
        for listener in self.listeners:
            try:
                await listener(job_id)
            except Exception:
                log.exception("cron change listener failed for %s", job_id)

    async def create(
        self,
        *,
        name: str | None,
        instruction: str | None,
        cron_expression: str | None,
        timezone: str | None = None,
        enabled: bool = True,
        origin_channel: str = "console",
        origin_chat_id: str = "owner",
    ) -> CronJob:
        name = _text(name, "name", NAME_LIMIT)
        instruction = _text(instruction, "instruction", INSTRUCTION_LIMIT)
        if not cron_expression:
            raise JobError("cron_expression is required, e.g. '0 9 * * 1-5'")
        expression, tz = _schedule(cron_expression, timezone or self.default_timezone)
        now = self._clock()
        _check_interval(expression, tz, now, self.limits.min_interval)
        most = self.limits.max_jobs
        if most is not None and await self._coll.count_documents({}) >= most:
            raise JobError(
                f"there are already {most} cron jobs, the most allowed; delete or merge some "
                "before creating another"
            )
        doc: Doc = {
            "name": name,
            "instruction": instruction,
            "cron_expression": expression,
            "timezone": tz,
            "enabled": enabled,
            "origin_channel": origin_channel,
            "origin_chat_id": origin_chat_id,
            "created_at": now,
            "updated_at": now,
            "next_fire_at": self._first_fire(expression, tz),
        }
        for _ in range(5):
            doc["_id"] = secrets.token_hex(4)
            try:
                await retry.insert(self._coll, doc)  # a retry finds its own id stored
                break
            except DuplicateKeyError:
                continue
        else:
            raise JobError("could not allocate a job id; try again")
        await self._changed(doc["_id"])
        return CronJob.from_doc(doc)

    async def get(self, job_id: str | None) -> CronJob:
        if not job_id:
            raise JobError("job_id is required; use action 'list' to see the ids")
        doc = await self._coll.find_one({"_id": job_id})
        if doc is None:
            raise JobError(f"no cron job with id {job_id!r}; use action 'list' to see the ids")
        return CronJob.from_doc(doc)

    async def list_jobs(self, limit: int = 0) -> list[CronJob]:
        """Jobs, oldest first; ``limit`` 0 means all."""
        cursor = self._coll.find({}, sort=[("created_at", 1), ("_id", 1)], limit=limit)
        return [CronJob.from_doc(d) async for d in cursor]

    async def update(
        self,
        job_id: str | None,
        *,
        name: str | None = None,
        instruction: str | None = None,
        cron_expression: str | None = None,
        timezone: str | None = None,
        enabled: bool | None = None,
    ) -> CronJob:
        """Change any of the fields; a new schedule or re-enabling recomputes the next fire
        from now, so fires missed while paused are not replayed."""
        job = await self.get(job_id)
        fields: Doc = {}
        if name is not None:
            fields["name"] = _text(name, "name", NAME_LIMIT)
        if instruction is not None:
            fields["instruction"] = _text(instruction, "instruction", INSTRUCTION_LIMIT)
        if cron_expression is not None or timezone is not None:
            expression, tz = _schedule(
                cron_expression or job.cron_expression, timezone or job.timezone
            )
            _check_interval(expression, tz, self._clock(), self.limits.min_interval)
            fields.update(cron_expression=expression, timezone=tz)
        if enabled is not None:
            fields["enabled"] = bool(enabled)
        if "cron_expression" in fields or (enabled and not job.enabled):
            fields["next_fire_at"] = self._first_fire(
                fields.get("cron_expression", job.cron_expression),
                fields.get("timezone", job.timezone),
            )
        if not fields:
            raise JobError(
                "nothing to update: give name, instruction, cron_expression, timezone or enabled"
            )
        fields["updated_at"] = self._clock()
        doc = await retry.retried(  # $set by _id: safe to repeat
            lambda: self._coll.find_one_and_update(
                {"_id": job.id}, {"$set": fields}, return_document=ReturnDocument.AFTER
            ),
            "update a cron job",
        )
        if doc is None:
            raise JobError(f"cron job {job.id!r} was deleted meanwhile")
        await self._changed(job.id)
        return CronJob.from_doc(doc)

    async def toggle(self, job_id: str | None, enabled: bool | None = None) -> CronJob:
        job = await self.get(job_id)
        return await self.update(job.id, enabled=(not job.enabled) if enabled is None else enabled)

    async def delete(self, job_id: str | None) -> CronJob:
        job = await self.get(job_id)
        await retry.retried(lambda: self._coll.delete_one({"_id": job.id}), "delete a cron job")
        await self._changed(job.id)
        return job

    # --- for the engine and the pulse -------------------------------------------------

    async def enabled_jobs(self, due_by: datetime | None = None) -> list[CronJob]:
        query: Doc = {"enabled": True}
        if due_by is not None:
            query["next_fire_at"] = {"$lte": due_by}
        return [CronJob.from_doc(d) async for d in self._coll.find(query)]

    async def advance_many(self, moves: list[tuple[str, datetime | None, datetime | None]]) -> None:
        """Move each job's next fire from its expected value to a new one, in one round
        trip; a job changed meanwhile (edited, or advanced by another process) is left."""
        if moves:
            updates = [
                UpdateOne({"_id": job_id, "next_fire_at": old}, {"$set": {"next_fire_at": new}})
                for job_id, old, new in moves
            ]
            # Compare-and-set: a repeat finds the cursor already moved and changes nothing.
            await retry.retried(
                lambda: self._coll.bulk_write(updates, ordered=False), "advance cron jobs"
            )

    async def armed_times(self) -> dict[str, datetime | None]:
        """Every enabled job's next fire, without the rest of the document (cheap resync)."""
        cursor = self._coll.find({"enabled": True}, projection={"next_fire_at": 1})
        return {str(doc["_id"]): _aware(doc.get("next_fire_at")) async for doc in cursor}

    async def count(self) -> int:
        return await self._coll.count_documents({})

    async def next_fire_map(self, job_ids: list[str]) -> dict[str, datetime | None]:
        """Each enabled job's stored next fire; disabled or deleted jobs map to None."""
        found: dict[str, datetime | None] = dict.fromkeys(job_ids)
        query = {"_id": {"$in": job_ids}, "enabled": True}
        async for doc in self._coll.find(query, projection={"next_fire_at": 1}):
            found[str(doc["_id"])] = _aware(doc.get("next_fire_at"))
        return found

    async def fires_within(
        self, start: datetime, end: datetime, limit: int = 20
    ) -> list[tuple[datetime, CronJob]]:
        """Enabled jobs' fires in ``(start, end]``, soonest first, at most ``limit``."""
        found: list[tuple[datetime, CronJob]] = []
        query = {"enabled": True, "next_fire_at": {"$lte": end}}
        async for doc in self._coll.find(query):
            job = CronJob.from_doc(doc)
            try:
                times = fires_window(job, start, end, limit)
            except CronError:
                times = []
            found.extend((moment, job) for moment in times)
        found.sort(key=lambda item: item[0])
        return found[:limit]


def fires_window(job: CronJob, start: datetime, end: datetime, limit: int = 200) -> list[datetime]:
    """A job's fires in ``(start, end]``; a job firing too often yields its first ``limit``."""
    tz = validate_timezone(job.timezone)
    return window(
        lambda after, count: next_fires(job.cron_expression, tz, after, count), start, end, limit
    )
