"""Which alert a reply answers, read from what was sent (the outbox).

Telegram says which message a reply quotes; SMS and WhatsApp do not, so there a
reply answers an alert only when the alert is the last thing sent to that chat (or to
any of the owner's chats, for words that could as well be conversation) and was sent
recently. A confirmation ("#12 snoozed for 1h") carries its alert's code
too, but it is not the alert itself: a "thx" to it acknowledges nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo import DESCENDING
from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c
from storage.retry import INSERT_FIELD

Doc = dict[str, Any]
ALERT_KEY_PREFIX = "alert:"
"""Outbox keys of alert deliveries and pages (``alert:<code>:<seq>:<channel>``)."""
ALERT_CODE = "meta.alert_code"
"""Set on the outbox messages that carry an alert (sparse index, ``storage.collections``)."""
LOOKUP_BATCH = 50


@dataclass(frozen=True)
class SentAlert:
    """A message that carried an alert: the alert's code, and whether it was the alert."""

    code: str
    is_alert: bool


def _sent_alert(doc: Doc | None) -> SentAlert | None:
    """The alert an outbox row carried, read here once; None when it carried none."""
    meta = (doc or {}).get("meta")
    code = meta.get("alert_code") if isinstance(meta, dict) else None
    if doc is None or code is None:
        return None
    return SentAlert(str(code), str(doc.get("idempotency_key", "")).startswith(ALERT_KEY_PREFIX))


async def replied_alert(
    db: AsyncDatabase[Doc], channel: str, chat_id: str, external_id: str
) -> SentAlert | None:
    """The alert carried by the message ``external_id`` that a reply quotes.

    Telegram message ids are only unique within a chat, so the chat must match
    there; other transports' ids are global (and their chat ids may be spelled
    differently inbound, e.g. a WhatsApp JID for a phone number). Only messages that
    carry an alert are looked at (the sparse ``meta.alert_code`` index): any quoted
    reply asks this, and the outbox holds every message ever sent.
    """
    ids: list[Any] = [external_id]
    if external_id.isdigit():
        ids.append(int(external_id))
    query: Doc = {ALERT_CODE: {"$exists": True}, "channel": channel, "external_ids": {"$in": ids}}
    if channel == "telegram":  # storage names channels as they are stored
        query["chat_id"] = chat_id
    doc = await db[c.OUTBOX].find_one(query, projection={"meta": 1, "idempotency_key": 1})
    return _sent_alert(doc)


async def last_sent_alert(
    db: AsyncDatabase[Doc], channel: str, chats: Iterable[str], since: datetime
) -> str | None:
    """The alert code of the last message sent on ``channel`` to ``chats``, when that
    message was an alert sent since ``since``; None when anything else came after it."""
    return await last_sent_to(db, [(channel, chat) for chat in chats], since)


async def last_sent_to(
    db: AsyncDatabase[Doc], chats: Iterable[tuple[str, str]], since: datetime
) -> str | None:
    """The alert code of the last message sent to any of ``chats`` (channel, chat id),
    when that message was an alert sent since ``since``; None when anything else came
    after it (an answer, a confirmation, another chat's message to the same person).

    Read through the (status, next_attempt_at) index, which for a sent message holds
    the time it was sent (``channels.delivery.outbox``): only what was sent since ``since`` is
    read, newest first, whatever the outbox holds. The filter names only the index's
    fields: SecantusDB scans the whole collection when a filter adds others.
    """
    wanted = set(chats)
    cursor = db[c.OUTBOX].find(
        {"status": "sent", "next_attempt_at": {"$gte": since}},
        # Sent in the same millisecond: the later insert first (retry.INSERT_FIELD, an
        # ObjectId; _id is the idempotency key, storage.collections).
        sort=[("next_attempt_at", DESCENDING), (INSERT_FIELD, DESCENDING), ("_id", DESCENDING)],
        projection={"channel": 1, "chat_id": 1, "meta": 1, "idempotency_key": 1},
        batch_size=LOOKUP_BATCH,
    )
    async with cursor:
        async for doc in cursor:
            if (doc.get("channel"), doc.get("chat_id")) in wanted:
                found = _sent_alert(doc)
                return found.code if found is not None and found.is_alert else None
    return None
