"""Run records in ``runs``: every cron and pulse execution, including the ones skipped,
read here, once, into a typed ``Run`` and written from one.

Status is set here, by the system, never by the model: ``running`` while it runs, then
``success``, ``failed``, ``timeout`` or ``skipped``. A fire that never ran is ``skipped``
with its reason: ``missed`` when its moment passed by more than its grace window while
the process was down or stalled (the owner is alerted: ``alert_pending`` marks the
record until the alert is out), ``superseded`` when a later fire inside the window ran
instead, or a reason of the runner's (``idle``, ``daily_cap``...).

A ``running`` record names the process doing it and carries a lease it renews
(``scheduler.fires.leases``); one left by a process that died is reclaimed as
``failed`` (``interrupted``) and tried again or reported (``scheduler.fires.recovery``),
so nothing claims success for work that never finished and nothing stays ``running``
for ever.

A scheduled fire that failed for a passing reason (``PASSING``: the model or the
database could not be reached) keeps its record and is tried again inside its grace
window: ``retry_at`` says when (the engine claims it then), ``retry_until`` until when,
``attempts`` how many tries it had. One that runs out of time is marked ``gave_up``.

Every write here survives one dropped connection (``storage.retry``): inserts carry
their ``_id`` from the first try, updates are ``$set`` by ``_id`` or claims. A stored
record that does not parse is logged and skipped (``storage.records``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from bson import ObjectId
from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c
from storage import retry
from storage.records import Doc, each, moment, parsed
from storage.repos.runs.record import (
    FAILED,
    RESULT_LIMIT,
    RETRY_LEASE,
    Holder,
    Outcome,
    Reason,
    Run,
    RunKind,
    Tokens,
    Trigger,
    short_error,
)

log = logging.getLogger(__name__)


class RunStore:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._coll = db[c.RUNS]

    def _runs(self, docs: Sequence[Doc]) -> list[Run]:
        return each(docs, Run.from_doc, "run record")

    def open(self, run: Run) -> Awaitable[object]:
        """Store the record of a first try (``Run.first_try``): the write, for the
        caller to await (a plain call: a fire's task waits in the driver alone)."""
        doc = run.to_doc()
        del doc["_id"]  # the upsert's query
        # An upsert by the record's own _id: a repeat after a dropped connection finds
        # the first try's record and changes nothing.
        return retry.retried(
            lambda: self._coll.update_one({"_id": run.id}, {"$setOnInsert": doc}, upsert=True),
            "open a run record",
        )

    async def finish(
        self,
        run: Run,
        outcome: Outcome,
        now: datetime,
        *,
        retry_at: datetime | None = None,
        gave_up: bool = False,
    ) -> Run:
        """Close a try: the outcome, and when to try again (``retry_at``) or that no try
        is left (``gave_up``)."""
        duration = round((now - (run.started_at or now)).total_seconds() * 1000, 1)
        tokens = Tokens(outcome.input_tokens, outcome.output_tokens, outcome.cached_input_tokens)
        error = short_error(outcome.error) if outcome.error else None
        result = outcome.result[:RESULT_LIMIT]
        fields: Doc = {
            "status": outcome.status,
            "ended_at": now,
            "duration_ms": duration,
            "tool_calls": list(outcome.tool_calls),
            "tokens": tokens.to_doc(),
            "result": result,
            "error": error,
            "reason": outcome.reason,
        }
        if outcome.calls is not None:
            fields["calls"] = [call.to_doc() for call in outcome.calls]
        if outcome.delivery is not None:
            fields["delivery"] = outcome.delivery.to_doc()
        elif outcome.nothing_to_deliver:
            fields["delivery"] = None
        update: Doc = {"$set": fields}
        if retry_at is not None:
            fields["retry_at"] = retry_at
        else:
            update["$unset"] = {"retry_at": ""}
        if gave_up:
            fields["gave_up"] = True
        closed = replace(
            run,
            status=outcome.status,
            ended_at=now,
            duration_ms=duration,
            tool_calls=tuple(outcome.tool_calls),
            tokens=tokens,
            result=result,
            error=error,
            reason=outcome.reason,
            calls=tuple(outcome.calls) if outcome.calls is not None else run.calls,
            delivery=outcome.delivery if outcome.delivery is not None else run.delivery,
            retry_at=retry_at,
            gave_up=run.gave_up or gave_up,
            unsaved=False,
        )
        # $set/$unset by _id: the same record whichever try of the write lands. Only
        # while its holder still holds it: a record reclaimed meanwhile (this process
        # was taken for dead) belongs to whoever reclaimed it.
        query = {"_id": run.id, "owner": run.owner}
        done = await retry.retried(
            lambda: self._coll.find_one_and_update(query, update, projection={"_id": 1}),
            "close a run record",
        )
        return closed if done is not None else replace(closed, reclaimed=True)

    async def reopen(self, run: Run, now: datetime, holder: Holder | None = None) -> Run:
        """A retry starts: the record is ``running`` again, one try more, held by
        ``holder``."""
        fields: Doc = {"status": "running", "retried_at": now, "attempts": run.attempts + 1}
        if holder is not None:
            fields |= {"owner": holder.owner, "lease_until": holder.lease_until}
        await retry.retried(  # $set by _id (the count is set, not incremented)
            lambda: self._coll.update_one({"_id": run.id}, {"$set": fields}),
            "reopen a run record",
        )
        return replace(
            run,
            status="running",
            retried_at=now,
            attempts=run.attempts + 1,
            owner=holder.owner if holder is not None else run.owner,
            lease_until=holder.lease_until if holder is not None else run.lease_until,
        )

    async def due_retries(self, now: datetime, limit: int = 100) -> list[Run]:
        """Claim the retries due at ``now``: each one's ``retry_at`` moves ``RETRY_LEASE``
        ahead, so one process takes it, and it comes back if its try never starts. A
        claimed record that does not parse is not tried again (logged)."""
        first = await self.next_retry()
        if first is None or first > now:
            return []
        claimed: list[Run] = []
        while len(claimed) < limit:
            doc = await retry.claim(
                self._coll,
                {"retry_at": {"$lte": now}, "status": {"$in": sorted(FAILED)}},
                {"$set": {"retry_at": now + RETRY_LEASE}},
                sort=[("retry_at", 1)],
            )
            if doc is None:
                break
            run = parsed(doc, Run.from_doc, "run record")
            if run is None:
                await self._coll.update_one({"_id": doc["_id"]}, {"$unset": {"retry_at": ""}})
                continue
            claimed.append(run)
        return claimed

    async def next_retry(self) -> datetime | None:
        doc = await self._coll.find_one(
            {"retry_at": {"$exists": True}}, sort=[("retry_at", 1)], projection={"retry_at": 1}
        )
        return moment(doc, "retry_at") if doc else None

    async def resume(self, run: Run, now: datetime, until: datetime) -> bool:
        """Try an interrupted run once more, as a retry due now (one-time jobs: their only
        fire must not be lost to a crash). Only once per record (``resumed``)."""
        query = {"_id": run.id, "status": {"$in": sorted(FAILED)}, "resumed": {"$ne": True}}
        update = {"$set": {"retry_at": now, "retry_until": until, "resumed": True}}
        result = await retry.retried(  # compare-and-set: a repeat changes nothing
            lambda: self._coll.update_one(query, update), "resume an interrupted run"
        )
        return bool(result.modified_count)

    async def later_fire(self, run: Run) -> bool:
        """Whether the same job (or the pulse) has a record for a later fire."""
        query = {
            "kind": run.kind,
            "job_id": run.job_id,
            "scheduled_for": {"$gt": run.scheduled_for},
        }
        return await self._coll.find_one(query, projection={"_id": 1}) is not None

    async def give_up(self, run: Run, note: str) -> Run:
        """A retry that will not happen (superseded, or out of time): the record keeps
        the last try's outcome."""
        update: Doc = {"$set": {"gave_up": True, "retry_note": note}, "$unset": {"retry_at": ""}}
        done = await retry.retried(  # $set/$unset by _id
            lambda: self._coll.find_one_and_update(
                {"_id": run.id}, update, return_document=ReturnDocument.AFTER
            ),
            "give up a retry",
        )
        fresh = parsed(done, Run.from_doc, "run record") if done is not None else None
        return fresh or replace(run, gave_up=True, retry_note=note, retry_at=None)

    async def skipped(
        self,
        kind: RunKind,
        job_id: str | None,
        scheduled_for: datetime,
        now: datetime,
        detail: str,
        *,
        trigger: Trigger = "schedule",
        why: Reason = "missed",
    ) -> Run:
        """Record a fire that did not run (missed, idle, over the daily cap)."""
        run = Run.skipped(kind, job_id, scheduled_for, now, detail, trigger, why)
        await retry.insert(self._coll, _finished_doc(run))
        return run

    async def skipped_many(self, runs: Sequence[Run]) -> None:
        """Insert finished records (skipped, or lost) in one round trip."""
        await retry.insert_many(self._coll, [_finished_doc(run) for run in runs], ordered=False)

    async def pending_alerts(self, limit: int = 500) -> list[Run]:
        """Missed fires recorded but whose alert may not have gone out (the process
        stopped in between), oldest first."""
        query = {"status": "skipped", "alert_pending": True}
        cursor = self._coll.find(query, sort=[("started_at", 1)], limit=limit)
        return self._runs(await cursor.to_list())

    async def alerted(self, run_ids: Sequence[ObjectId]) -> None:
        """The owner has been told of these missed fires."""
        if run_ids:
            ids = list(run_ids)
            await retry.retried(  # an $unset: safe to repeat
                lambda: self._coll.update_many(
                    {"_id": {"$in": ids}}, {"$unset": {"alert_pending": ""}}
                ),
                "mark missed fires alerted",
            )

    async def get(self, run_id: ObjectId) -> Run | None:
        doc = await self._coll.find_one({"_id": run_id})
        return parsed(doc, Run.from_doc, "run record") if doc is not None else None

    async def failure_streak(self, kind: RunKind, job_id: str | None, limit: int = 10) -> int:
        """How many of the latest finished (not skipped) runs of one job failed in a row."""
        cursor = self._coll.find(
            {"kind": kind, "job_id": job_id, "status": {"$in": ["success", *sorted(FAILED)]}},
            sort=[("started_at", -1), ("_id", -1)],
            limit=limit,
            projection={"status": 1},
        )
        streak = 0
        async for doc in cursor:
            if doc.get("status") not in FAILED:
                break
            streak += 1
        return streak

    async def ended_since(self, since: datetime, kind: RunKind, limit: int = 20) -> list[Run]:
        """Finished runs of ``kind`` that ended after ``since``, newest first."""
        cursor = self._coll.find(
            {"kind": kind, "ended_at": {"$gt": since}, "status": {"$ne": "skipped"}},
            sort=[("ended_at", -1)],
            limit=limit,
        )
        return self._runs(await cursor.to_list())

    async def recent(
        self, kind: RunKind | None = None, job_id: str | None = None, limit: int = 10
    ) -> list[Run]:
        query: Doc = {}
        if kind is not None:
            query["kind"] = kind
        if job_id is not None:
            query["job_id"] = job_id
        cursor = self._coll.find(query, sort=[("started_at", -1)], limit=limit)
        return self._runs(await cursor.to_list())

    async def started_since(self, since: datetime, limit: int) -> list[Run]:
        """Runs begun since ``since``, newest first, without their bulky fields (the
        dashboard's timeline)."""
        cursor = self._coll.find(
            {"started_at": {"$gte": since}},
            projection=TIMELINE_FIELDS,
            sort=[("started_at", -1)],
            limit=limit,
        )
        return self._runs(await cursor.to_list())

    async def latest_finished(self, limit: int) -> list[Run]:
        """The latest runs that ended (succeeded, failed or timed out), newest first,
        with only their kind, status, reason and times (the health check's model)."""
        cursor = self._coll.find(
            {"status": {"$in": ["success", "failed", "timeout"]}},
            projection={"kind": 1, "status": 1, "reason": 1, "started_at": 1, "ended_at": 1},
            sort=[("started_at", -1)],
            limit=limit,
        )
        return self._runs(await cursor.to_list())

    # --- leases (scheduler.fires.leases, scheduler.fires.recovery) ---------------------

    async def renew(self, run_ids: Sequence[ObjectId], owner: str, until: datetime) -> None:
        """Move the leases of ``owner``'s running records among ``run_ids`` to ``until``."""
        if not run_ids:
            return
        query = {"_id": {"$in": list(run_ids)}, "status": "running", "owner": owner}
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

    async def in_progress(self, kind: RunKind, job_id: str | None, now: datetime) -> Run | None:
        """The newest record of this job (or the pulse: ``job_id`` None) ``running`` under
        a live lease, in this process or any other: a run under way. One whose lease
        lapsed was cut off with its process, and does not count."""
        query = {"kind": kind, "job_id": job_id, "status": "running", "lease_until": {"$gt": now}}
        doc = await self._coll.find_one(query, sort=[("started_at", -1)])
        return parsed(doc, Run.from_doc, "run record") if doc is not None else None

    async def running(self, limit: int = 1_000) -> list[Run]:
        """Records ``running`` now, in this process or any other (a handful)."""
        cursor = self._coll.find({"status": "running"}, sort=[("started_at", 1)], limit=limit)
        return self._runs(await cursor.to_list())

    async def reclaim(
        self, run: Run, now: datetime, by: str, *, retry_until: datetime | None, note: str
    ) -> Run | None:
        """Close a record whose holder is gone as ``failed`` (``interrupted``), in one
        compare-and-set on its holder and lease (a holder that renewed meanwhile keeps
        it): tried again now, until ``retry_until``, or else given up with ``note``.
        None when it was not this call that closed it."""
        token = ObjectId()  # which call closed it, should its answer be lost
        fields: Doc = {
            "status": "failed",
            "ended_at": now,
            "error": "interrupted: the process stopped during the run",
            "reason": "interrupted",
            "reclaimed_by": by,
            "reclaim_token": token,
        }
        unset: Doc = {"owner": "", "lease_until": ""}
        if retry_until is not None:
            fields |= {"retry_at": now, "retry_until": retry_until, "resumed": True}
        else:
            fields |= {"gave_up": True, "retry_note": note}
            unset["retry_at"] = ""
        query = {
            "_id": run.id,
            "status": "running",
            "owner": run.owner,
            "lease_until": run.lease_until,
        }
        done = await retry.retried(  # a repeat finds it closed and changes nothing
            lambda: self._coll.find_one_and_update(
                query, {"$set": fields, "$unset": unset}, return_document=ReturnDocument.AFTER
            ),
            "reclaim a run record",
        )
        if done is None:  # closed by another call, or by this one's lost first try
            done = await self._coll.find_one({"_id": run.id, "reclaim_token": token})
        return parsed(done, Run.from_doc, "run record") if done is not None else None


TIMELINE_FIELDS: Mapping[str, int] = {
    "kind": 1,
    "name": 1,
    "job_id": 1,
    "status": 1,
    "trigger": 1,
    "started_at": 1,
    "duration_ms": 1,
    "reason": 1,
    "tokens": 1,
    "scheduled_for": 1,
    "retry_at": 1,
}


def _finished_doc(run: Run) -> Doc:
    """A skipped (or lost) fire's record as it has always been stored."""
    doc: Doc = {
        "_id": run.id,
        "kind": run.kind,
        "job_id": run.job_id,
        "scheduled_for": run.scheduled_for,
        "trigger": run.trigger,
        "status": run.status,
        "started_at": run.started_at,
        "ended_at": run.ended_at,
        "duration_ms": run.duration_ms,
        "tool_calls": list(run.tool_calls),
        "tokens": (run.tokens or Tokens()).to_doc(),
        "result": run.result,
        "error": run.error,
        "reason": run.reason,
    }
    if run.status != "skipped":  # a fire lost before any try
        doc |= {"attempts": run.attempts, "gave_up": run.gave_up}
    if run.name is not None:
        doc["name"] = run.name
    if run.alert_pending:
        doc["alert_pending"] = True
    return doc
