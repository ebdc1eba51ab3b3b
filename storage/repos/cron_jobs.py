"""Cron jobs in ``cronjobs``: read here, once, into a typed ``StoredJob`` and written
from typed values (``NewJob``, ``JobChange``, a cursor's move).

The scheduler makes its ``CronJob`` (the job with its schedule checked) from each
``StoredJob`` with the ``read`` it gives the store, so every job read comes out ready
for the engine; the rules of the fields (what a valid expression or zone is) are the
scheduler's (``scheduler.cron.job``), checked before anything is written here. A stored
job that does not parse is logged and skipped in a list, a ``BadRecord`` when asked for
by id (``storage.records``).

Every write survives one dropped connection (``storage.retry``): an insert under a
fresh id, ``$set`` by ``_id``, or a compare-and-set a repeat finds already done.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, Literal, TypeVar, cast, get_args

from pymongo import ReturnDocument, UpdateOne
from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c
from storage import retry
from storage.records import BadRecord, Doc, each, maybe_text, moment, parsed, text
from storage.repos.provenance import Provenance

log = logging.getLogger(__name__)
JobKind = Literal["recurring", "once"]
OnFailure = Literal["warning", "critical", "none"]
ON_FAILURE: tuple[str, ...] = get_args(OnFailure)
DONE_KEPT = timedelta(days=30)
"""How long a done one-time job stays listed before it is pruned."""
PENDING: Mapping[str, Any] = {"done_at": {"$exists": False}}
"""Jobs not done (one-time jobs that ran are): the ones that count toward the limit."""
CONSOLE = "console"
"""The channel of a job stored without one (``channels.registry.ChannelName.CONSOLE``)."""


@dataclass(frozen=True)
class StoredJob:
    """A cron job as stored."""

    id: str
    name: str
    instruction: str
    cron_expression: str
    """Empty for a one-time job."""
    timezone: str
    enabled: bool
    origin_channel: str
    origin_chat_id: str
    created_at: datetime
    next_fire_at: datetime | None
    kind: JobKind = "recurring"
    run_at: datetime | None = None
    on_failure: OnFailure = "warning"
    done_at: datetime | None = None
    last_status: str | None = None
    updated_by: str | None = None
    """Who made the latest change when not the model or the owner's chat (``dashboard``)."""
    source: Provenance | None = None
    """Where ``instruction`` came from when a run that had read outside text wrote it
    (the owner approving it): that text's sources and the owner's code. Its runs count
    as having read outside text. None when the instruction is the owner's own words."""

    @property
    def once(self) -> bool:
        return self.kind == "once"

    @property
    def done(self) -> bool:
        return self.done_at is not None

    def stored(self) -> dict[str, Any]:
        """Its fields by name (to build a record that extends it: ``CronJob``)."""
        return {f.name: getattr(self, f.name) for f in fields(StoredJob)}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> StoredJob:
        """The stored job; a field of the wrong type is a ``BadRecord``."""
        policy = doc.get("on_failure")
        return cls(
            id=str(doc["_id"]),
            name=text(doc, "name"),
            instruction=text(doc, "instruction"),
            cron_expression=text(doc, "cron_expression"),
            timezone=text(doc, "timezone", "UTC"),
            enabled=bool(doc.get("enabled", True)),
            origin_channel=text(doc, "origin_channel", CONSOLE),
            origin_chat_id=str(doc.get("origin_chat_id", "owner")),
            created_at=moment(doc, "created_at") or datetime.min.replace(tzinfo=UTC),
            next_fire_at=moment(doc, "next_fire_at"),
            kind="once" if doc.get("kind") == "once" else "recurring",
            run_at=moment(doc, "run_at"),
            on_failure=cast(OnFailure, policy) if policy in ON_FAILURE else "warning",
            done_at=moment(doc, "done_at"),
            last_status=maybe_text(doc, "last_status"),
            updated_by=maybe_text(doc, "updated_by"),
            source=Provenance.from_doc(doc.get("source")),
        )


@dataclass(frozen=True)
class JobSchedule:
    """A job's schedule as written, checked: recurring (``cron_expression``) or
    one-time (``run_at``), its zone and its first fire."""

    kind: JobKind
    timezone: str
    next_fire_at: datetime
    cron_expression: str | None = None
    run_at: datetime | None = None

    def to_doc(self) -> Doc:
        doc: Doc = {"kind": self.kind}
        if self.kind == "recurring":
            doc["cron_expression"] = self.cron_expression
        else:
            doc["run_at"] = self.run_at
        return doc | {"timezone": self.timezone, "next_fire_at": self.next_fire_at}

    @property
    def dropped(self) -> str:
        """The field of the other kind of schedule, removed when this one is written."""
        return "run_at" if self.kind == "recurring" else "cron_expression"


@dataclass(frozen=True)
class NewJob:
    """A job to create, its fields checked."""

    name: str
    instruction: str
    schedule: JobSchedule
    enabled: bool
    on_failure: OnFailure
    origin_channel: str
    origin_chat_id: str
    created_at: datetime
    source: Provenance | None = None

    def to_doc(self) -> Doc:
        doc: Doc = {"name": self.name, "instruction": self.instruction}
        doc |= self.schedule.to_doc()
        doc |= {"enabled": self.enabled, "on_failure": self.on_failure}
        doc |= {"origin_channel": self.origin_channel, "origin_chat_id": self.origin_chat_id}
        doc |= {"created_at": self.created_at, "updated_at": self.created_at}
        if self.source:
            doc["source"] = self.source.to_doc()
        return doc

    def as_stored(self, job_id: str) -> StoredJob:
        schedule = self.schedule
        return StoredJob(
            id=job_id,
            name=self.name,
            instruction=self.instruction,
            cron_expression=schedule.cron_expression or "",
            timezone=schedule.timezone,
            enabled=self.enabled,
            origin_channel=self.origin_channel,
            origin_chat_id=self.origin_chat_id,
            created_at=self.created_at,
            next_fire_at=schedule.next_fire_at,
            kind=schedule.kind,
            run_at=schedule.run_at,
            on_failure=self.on_failure,
            source=self.source or None,
        )


@dataclass(frozen=True)
class JobChange:
    """A change to a job, its fields checked (None: left as it is)."""

    at: datetime
    name: str | None = None
    instruction: str | None = None
    source: Provenance | None = None
    """The new ``instruction``'s origin (None: the owner's words); only with one."""
    schedule: JobSchedule | None = None
    timezone: str | None = None
    """A one-time job shown in another zone (its moment kept)."""
    on_failure: OnFailure | None = None
    enabled: bool | None = None
    next_fire_at: datetime | None = None
    """A job turned on again: its next fire from now."""
    by: str | None = None
    """Who made it when not the usual callers (``dashboard``); else none is kept."""

    @property
    def empty(self) -> bool:
        """Nothing to change (``at`` and ``by`` are bookkeeping)."""
        given = (self.name, self.instruction, self.schedule, self.timezone, self.on_failure)
        return all(v is None for v in (*given, self.enabled, self.next_fire_at))

    def to_update(self) -> Doc:
        fields: Doc = {}
        unset: Doc = {}
        if self.name is not None:
            fields["name"] = self.name
        if self.instruction is not None:
            fields["instruction"] = self.instruction
            if self.source:
                fields["source"] = self.source.to_doc()
            else:
                unset["source"] = ""
        if self.schedule is not None:
            fields |= self.schedule.to_doc()
            unset[self.schedule.dropped] = ""
        elif self.timezone is not None:
            fields["timezone"] = self.timezone
        if self.on_failure is not None:
            fields["on_failure"] = self.on_failure
        if self.enabled is not None:
            fields["enabled"] = self.enabled
        if self.next_fire_at is not None and self.schedule is None:
            fields["next_fire_at"] = self.next_fire_at
        fields["updated_at"] = self.at
        if self.by:
            fields["updated_by"] = self.by
        else:
            unset["updated_by"] = ""
        return {"$set": fields, **({"$unset": unset} if unset else {})}


J = TypeVar("J", bound=StoredJob)
Move = tuple[str, datetime | None, datetime | None]
"""A cursor's move: (job id, the next fire it is expected to hold, the new one)."""


class CronJobStore(Generic[J]):
    """``cronjobs``, each job read once into a ``StoredJob`` and handed to ``read``
    (the scheduler's: the job with its schedule checked)."""

    def __init__(self, db: AsyncDatabase[Doc], read: Callable[[StoredJob], J]) -> None:
        self._coll = db[c.CRONJOBS]
        self._read = read

    def _job(self, doc: Doc) -> J:
        return self._read(StoredJob.from_doc(doc))

    def _jobs(self, docs: Sequence[Doc]) -> list[J]:
        return each(docs, self._job, "cron job")

    async def pending(self) -> int:
        """Jobs not done (the ones that count toward the limit)."""
        return await self._coll.count_documents(PENDING)

    async def insert(self, job: NewJob, new_id: Callable[[], str]) -> J | None:
        """Store ``job`` under a fresh id from ``new_id``; None when every id drawn
        clashed."""
        doc = job.to_doc()
        if not await retry.insert_new(self._coll, doc, new_id):
            return None
        return self._read(job.as_stored(str(doc["_id"])))

    async def get(self, job_id: str) -> J | None:
        """The job, None if there is none; a ``BadRecord`` (logged) when it is stored
        in a form that cannot be read."""
        doc = await self._coll.find_one({"_id": job_id})
        return self._checked(doc) if doc is not None else None

    def _checked(self, doc: Doc) -> J:
        try:
            return self._job(doc)
        except (BadRecord, KeyError) as exc:
            log.warning("cron job %r does not parse: %s", doc.get("_id"), exc)
            unread = f"cron job {doc.get('_id')!r} is stored in a form that cannot be read"
            raise BadRecord(unread) from None

    async def all(self, limit: int = 0) -> list[J]:
        """Jobs, pending first then done (one-time jobs that ran), oldest first."""
        order = [("done_at", 1), ("created_at", 1), ("_id", 1)]
        return self._jobs(await self._coll.find({}, sort=order, limit=limit).to_list())

    async def change(self, job_id: str, change: JobChange) -> J | None:
        """Apply ``change``; the job as it is now, None if it was deleted meanwhile."""
        update = change.to_update()
        doc = await retry.retried(  # $set by _id: safe to repeat
            lambda: self._coll.find_one_and_update(
                {"_id": job_id}, update, return_document=ReturnDocument.AFTER
            ),
            "update a cron job",
        )
        return self._checked(doc) if doc is not None else None

    async def delete(self, job_id: str) -> None:
        await retry.retried(lambda: self._coll.delete_one({"_id": job_id}), "delete a cron job")

    async def in_zone(self, timezone: str) -> list[str]:
        """The ids of the recurring jobs, and the pending one-time jobs, in ``timezone``."""
        recurring = {"cron_expression": {"$type": "string"}}
        query = {"timezone": timezone, "$or": [recurring, {"kind": "once", **PENDING}]}
        return [str(doc["_id"]) async for doc in self._coll.find(query, projection={"_id": 1})]

    async def finish_once(self, job_id: str, run_at: datetime, status: str, now: datetime) -> bool:
        """Keep a one-time job as done after its run for ``run_at``: only once, and not
        when it was given a new time meanwhile. Whether this call did it."""
        query: Doc = {"_id": job_id, "kind": "once", "run_at": run_at, **PENDING}
        done: Doc = {"enabled": False, "done_at": now, "last_status": status, "updated_at": now}
        done.update(next_fire_at=None, prune_at=now + DONE_KEPT)
        result = await retry.retried(  # compare-and-set: a repeat changes nothing
            lambda: self._coll.update_one(query, {"$set": done}), "mark a one-time job done"
        )
        return bool(result.modified_count)

    async def stranded_once(self) -> list[J]:
        """Enabled one-time jobs whose fire was claimed (no next fire) but not yet done."""
        query = {"kind": "once", "enabled": True, "next_fire_at": None, **PENDING}
        return self._jobs(await self._coll.find(query).to_list())

    async def restore_once(self, job_id: str, run_at: datetime) -> None:
        """Put back the fire of a one-time job whose claim left no run behind."""
        query: Doc = {"_id": job_id, "run_at": run_at, "next_fire_at": None, **PENDING}
        await retry.retried(  # compare-and-set: a repeat changes nothing
            lambda: self._coll.update_one(query, {"$set": {"next_fire_at": run_at}}),
            "restore a one-time job",
        )

    async def prune_done(self, now: datetime) -> int:
        """Remove one-time jobs done more than ``DONE_KEPT`` ago."""
        result = await retry.retried(
            lambda: self._coll.delete_many({"prune_at": {"$lte": now}}), "prune done jobs"
        )
        return int(result.deleted_count)

    # --- for the engine and the pulse -------------------------------------------------

    async def enabled(self, due_by: datetime | None = None) -> list[J]:
        """The enabled jobs (with ``due_by``: those whose next fire is due by then)."""
        query: Doc = {"enabled": True}
        if due_by is not None:
            query["next_fire_at"] = {"$lte": due_by}
        return self._jobs(await self._coll.find(query).to_list())

    def advance_many(self, moves: Sequence[Move]) -> Awaitable[object]:
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

    async def due_by(self, end: datetime) -> list[J]:
        """The enabled jobs whose next fire is at or before ``end``, read one by one
        (a damaged one skipped, logged)."""
        query = {"enabled": True, "next_fire_at": {"$lte": end}}
        return [
            j async for doc in self._coll.find(query) if (j := parsed(doc, self._job, "cron job"))
        ]


def _next_fire(doc: Doc) -> datetime | None:
    """A job's stored next fire; one that is not a date is none (logged)."""
    try:
        return moment(doc, "next_fire_at")
    except BadRecord as exc:
        log.warning("cron job %r: %s; it is not armed", doc.get("_id"), exc)
        return None
