"""Which alert a reply answers, read from what was sent (the outbox).

Telegram says which message a reply quotes; SMS and WhatsApp do not, so there a
reply answers an alert only when the alert is the last thing sent to that chat and
was sent recently. A confirmation ("#12 snoozed for 1h") carries its alert's code
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

Doc = dict[str, Any]
ALERT_KEY_PREFIX = "alert:"
"""Outbox keys of alert deliveries and pages (``alert:<code>:<seq>:<channel>``)."""


@dataclass(frozen=True)
class SentAlert:
    """A message that carried an alert: the alert's code, and whether it was the alert."""

    code: str
    is_alert: bool


def _sent_alert(doc: Doc | None) -> SentAlert | None:
    code = ((doc or {}).get("meta") or {}).get("alert_code")
    if doc is None or code is None:
        return None
    return SentAlert(str(code), str(doc.get("idempotency_key", "")).startswith(ALERT_KEY_PREFIX))


async def replied_alert(
    db: AsyncDatabase[Doc], channel: str, chat_id: str, external_id: str
) -> SentAlert | None:
    """The alert carried by the message ``external_id`` that a reply quotes.

    Telegram message ids are only unique within a chat, so the chat must match
    there; other transports' ids are global (and their chat ids may be spelled
    differently inbound, e.g. a WhatsApp JID for a phone number).
    """
    ids: list[Any] = [external_id]
    if external_id.isdigit():
        ids.append(int(external_id))
    query: Doc = {"channel": channel, "external_ids": {"$in": ids}}
    if channel == "telegram":
        query["chat_id"] = chat_id
    doc = await db[c.OUTBOX].find_one(query, projection={"meta": 1, "idempotency_key": 1})
    return _sent_alert(doc)


async def last_sent_alert(
    db: AsyncDatabase[Doc], channel: str, chats: Iterable[str], since: datetime
) -> str | None:
    """The alert code of the last message sent on ``channel`` to ``chats``, when that
    message was an alert sent since ``since``; None when anything else came after it."""
    doc = await db[c.OUTBOX].find_one(
        {"channel": channel, "chat_id": {"$in": list(dict.fromkeys(chats))}, "status": "sent"},
        sort=[("sent_at", DESCENDING), ("_id", DESCENDING)],
        projection={"meta": 1, "idempotency_key": 1, "sent_at": 1},
    )
    found = _sent_alert(doc)
    if doc is None or found is None or not found.is_alert:
        return None
    sent_at = doc.get("sent_at")
    return found.code if sent_at is not None and sent_at >= since else None
