"""Run records in ``runs``: every cron and pulse execution, including the ones skipped.

Status is set here, by the system, never by the model: ``running`` while it runs, then
``success``, ``failed``, ``timeout`` or ``skipped``. A record left ``running`` by a
process that died is closed as ``failed`` on the next start, so nothing claims success
for work that never finished.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from bson import ObjectId
from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c

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
    "missed",
]
"""Why a run did not succeed, as a fixed word: the owner's message is chosen by it."""
FAILED: frozenset[str] = frozenset({"failed", "timeout"})
RESULT_LIMIT = 8_000
ERROR_LIMIT = 300


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
        await self._coll.insert_one(doc)
        return doc

    async def finish(self, run: Doc, outcome: Outcome, now: datetime) -> Doc:
        started: datetime = run["started_at"]
        fields: Doc = {
            "status": outcome.status,
            "ended_at": now,
            "duration_ms": round((now - started).total_seconds() * 1000, 1),
            "tool_calls": list(outcome.tool_calls),
            "tokens": {"input": outcome.input_tokens, "output": outcome.output_tokens},
            "result": outcome.result[:RESULT_LIMIT],
            "error": short_error(outcome.error) if outcome.error else None,
            "reason": outcome.reason,
            **outcome.extra,
        }
        done = await self._coll.find_one_and_update(
            {"_id": run["_id"]}, {"$set": fields}, return_document=ReturnDocument.AFTER
        )
        return done if done is not None else {**run, **fields}

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
        await self._coll.insert_one(doc)
        return doc

    async def skipped_many(self, docs: list[Doc]) -> None:
        if docs:
            await self._coll.insert_many(docs, ordered=False)

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

    async def close_interrupted(self, before: datetime, now: datetime) -> int:
        """Runs still ``running`` that started before ``before`` died with their process."""
        result = await self._coll.update_many(
            {"status": "running", "started_at": {"$lt": before}},
            {
                "$set": {
                    "status": "failed",
                    "ended_at": now,
                    "error": "interrupted: the process stopped during the run",
                    "reason": "interrupted",
                }
            },
        )
        return result.modified_count
