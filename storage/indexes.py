"""Indexes created at start-up; ``create_index`` is idempotent."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, DESCENDING, IndexModel
from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c

INDEXES: dict[str, list[IndexModel]] = {
    c.CONVERSATIONS: [IndexModel([("key", ASCENDING), ("active", ASCENDING)])],
    c.MESSAGES: [IndexModel([("conversation_id", ASCENDING), ("seq", ASCENDING)], unique=True)],
    c.INBOX: [
        IndexModel([("channel", ASCENDING), ("external_id", ASCENDING)], unique=True),
        IndexModel([("status", ASCENDING), ("received_at", ASCENDING)]),
    ],
    c.OUTBOX: [
        IndexModel([("idempotency_key", ASCENDING)], unique=True),
        IndexModel([("status", ASCENDING), ("next_attempt_at", ASCENDING)]),
    ],
    c.RUNS: [IndexModel([("kind", ASCENDING), ("job_id", ASCENDING), ("started_at", DESCENDING)])],
    c.ALERTS: [
        IndexModel([("code", ASCENDING)], unique=True),
        IndexModel([("status", ASCENDING), ("dedupe_key", ASCENDING)]),
    ],
    c.LEASES: [IndexModel([("key", ASCENDING)], unique=True)],
    c.WHATSAPP_PERMISSIONS: [IndexModel([("phone_number", ASCENDING)], unique=True)],
}


async def ensure_indexes(db: AsyncDatabase[dict[str, Any]]) -> None:
    for name, models in INDEXES.items():
        await db[name].create_indexes(models)
