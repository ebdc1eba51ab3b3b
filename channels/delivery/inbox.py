"""The inbox: rows as the pipeline reads and writes them, and rows received within a window.

The pipeline reads a burst's rows back as one ``Envelope`` (the message, and what the
pipeline knows about it), keys each reply in the outbox by its row (so a message
handled again after a crash produces no second reply), and says why a message could
not be stored.

The inbox keeps every message ever received. A question about recent ones ("how many
from this contact in the last minute", "what is new since the last pulse", "the last
20 from my contacts") must read only those: SecantusDB answers a range on
``received_at`` from the index only when the filter names nothing but the index's
fields with an equality on ``status`` (``$in``, or any other field, and it scans the
whole collection). So each status is asked on its own (``received_since``) and
anything else is checked in Python.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, ClassVar

from bson import ObjectId
from bson.errors import BSONError
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import OperationFailure

from channels.delivery.envelope import Envelope
from channels.delivery.text import clean_text
from channels.types import InboundMessage

Doc = dict[str, Any]
REASON_LIMIT = 300
_UNSTORABLE_CODES = frozenset({2, 15, 52, 10334, 17280})
"""Server refusals of the document itself (bad value, overflow, field names, too large)."""
STATUSES = ("pending", "processing", "done", "failed")
"""Every status an inbox row can have (``channels.delivery.pipeline`` writes them)."""
SPANS = (
    timedelta(hours=1),
    timedelta(days=1),
    timedelta(days=7),
    timedelta(days=30),
    timedelta(days=365),
)
"""How far back ``newest_received`` reads, window after window, before reading the rest."""


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


def envelope_of(docs: list[Doc]) -> Envelope:
    """The envelope of a burst's rows (one row: itself): the first one's identity, every
    text in order, the last one's time and name. Replayed when the leader's row counts
    an earlier attempt."""
    first, last = docs[0], docs[-1]
    meta = first.get("meta", {})
    if len(docs) > 1:
        meta = {**meta, "message_ids": [d["external_id"] for d in docs]}
    message = InboundMessage(
        channel=first["channel"],
        external_id=first["external_id"],
        chat_id=first["chat_id"],
        sender_id=first["sender_id"],
        text="\n".join(str(d["text"]) for d in docs),
        received_at=last["received_at"],
        sender_name=last.get("sender_name") or first.get("sender_name", ""),
        reply_to=first.get("reply_to"),
        meta=meta,
    )
    return Envelope(
        message,
        inbox_id=str(first["_id"]),
        replay=int(first.get("attempts", 1)) > 1,
        has_media=any(d.get("media") for d in docs),
    )


def reply_key(inbox_id: ObjectId, n: int) -> str:
    """The idempotency key of the ``n``-th reply to the inbox row ``inbox_id``."""
    return f"{inbox_id}:{n}"


async def received_since(
    inbox: AsyncCollection[Doc],
    since: datetime | None,
    *,
    until: datetime | None = None,
    statuses: Iterable[str] = STATUSES,
    projection: Mapping[str, Any] | None = None,
) -> AsyncIterator[Doc]:
    """The rows received after ``since`` (ever, if None) and up to ``until`` (now, if
    None) with one of ``statuses``, status by status."""
    window: Doc = {}
    if since is not None:
        window["$gt"] = since
    if until is not None:
        window["$lte"] = until
    for status in statuses:
        query: Doc = {"status": status, **({"received_at": window} if window else {})}
        cursor = inbox.find(query, projection=projection)
        async with cursor:
            async for doc in cursor:
                yield doc


@dataclass(frozen=True)
class Arrival:
    """A received message as the pulse's news and a contact's rate read it: who sent it
    on which channel, its words, its transport fields, and whether it was a stranger's
    (emptied when it came)."""

    channel: str
    sender_id: str
    text: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)
    stranger: bool = False

    FIELDS: ClassVar[Mapping[str, int]] = MappingProxyType(
        {"channel": 1, "sender_id": 1, "text": 1, "meta": 1, "stranger": 1}
    )
    """What ``arrivals_since`` reads of each row."""

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Arrival:
        meta = doc.get("meta")
        meta = meta if isinstance(meta, Mapping) else {}
        return cls(
            channel=str(doc.get("channel", "")),
            sender_id=str(doc.get("sender_id", "")),
            text=str(doc.get("text") or ""),
            meta=MappingProxyType(dict(meta))
            if isinstance(meta, Mapping)
            else MappingProxyType({}),
            stranger=doc.get("stranger") is True,
        )


async def arrivals_since(
    inbox: AsyncCollection[Doc], since: datetime, *, statuses: Iterable[str] = STATUSES
) -> list[Arrival]:
    """The messages received after ``since`` with one of ``statuses``, as ``Arrival``s."""
    rows = received_since(inbox, since, statuses=statuses, projection=Arrival.FIELDS)
    return [Arrival.from_doc(doc) async for doc in rows]


async def newest_received(
    inbox: AsyncCollection[Doc], keep: Callable[[Doc], bool], limit: int, now: datetime
) -> list[Doc]:
    """The ``limit`` newest rows ``keep`` accepts, newest first: read a window at a time
    back from ``now`` (``SPANS``), so a question about recent messages reads recent rows
    only. Exact: once ``limit`` rows are found back to a window's start, nothing older
    can be among the newest."""
    found: list[Doc] = []
    until: datetime | None = None  # the first window is open-ended: rows after ``now`` too
    for since in [now - span for span in SPANS] + [None]:
        found += [doc async for doc in received_since(inbox, since, until=until) if keep(doc)]
        if len(found) >= limit:
            break
        until = since
    found.sort(key=lambda doc: doc["received_at"], reverse=True)
    return found[:limit]
