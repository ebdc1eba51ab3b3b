"""Inbox rows as the pipeline reads and writes them: a row read back as a message, a
burst's rows merged into one, each reply as an outbox message keyed by its row (so a
message handled again after a crash produces no second reply), and why a message
could not be stored.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bson import ObjectId
from bson.errors import BSONError
from pymongo.errors import OperationFailure

from channels.delivery.text import clean_text
from channels.types import InboundMessage, OutboundMessage, Reply

Doc = dict[str, Any]
REASON_LIMIT = 300
_UNSTORABLE_CODES = frozenset({2, 15, 52, 10334, 17280})
"""Server refusals of the document itself (bad value, overflow, field names, too large)."""


def unstorable(exc: Exception) -> bool:
    """Whether inserting failed because of the document itself, not the database: a
    value BSON cannot hold, nesting too deep, too large. Anything else (a network or
    server failure) may pass, so the transport is asked to deliver again."""
    if isinstance(exc, OperationFailure):
        return exc.code in _UNSTORABLE_CODES
    poison = (BSONError, UnicodeError, OverflowError, RecursionError, ValueError, TypeError)
    return isinstance(exc, poison)


def failure_reason(exc: BaseException) -> str:
    """A failure as the operator reads it in the inbox row (short, one line)."""
    text = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    return clean_text(text)[:REASON_LIMIT]


def message_of(doc: Doc) -> InboundMessage:
    return InboundMessage(
        channel=doc["channel"],
        external_id=doc["external_id"],
        chat_id=doc["chat_id"],
        sender_id=doc["sender_id"],
        text=doc["text"],
        received_at=doc["received_at"],
        sender_name=doc.get("sender_name", ""),
        reply_to=doc.get("reply_to"),
        meta=doc.get("meta", {}),
    )


def merged(docs: list[Doc]) -> InboundMessage:
    """One message for a burst: the first one's identity, every text in order."""
    first = message_of(docs[0])
    if len(docs) == 1:
        return first
    last = message_of(docs[-1])
    return dataclasses.replace(
        first,
        text="\n".join(str(d["text"]) for d in docs),
        received_at=last.received_at,
        sender_name=last.sender_name or first.sender_name,
        meta={**first.meta, "message_ids": [d["external_id"] for d in docs]},
    )


def reply_key(inbox_id: ObjectId, n: int) -> str:
    """The idempotency key of the ``n``-th reply to the inbox row ``inbox_id``."""
    return f"{inbox_id}:{n}"


def reply_message(
    message: InboundMessage, inbox_id: ObjectId, n: int, reply: Reply
) -> OutboundMessage:
    return OutboundMessage(
        channel=reply.channel or message.channel,
        chat_id=reply.chat_id or message.chat_id,
        text=reply.text,
        idempotency_key=reply_key(inbox_id, n),
        buttons=reply.buttons,
        meta=reply.meta,
    )
