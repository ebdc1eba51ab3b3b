"""Indexes created at start-up; ``create_index`` is idempotent."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from pymongo import ASCENDING, DESCENDING, IndexModel
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import OperationFailure

from storage import collections as c

IndexNotFound, NamespaceNotFound = 27, 26
"""Server error codes: nothing to drop."""

INDEXES: Mapping[str, Sequence[IndexModel]] = MappingProxyType(
    {
        c.CONVERSATIONS: [IndexModel([("key", ASCENDING), ("active", ASCENDING)])],
        # A replay finds its earlier answer among the conversation's newest messages
        # (ConversationRepo.answer_for), so inbox_id needs no index of its own.
        c.MESSAGES: [
            IndexModel([("conversation_id", ASCENDING), ("seq", ASCENDING)], unique=True),
        ],
        # A row's _id is its (channel, external_id) or its idempotency key, so neither
        # needs a unique index of its own (storage.natural_keys).
        c.INBOX: [
            IndexModel([("status", ASCENDING), ("received_at", ASCENDING)]),
        ],
        c.OUTBOX: [
            # Due retries; for sent messages, when they were sent (what an SMS "k" answers).
            IndexModel([("status", ASCENDING), ("next_attempt_at", ASCENDING)]),
            # The few messages that carry an alert: which alert a quoted reply answers.
            IndexModel([("meta.alert_code", ASCENDING)], sparse=True),
        ],
        c.RUNS: [
            IndexModel([("kind", ASCENDING), ("job_id", ASCENDING), ("started_at", DESCENDING)]),
            # Scheduler: finished runs since the last pulse; runs left "running" by a crash.
            IndexModel([("kind", ASCENDING), ("ended_at", DESCENDING)]),
            IndexModel([("status", ASCENDING), ("started_at", ASCENDING)]),
            # Dashboard: every run of the last 7 days, whatever its kind.
            IndexModel([("started_at", DESCENDING)]),
            # Scheduler: fires to try again (set only while a retry is pending).
            IndexModel([("retry_at", ASCENDING)], sparse=True),
        ],
        # Scheduler: due jobs are the enabled ones whose next fire has passed.
        c.CRONJOBS: [IndexModel([("enabled", ASCENDING), ("next_fire_at", ASCENDING)])],
        c.ALERTS: [
            IndexModel([("code", ASCENDING)], unique=True),
            IndexModel([("status", ASCENDING), ("dedupe_key", ASCENDING)]),
            # One unresolved alert per dedupe key (set while unresolved, unset on resolve).
            IndexModel([("open_key", ASCENDING)], unique=True, sparse=True),
            IndexModel([("next_escalation_at", ASCENDING)], sparse=True),
            IndexModel([("status", ASCENDING), ("last_sent_at", DESCENDING)]),
        ],
        c.LEASES: [
            IndexModel([("key", ASCENDING)], unique=True),
            # Scheduler: fire leases expire a week after they were taken.
            IndexModel([("expires_at", ASCENDING)], expireAfterSeconds=0),
        ],
        c.WHATSAPP_PERMISSIONS: [IndexModel([("phone_number", ASCENDING)], unique=True)],
        # Side-effect results are needed only while an exchange may still be replayed.
        c.TOOL_EFFECTS: [IndexModel([("created_at", ASCENDING)], expireAfterSeconds=7 * 86400)],
        # Pairing codes and "try later" notes expire; paired owners have no expires_at.
        c.PAIRING: [
            IndexModel([("kind", ASCENDING), ("expires_at", ASCENDING)]),
            IndexModel([("expires_at", ASCENDING)], expireAfterSeconds=0),
        ],
    }
)


OBSOLETE: Mapping[str, Sequence[str]] = MappingProxyType(
    {
        # Replays look among the conversation's newest messages instead (2026-11).
        c.MESSAGES: ["inbox_id_1"],
    }
)
"""Indexes earlier versions built that nothing reads any more: every write paid for them."""


async def drop_index(coll: AsyncCollection[dict[str, Any]], name: str) -> None:
    """Drop the index ``name``; nothing to do when the index or the collection is absent."""
    try:
        await coll.drop_index(name)
    except OperationFailure as exc:
        if exc.code not in (IndexNotFound, NamespaceNotFound):
            raise


async def drop_obsolete(db: AsyncDatabase[dict[str, Any]]) -> None:
    """Drop ``OBSOLETE`` indexes a store still has; one command each, none if absent."""
    for name, indexes in OBSOLETE.items():
        for index in indexes:
            await drop_index(db[name], index)


async def ensure_indexes(db: AsyncDatabase[dict[str, Any]]) -> None:
    for name, models in INDEXES.items():
        await db[name].create_indexes(list(models))
    await drop_obsolete(db)
