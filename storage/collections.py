"""The collections: their names, what the model may write, the indexes built at
start-up, and the keys inbox and outbox rows are stored under (DESIGN.md, Collections).

Keys instead of unique indexes: each message the transports deliver is stored once
(``channels.delivery.pipeline``) and each outbound message is sent once per idempotency
key (``channels.delivery.outbox``). A unique secondary index would enforce both, but in
SecantusDB every write of a row also writes each of its index entries, and a unique
index pays for a second table of claims on top. The ``_id`` index is there anyway, so
the key lives in ``_id``:

* an outbox row's ``_id`` is its idempotency key (the field is kept as well);
* an inbox row's ``_id`` is ``inbox_key(channel, external_id)``, an ``ObjectId`` made of
  12 bytes of BLAKE2b of the two, so everything that handles inbox ids is unchanged.

Stores written by earlier versions have rows with random ``ObjectId``s and the old
``(channel, external_id)`` and ``idempotency_key`` indexes. ``retire_legacy_keys`` runs
as the store opens:

* the outbox rows of the last ``REPLAY_WINDOW`` (the only ones a replay or an alert
  step can enqueue again) are copied under their key and the copies with the random
  ``_id`` removed; then the ``idempotency_key`` index is dropped. Each step can be
  repeated, so a crash half-way is finished by the next start. Older rows keep their
  ``_id``; nothing looks them up by key any more.
* inbox ids are referenced elsewhere (messages, replies' keys, media), so inbox rows
  keep theirs. The ``(channel, external_id)`` index keeps refusing redeliveries of
  them until no row received in the last ``REPLAY_WINDOW`` has an old-style id, and
  is dropped then.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from bson import ObjectId
from pymongo import ASCENDING, DESCENDING, IndexModel
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError, OperationFailure

log = logging.getLogger(__name__)
Doc = dict[str, Any]

SETTINGS = "settings"
CONVERSATIONS = "conversations"
MESSAGES = "messages"
INBOX = "inbox"
OUTBOX = "outbox"
RUNS = "runs"
ALERTS = "alerts"
CRONJOBS = "cronjobs"
WHATSAPP_PERMISSIONS = "whatsapp_permissions"
LEASES = "leases"
TOOL_EFFECTS = "tool_effects"
PAIRING = "pairing"
"""Telegram pairing codes and paired owners (``storage.repos.pairing``)."""
USAGE = "usage"
"""Model tokens per day and kind (chat, cron, pulse), for the dashboard's Spend page."""
MONITORS = "monitors"
"""http checks, heartbeats and change monitors (``storage.repos.monitors``)."""
MEMORIES = "memories"
"""Facts about the owner, one per record (``storage.repos.memories``)."""
MONITOR_CHECKS = "monitor_checks"
"""Each monitor's checks counted per hour and per day, and its latest response times
(``storage.repos.monitor_checks``)."""

PROTECTED: frozenset[str] = frozenset(
    {
        SETTINGS,
        CONVERSATIONS,
        MESSAGES,
        INBOX,
        OUTBOX,
        RUNS,
        ALERTS,
        CRONJOBS,
        WHATSAPP_PERMISSIONS,
        LEASES,
        TOOL_EFFECTS,
        PAIRING,
        USAGE,
        MONITORS,
        MEMORIES,
        MONITOR_CHECKS,
    }
)
MODEL_WRITABLE: frozenset[str] = frozenset({"master", "contacts", "schedule"})
AI_PREFIX = "ai_"


def model_may_write(name: str) -> bool:
    """True when the model may write ``name`` through ``db_query``."""
    return name in MODEL_WRITABLE or (name.startswith(AI_PREFIX) and len(name) > len(AI_PREFIX))


# Indexes created at start-up; ``create_index`` is idempotent.

IndexNotFound, NamespaceNotFound = 27, 26
"""Server error codes: nothing to drop."""

INDEXES: Mapping[str, Sequence[IndexModel]] = MappingProxyType(
    {
        CONVERSATIONS: [IndexModel([("key", ASCENDING), ("active", ASCENDING)])],
        # A replay finds its earlier answer among the conversation's newest messages
        # (ConversationRepo.answer_for), so inbox_id needs no index of its own.
        MESSAGES: [
            IndexModel([("conversation_id", ASCENDING), ("seq", ASCENDING)], unique=True),
        ],
        # A row's _id is its (channel, external_id) or its idempotency key, so neither
        # needs a unique index of its own (``inbox_key``).
        INBOX: [
            IndexModel([("status", ASCENDING), ("received_at", ASCENDING)]),
        ],
        OUTBOX: [
            # Due retries; for sent messages, when they were sent (what an SMS "k" answers).
            IndexModel([("status", ASCENDING), ("next_attempt_at", ASCENDING)]),
            # The few messages that carry an alert: which alert a quoted reply answers.
            IndexModel([("meta.alert_code", ASCENDING)], sparse=True),
        ],
        RUNS: [
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
        CRONJOBS: [IndexModel([("enabled", ASCENDING), ("next_fire_at", ASCENDING)])],
        ALERTS: [
            IndexModel([("code", ASCENDING)], unique=True),
            IndexModel([("status", ASCENDING), ("dedupe_key", ASCENDING)]),
            # One unresolved alert per dedupe key (set while unresolved, unset on resolve).
            IndexModel([("open_key", ASCENDING)], unique=True, sparse=True),
            IndexModel([("next_escalation_at", ASCENDING)], sparse=True),
            # Alert router: phone calls due (set only while a call is armed).
            IndexModel([("call_at", ASCENDING)], sparse=True),
            IndexModel([("status", ASCENDING), ("last_sent_at", DESCENDING)]),
        ],
        LEASES: [
            IndexModel([("key", ASCENDING)], unique=True),
            # Scheduler: fire leases expire a week after they were taken.
            IndexModel([("expires_at", ASCENDING)], expireAfterSeconds=0),
        ],
        WHATSAPP_PERMISSIONS: [IndexModel([("phone_number", ASCENDING)], unique=True)],
        # A heartbeat's ping made through another process finds its monitor by token.
        MONITORS: [
            IndexModel([("token_key", ASCENDING)], unique=True, sparse=True),
            # One monitor per slot below the cap: the cap holds under concurrent creates.
            IndexModel([("slot", ASCENDING)], unique=True, sparse=True),
        ],
        # One document per monitor, read by _id; it expires a month after its last
        # check (``storage.repos.monitor_checks``).
        MONITOR_CHECKS: [IndexModel([("expires_at", ASCENDING)], expireAfterSeconds=0)],
        # Side-effect results are needed only while an exchange may still be replayed.
        TOOL_EFFECTS: [IndexModel([("created_at", ASCENDING)], expireAfterSeconds=7 * 86400)],
        SETTINGS: [
            # Held groups (``storage.repos.held_sends``) and pending "ack all" questions
            # expire; every other settings document has no expires_at.
            IndexModel([("expires_at", ASCENDING)], expireAfterSeconds=0),
            # Each held call finds its exchange's open group (only groups have one).
            IndexModel([("exchange", ASCENDING)], sparse=True),
        ],
        # Pairing codes and "try later" notes expire; paired owners have no expires_at.
        PAIRING: [
            IndexModel([("kind", ASCENDING), ("expires_at", ASCENDING)]),
            IndexModel([("expires_at", ASCENDING)], expireAfterSeconds=0),
        ],
    }
)


OBSOLETE: Mapping[str, Sequence[str]] = MappingProxyType(
    {
        # Replays look among the conversation's newest messages instead (2026-11).
        MESSAGES: ["inbox_id_1"],
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


# Rows keyed by what identifies them (module docstring).

REPLAY_WINDOW = timedelta(days=7)
"""How long a message may be delivered again, or a send enqueued again (a replay after
a crash, an alert step tried again); also how long ``tool_effects`` are kept."""
LEGACY_INBOX_INDEX = "channel_1_external_id_1"
LEGACY_OUTBOX_INDEX = "idempotency_key_1"


def inbox_key(channel: str, external_id: str) -> ObjectId:
    """The ``_id`` of the inbox row of the message ``external_id`` on ``channel``."""
    raw = f"{len(channel)}:{channel}{external_id}".encode("utf-8", "surrogatepass")
    return ObjectId(hashlib.blake2b(raw, digest_size=12).digest())


async def retire_legacy_keys(db: AsyncDatabase[Doc], now: datetime) -> None:
    """Bring a store written by an earlier version to ``_id`` keys (module docstring);
    on a store that has none left, three small commands at start-up (an indexed read
    that finds nothing, a drop of an index that is gone, a list of the inbox's indexes),
    beside the index builds."""
    cutoff = now - REPLAY_WINDOW
    await _rekey_outbox(db[OUTBOX], cutoff)
    await _retire_inbox_index(db[INBOX], cutoff)


async def _rekey_outbox(outbox: AsyncCollection[Doc], cutoff: datetime) -> None:
    # Only ObjectIds compare with an ObjectId (type bracketing), so string keys are not
    # read: this is a range on the _id index holding the recent old-style rows alone.
    recent = [d async for d in outbox.find({"_id": {"$gte": ObjectId.from_datetime(cutoff)}})]
    await drop_index(outbox, LEGACY_OUTBOX_INDEX)  # else each copy would clash on it
    moved = 0
    for doc in recent:
        key = doc.get("idempotency_key")
        if not isinstance(doc["_id"], ObjectId) or not isinstance(key, str):
            continue  # already keyed (a server without type bracketing), or no key
        # A start that stopped before removing the original may have copied it already.
        with contextlib.suppress(DuplicateKeyError):
            await outbox.insert_one({**doc, "_id": key})
        await outbox.delete_one({"_id": doc["_id"]})
        moved += 1
    if moved:
        log.info("outbox: %d recent message(s) re-keyed by their idempotency key", moved)


async def _retire_inbox_index(inbox: AsyncCollection[Doc], cutoff: datetime) -> None:
    if LEGACY_INBOX_INDEX not in await inbox.index_information():
        return
    projection = {"channel": 1, "external_id": 1}
    # Status by status: the (status, received_at) index answers a range on received_at
    # only under an equality on status. The statuses are the pipeline's to name, so
    # they are read from the rows.
    for status in await inbox.distinct("status"):
        recent = {"status": status, "received_at": {"$gt": cutoff}}
        async for doc in inbox.find(recent, projection=projection):
            if doc["_id"] != inbox_key(str(doc.get("channel")), str(doc.get("external_id"))):
                return  # may still be delivered again: the old index keeps refusing it
    await drop_index(inbox, LEGACY_INBOX_INDEX)
    log.info("inbox: the (channel, external_id) index is no longer needed; dropped")
