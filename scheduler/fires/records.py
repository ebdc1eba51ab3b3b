"""Run records in ``runs``: every cron and pulse execution, including the ones skipped,
and the leases that say which process is doing a ``running`` one.

Status is set here, by the system, never by the model: ``running`` while it runs, then
``success``, ``failed``, ``timeout`` or ``skipped``. A fire that never ran is ``skipped``
with its reason: ``missed`` when its moment passed by more than its grace window while
the process was down or stalled (the owner is alerted: ``alert_pending`` marks the
record until the alert is out), ``superseded`` when a later fire inside the window ran
instead, or a reason of the runner's (``idle``, ``daily_cap``...).

A ``running`` record names the process doing it and carries a lease it renews
(``RunLeases``); one left by a process that died is reclaimed as ``failed``
(``interrupted``) and tried again or reported (``scheduler.fires.recovery``), so
nothing claims success for work that never finished and nothing stays ``running`` for
ever.

A scheduled fire that failed for a passing reason (``PASSING``: the model or the
database could not be reached) keeps its record and is tried again inside its grace
window: ``retry_at`` says when (the engine claims it then), ``retry_until`` until when,
``attempts`` how many tries it had. One that runs out of time is marked ``gave_up``.

Every write here survives one dropped connection (``storage.retry``): inserts carry
their ``_id`` from the first try, updates are ``$set`` by ``_id`` or claims.

Leases: a run record carries its holder (``owner``: this process's boot id, host, pid
and a random part, so a restarted process is a new holder even with the same pid, as
in a container) and ``lease_until``. While its runs are in flight a process renews
their leases every ``renew_every`` seconds, all in one write. A process that dies
stops renewing; once a lease has lapsed, any process may reclaim the record. A
process that stops cleanly lets its leases lapse at once. A run whose outcome could
not be written (the database was away) stays held until the outcome is written, so
its record is not reclaimed from under it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from bson import ObjectId
from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase

from runtime.tasks import stop_task
from storage import collections as c
from storage import retry
from storage.ejson import aware

log = logging.getLogger(__name__)
Doc = dict[str, Any]
RunKindName = Literal["cron", "pulse"]
Status = Literal["success", "failed", "timeout", "skipped"]
Trigger = Literal["schedule", "manual", "command", "api"]
Reason = Literal[
    # why a run failed
    "timeout",
    "model_unavailable",
    "out_of_steps",
    "internal_error",
    "interrupted",
    # why a fire did not run
    "daily_cap",
    "idle",
    "budget_spent",
    "missed",
    "superseded",
    # why a fire failed without its work being done (or after its retries ran out)
    "database_unavailable",
]
"""Why a run did not succeed, as a fixed word: the owner's message is chosen by it."""
FAILED: frozenset[str] = frozenset({"failed", "timeout"})
PASSING: frozenset[str] = frozenset({"model_unavailable", "database_unavailable"})
"""Reasons a fire may well succeed a little later: it is tried again in its grace window."""
RETRY_LEASE = timedelta(minutes=1)
"""A claimed retry's ``retry_at`` moves this far ahead: if the process dies (or the
database drops) before the try starts, it is claimed again then."""
RESULT_LIMIT = 8_000
ERROR_LIMIT = 300
RunStatus = Literal["running", "success", "failed", "timeout", "skipped"]


@dataclass(frozen=True)
class RunRecord:
    """The fields of a ``runs`` document the scheduler decides on, typed, read in this
    one place (``from_doc``). The document itself stays what the store returns: the
    dashboard, the API and the model read it as stored."""

    id: Any
    kind: RunKindName | None
    job_id: str | None
    scheduled_for: datetime | None
    trigger: Trigger = "schedule"
    status: RunStatus = "running"
    reason: Reason | None = None
    attempts: int = 1
    """Tries so far, this one included."""
    started_at: datetime | None = None
    retried_at: datetime | None = None
    retry_at: datetime | None = None
    """When the next try may start (a passing failure inside the grace window)."""
    retry_until: datetime | None = None
    """The end of the fire's grace window: no try starts after it."""
    owner: str | None = None
    """The holder of a ``running`` record (``RunLeases``)."""
    lease_until: datetime | None = None
    gave_up: bool = False
    resumed: bool = False
    """Tried once more after an interruption (at most once per record)."""
    reclaimed: bool = False
    """Taken for dead by another process before its holder closed it."""
    unsaved: bool = False
    """Its outcome waits in memory for the database (``RunRecorder.flush``)."""

    @classmethod
    def from_doc(cls, doc: Doc) -> RunRecord:
        return cls(
            id=doc.get("_id"),
            kind=doc.get("kind"),
            job_id=doc.get("job_id"),
            scheduled_for=aware(doc.get("scheduled_for")),
            trigger=doc.get("trigger") or "schedule",
            status=doc.get("status") or "running",
            reason=doc.get("reason"),
            attempts=int(doc.get("attempts") or 1),
            started_at=aware(doc.get("started_at")),
            retried_at=aware(doc.get("retried_at")),
            retry_at=aware(doc.get("retry_at")),
            retry_until=aware(doc.get("retry_until")),
            owner=doc.get("owner"),
            lease_until=aware(doc.get("lease_until")),
            gave_up=bool(doc.get("gave_up")),
            resumed=bool(doc.get("resumed")),
            reclaimed=bool(doc.get("reclaimed")),
            unsaved=bool(doc.get("unsaved")),
        )

    @property
    def final(self) -> bool:
        """No try left: finished and written, no retry pending."""
        return (
            self.status in ("success", "failed", "timeout", "skipped")
            and self.retry_at is None
            and not self.unsaved
            and not self.reclaimed
        )

    @property
    def began(self) -> datetime | None:
        """When the current try began."""
        moments = [m for m in (self.started_at, self.retried_at) if m is not None]
        return max(moments, default=None)


@dataclass
class Outcome:
    """How a run ended; the runner fills it, the store stamps times and duration."""

    status: Status
    result: str = ""
    error: str | None = None
    """Detail in words, for the record and the model; never matched on."""
    reason: Reason | None = None
    tool_calls: list[str] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    """Of ``input_tokens``, what the provider read from its prompt cache."""
    extra: Doc = field(default_factory=dict)


def short_error(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= ERROR_LIMIT else line[: ERROR_LIMIT - 1] + "…"


def skipped_doc(
    kind: RunKindName,
    job_id: str | None,
    scheduled_for: datetime,
    now: datetime,
    reason: str,
    trigger: str = "schedule",
    why: Reason = "missed",
) -> Doc:
    return {
        "kind": kind,
        "job_id": job_id,
        "scheduled_for": scheduled_for,
        "trigger": trigger,
        "status": "skipped",
        "started_at": now,
        "ended_at": now,
        "duration_ms": 0.0,
        "tool_calls": [],
        "tokens": {"input": 0, "output": 0},
        "result": "",
        "error": reason,
        "reason": why,
    }


def lost_doc(
    kind: RunKindName,
    job_id: str | None,
    scheduled_for: datetime,
    now: datetime,
    detail: str,
    trigger: str = "schedule",
) -> Doc:
    """A fire that never ran because the database could not be reached in its window."""
    return {
        **skipped_doc(kind, job_id, scheduled_for, now, detail, trigger),
        "status": "failed",
        "reason": "database_unavailable",
        "attempts": 0,
        "gave_up": True,
    }


class RunStore:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._coll = db[c.RUNS]

    async def start(
        self,
        kind: RunKindName,
        job_id: str | None,
        scheduled_for: datetime,
        now: datetime,
        *,
        trigger: str = "schedule",
        extra: Doc | None = None,
    ) -> Doc:
        doc: Doc = {
            "kind": kind,
            "job_id": job_id,
            "scheduled_for": scheduled_for,
            "trigger": trigger,
            "status": "running",
            "started_at": now,
            **(extra or {}),
        }
        await retry.insert(self._coll, doc)
        return doc

    async def finish(
        self,
        run: Doc,
        outcome: Outcome,
        now: datetime,
        *,
        retry_at: datetime | None = None,
        gave_up: bool = False,
    ) -> Doc:
        """Close a try: the outcome, and when to try again (``retry_at``) or that no try
        is left (``gave_up``)."""
        started: datetime = run["started_at"]
        fields: Doc = {
            "status": outcome.status,
            "ended_at": now,
            "duration_ms": round((now - started).total_seconds() * 1000, 1),
            "tool_calls": list(outcome.tool_calls),
            "tokens": {
                "input": outcome.input_tokens,
                "output": outcome.output_tokens,
                "cached_input": outcome.cached_input_tokens,
            },
            "result": outcome.result[:RESULT_LIMIT],
            "error": short_error(outcome.error) if outcome.error else None,
            "reason": outcome.reason,
            **outcome.extra,
        }
        update: Doc = {"$set": fields}
        if retry_at is not None:
            fields["retry_at"] = retry_at
        else:
            update["$unset"] = {"retry_at": ""}
        if gave_up:
            fields["gave_up"] = True
        # $set/$unset by _id: the same record whichever try of the write lands. Only
        # while its holder still holds it: a record reclaimed meanwhile (this process
        # was taken for dead) belongs to whoever reclaimed it.
        query = {"_id": run["_id"], "owner": run.get("owner")}
        done = await retry.retried(
            lambda: self._coll.find_one_and_update(
                query, update, return_document=ReturnDocument.AFTER
            ),
            "close a run record",
        )
        return done if done is not None else {**run, **fields, "reclaimed": True}

    async def reopen(self, run: Doc, now: datetime, holder: Doc | None = None) -> Doc:
        """A retry starts: the record is ``running`` again, one try more, held by
        ``holder`` (``owner`` and ``lease_until``, ``scheduler.fires.records``)."""
        fields: Doc = {
            "status": "running",
            "retried_at": now,
            "attempts": _tries(run) + 1,
            **(holder or {}),
        }
        await retry.retried(  # $set by _id (the count is set, not incremented)
            lambda: self._coll.update_one({"_id": run["_id"]}, {"$set": fields}),
            "reopen a run record",
        )
        return {**run, **fields}

    async def due_retries(self, now: datetime, limit: int = 100) -> list[Doc]:
        """Claim the retries due at ``now``: each one's ``retry_at`` moves ``RETRY_LEASE``
        ahead, so one process takes it, and it comes back if its try never starts."""
        first = await self.next_retry()
        if first is None or first > now:
            return []
        claimed: list[Doc] = []
        while len(claimed) < limit:
            doc = await retry.claim(
                self._coll,
                {"retry_at": {"$lte": now}, "status": {"$in": sorted(FAILED)}},
                {"$set": {"retry_at": now + RETRY_LEASE}},
                sort=[("retry_at", 1)],
            )
            if doc is None:
                break
            claimed.append(doc)
        return claimed

    async def next_retry(self) -> datetime | None:
        doc = await self._coll.find_one(
            {"retry_at": {"$exists": True}}, sort=[("retry_at", 1)], projection={"retry_at": 1}
        )
        return _aware(doc["retry_at"]) if doc else None

    async def resume(self, run: Doc, now: datetime, until: datetime) -> bool:
        """Try an interrupted run once more, as a retry due now (one-time jobs: their only
        fire must not be lost to a crash). Only once per record (``resumed``)."""
        query = {"_id": run["_id"], "status": {"$in": sorted(FAILED)}, "resumed": {"$ne": True}}
        update = {"$set": {"retry_at": now, "retry_until": until, "resumed": True}}
        result = await retry.retried(  # compare-and-set: a repeat changes nothing
            lambda: self._coll.update_one(query, update), "resume an interrupted run"
        )
        return bool(result.modified_count)

    async def later_fire(self, run: Doc) -> bool:
        """Whether the same job (or the pulse) has a record for a later fire."""
        query = {
            "kind": run["kind"],
            "job_id": run.get("job_id"),
            "scheduled_for": {"$gt": run["scheduled_for"]},
        }
        return await self._coll.find_one(query, projection={"_id": 1}) is not None

    async def give_up(self, run: Doc, note: str) -> Doc:
        """A retry that will not happen (superseded, or out of time): the record keeps
        the last try's outcome."""
        update: Doc = {"$set": {"gave_up": True, "retry_note": note}, "$unset": {"retry_at": ""}}
        done = await retry.retried(  # $set/$unset by _id
            lambda: self._coll.find_one_and_update(
                {"_id": run["_id"]}, update, return_document=ReturnDocument.AFTER
            ),
            "give up a retry",
        )
        return done if done is not None else {**run, "gave_up": True, "retry_note": note}

    async def skipped(
        self,
        kind: RunKindName,
        job_id: str | None,
        scheduled_for: datetime,
        now: datetime,
        reason: str,
        *,
        trigger: str = "schedule",
        why: Reason = "missed",
    ) -> Doc:
        """Record a fire that did not run (missed, idle, over the daily cap)."""
        doc = skipped_doc(kind, job_id, scheduled_for, now, reason, trigger, why)
        await retry.insert(self._coll, doc)
        return doc

    async def skipped_many(self, docs: list[Doc]) -> None:
        """Insert finished records (skipped, or lost) in one round trip."""
        await retry.insert_many(self._coll, docs, ordered=False)

    async def pending_alerts(self, limit: int = 500) -> list[Doc]:
        """Missed fires recorded but whose alert may not have gone out (the process
        stopped in between), oldest first."""
        query = {"status": "skipped", "alert_pending": True}
        cursor = self._coll.find(query, sort=[("started_at", 1)], limit=limit)
        return await cursor.to_list()

    async def alerted(self, run_ids: list[Any]) -> None:
        """The owner has been told of these missed fires."""
        if run_ids:
            await retry.retried(  # an $unset: safe to repeat
                lambda: self._coll.update_many(
                    {"_id": {"$in": run_ids}}, {"$unset": {"alert_pending": ""}}
                ),
                "mark missed fires alerted",
            )

    async def get(self, run_id: ObjectId) -> Doc | None:
        return await self._coll.find_one({"_id": run_id})

    async def failure_streak(self, kind: RunKindName, job_id: str | None, limit: int = 10) -> int:
        """How many of the latest finished (not skipped) runs of one job failed in a row."""
        cursor = self._coll.find(
            {"kind": kind, "job_id": job_id, "status": {"$in": ["success", *sorted(FAILED)]}},
            sort=[("started_at", -1), ("_id", -1)],
            limit=limit,
            projection={"status": 1},
        )
        streak = 0
        async for doc in cursor:
            if doc["status"] not in FAILED:
                break
            streak += 1
        return streak

    async def ended_since(self, since: datetime, kind: RunKindName, limit: int = 20) -> list[Doc]:
        """Finished runs of ``kind`` that ended after ``since``, newest first."""
        cursor = self._coll.find(
            {"kind": kind, "ended_at": {"$gt": since}, "status": {"$ne": "skipped"}},
            sort=[("ended_at", -1)],
            limit=limit,
        )
        return await cursor.to_list()

    async def recent(
        self, kind: RunKindName | None = None, job_id: str | None = None, limit: int = 10
    ) -> list[Doc]:
        query: Doc = {}
        if kind is not None:
            query["kind"] = kind
        if job_id is not None:
            query["job_id"] = job_id
        cursor = self._coll.find(query, sort=[("started_at", -1)], limit=limit)
        return await cursor.to_list()

    # --- leases (scheduler.fires.records, scheduler.fires.recovery) ------------------------------

    async def renew(self, run_ids: list[Any], owner: str, until: datetime) -> None:
        """Move the leases of ``owner``'s running records among ``run_ids`` to ``until``."""
        if not run_ids:
            return
        query = {"_id": {"$in": run_ids}, "status": "running", "owner": owner}
        await retry.retried(  # a $set: safe to repeat
            lambda: self._coll.update_many(query, {"$set": {"lease_until": until}}),
            "renew run leases",
        )

    async def release(self, owner: str, now: datetime) -> int:
        """Let the leases of ``owner``'s records still running lapse at ``now``."""
        result = await retry.retried(  # a $set: safe to repeat
            lambda: self._coll.update_many(
                {"status": "running", "owner": owner}, {"$set": {"lease_until": now}}
            ),
            "release run leases",
        )
        return result.modified_count

    async def in_progress(self, kind: RunKindName, job_id: str | None, now: datetime) -> Doc | None:
        """The newest record of this job (or the pulse: ``job_id`` None) ``running`` under
        a live lease, in this process or any other: a run under way. One whose lease
        lapsed was cut off with its process, and does not count."""
        query = {"kind": kind, "job_id": job_id, "status": "running", "lease_until": {"$gt": now}}
        return await self._coll.find_one(query, sort=[("started_at", -1)])

    async def running(self, limit: int = 1_000) -> list[Doc]:
        """Records ``running`` now, in this process or any other (a handful)."""
        cursor = self._coll.find({"status": "running"}, sort=[("started_at", 1)], limit=limit)
        return await cursor.to_list()

    async def reclaim(
        self, run: Doc, now: datetime, by: str, *, retry_until: datetime | None, note: str
    ) -> Doc | None:
        """Close a record whose holder is gone as ``failed`` (``interrupted``), in one
        compare-and-set on its holder and lease (a holder that renewed meanwhile keeps
        it): tried again now, until ``retry_until``, or else given up with ``note``.
        None when it was not this call that closed it."""
        fields: Doc = {
            "status": "failed",
            "ended_at": now,
            "error": "interrupted: the process stopped during the run",
            "reason": "interrupted",
            "reclaimed_by": by,
            "reclaim_token": ObjectId(),  # which call closed it, should its answer be lost
        }
        unset: Doc = {"owner": "", "lease_until": ""}
        if retry_until is not None:
            fields |= {"retry_at": now, "retry_until": retry_until, "resumed": True}
        else:
            fields |= {"gave_up": True, "retry_note": note}
            unset["retry_at"] = ""
        query = {
            "_id": run["_id"],
            "status": "running",
            "owner": run.get("owner"),
            "lease_until": run.get("lease_until"),
        }
        done = await retry.retried(  # a repeat finds it closed and changes nothing
            lambda: self._coll.find_one_and_update(
                query, {"$set": fields, "$unset": unset}, return_document=ReturnDocument.AFTER
            ),
            "reclaim a run record",
        )
        if done is None:  # closed by another call, or by this one's lost first try
            done = await self._coll.find_one(
                {"_id": run["_id"], "reclaim_token": fields["reclaim_token"]}
            )
        return done


def _tries(run: Doc) -> int:
    return RunRecord.from_doc(run).attempts


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


# --- run leases: which process holds a running record ---------------------------------


@dataclass(frozen=True)
class LeaseTerms:
    ttl: timedelta = timedelta(seconds=30)
    """How long a run stays held without a renewal: how soon a dead process's run is
    reclaimed when nothing else tells that it died (another MongoDB client)."""
    renew_every: float = 10.0
    """Seconds between renewals; well inside ``ttl``, so a busy moment does not lose it."""


def boot_id() -> str:
    """This process's identity as a holder: unique to this start of this process."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class RunLeases:
    """The leases of the runs this process has in flight, kept alive while they run."""

    def __init__(
        self,
        runs: RunStore,
        clock: Callable[[], datetime],
        *,
        owner: str | None = None,
        terms: LeaseTerms | None = None,
    ) -> None:
        self._runs = runs
        self._clock = clock
        self.owner = owner or boot_id()
        self.terms = terms or LeaseTerms()
        self.started_at = clock()
        """When this holder began: a run another process began before it, on a database
        only this process can reach, was cut off (``scheduler.fires.recovery``)."""
        self._held: set[Any] = set()
        self._renewer: asyncio.Task[None] | None = None

    def fields(self, now: datetime) -> Doc:
        """What a run record says about its holder when a try starts."""
        return {"owner": self.owner, "lease_until": now + self.terms.ttl}

    def hold(self, run_id: Any) -> None:
        """Keep the lease of ``run_id`` alive until ``drop``."""
        self._held.add(run_id)
        if self._renewer is None or self._renewer.done():
            loop = asyncio.get_running_loop()
            self._renewer = loop.create_task(self._renew(), name="run leases")

    def drop(self, run_id: Any) -> None:
        self._held.discard(run_id)
        if not self._held and self._renewer is not None:
            self._renewer.cancel()  # nothing left to renew; the next hold starts another
            self._renewer = None

    @property
    def held(self) -> frozenset[Any]:
        """The ids of the runs held here now."""
        return frozenset(self._held)

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.terms.renew_every)
            await self.renew()

    async def renew(self) -> None:
        """Move the leases of the runs held here ahead by ``ttl``, now."""
        try:
            until = self._clock() + self.terms.ttl
            await self._runs.renew(list(self._held), self.owner, until)
        except Exception as exc:  # tried again at the next renewal, well inside the lease
            log.warning("could not renew %d run lease(s): %s", len(self._held), exc)

    async def release(self) -> None:
        """Stop renewing, and let the leases of this process's runs still ``running``
        (cut off by a stop) lapse now, so the next start reclaims them at once."""
        await stop_task(self._renewer)
        self._renewer = None
        self._held.clear()
        try:
            await self._runs.release(self.owner, self._clock())
        except asyncio.CancelledError:  # the app's stop deadline passed (a stuck database)
            log.warning(
                "run leases not released before the stop's deadline; they lapse within %.0f s",
                self.terms.ttl.total_seconds(),
            )
            raise
        except Exception as exc:  # they lapse by themselves within ttl
            log.warning("could not release run leases: %s", exc)
