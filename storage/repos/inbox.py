"""The inbox as its readers see it: a row as a typed value (``InboxRow``), read once
here (``InboxRow.from_doc``) and written from it (``InboxRow.to_doc``), and the rows
received within a window.

The inbox keeps every message ever received. A question about recent ones ("how many
from this contact in the last minute", "what is new since the last pulse", "the last
20 from my contacts") must read only those: SecantusDB answers a range on
``received_at`` from the index only when the filter names nothing but the index's
fields with an equality on ``status`` (``$in``, or any other field, and it scans the
whole collection). So each status is asked on its own (``received_since``) and
anything else is checked in Python.

What is stored does not change with this type: the field names are the ones the
pipeline (``channels.delivery``) has always written, and a row from an older version
loads (a field it lacks takes its default).
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
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import OperationFailure

from storage import collections as c
from storage.records import BadRecord, Doc, mapping, maybe_text, moment, parsed, text, whole

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
_EMPTY: Mapping[str, Any] = MappingProxyType({})


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


@dataclass(frozen=True, slots=True)
class MediaEntry:
    """One photo or voice note of an inbox row (its ``media`` list), from announced
    (``pending``, with ``source``: how its channel fetches it) to ``stored`` (a GridFS
    file) or why not (``too_large``, ``refused``, ``failed``, with a ``note`` for the
    model). ``channels.delivery.media`` fetches it."""

    kind: str
    """``image`` or ``audio``."""
    mime: str = ""
    size: int | None = None
    duration_s: int | None = None
    name: str = ""
    source: Mapping[str, Any] = field(default_factory=dict)
    status: str = "pending"
    file_id: ObjectId | None = None
    note: str | None = None
    transcript: str | None = None

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> MediaEntry:
        file_id = doc.get("file_id")
        if isinstance(file_id, str) and ObjectId.is_valid(file_id):
            file_id = ObjectId(file_id)
        if file_id is not None and not isinstance(file_id, ObjectId):
            raise BadRecord(f"media file_id is {file_id!r}, not an id")
        return cls(
            kind=text(doc, "kind"),
            mime=text(doc, "mime"),
            size=_count(doc, "size"),
            duration_s=_count(doc, "duration_s"),
            name=text(doc, "name"),
            source=mapping(doc, "source") or {},
            status=text(doc, "status", "pending"),
            file_id=file_id,
            note=maybe_text(doc, "note"),
            transcript=maybe_text(doc, "transcript"),
        )

    def to_doc(self) -> Doc:
        doc: Doc = {
            "kind": self.kind, "mime": self.mime, "size": self.size,
            "duration_s": self.duration_s, "name": self.name, "source": dict(self.source),
            "status": self.status,
        }  # fmt: skip
        optional = {"file_id": self.file_id, "note": self.note, "transcript": self.transcript}
        doc.update({k: v for k, v in optional.items() if v is not None})
        return doc


def _count(doc: Mapping[str, Any], name: str) -> int | None:
    """A whole number a transport announced (size, seconds); None if absent."""
    return whole(doc, name) if doc.get(name) is not None else None


@dataclass(frozen=True, slots=True)
class InboxRow:
    """One received message as stored in ``inbox``: who sent it where, its words, its
    transport fields, and how far its handling got."""

    id: ObjectId
    channel: str
    external_id: str
    chat_id: str
    sender_id: str
    text: str
    received_at: datetime
    sender_name: str = ""
    reply_to: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    conversation_key: str = ""
    status: str = "pending"
    attempts: int = 1
    claimed_at: datetime | None = None
    media: tuple[MediaEntry, ...] = ()
    """The message's photos and voice notes (``channels.delivery.media`` fetches them)."""
    burst_ids: tuple[ObjectId, ...] = ()
    """The rows of the burst this row leads, in order (none: not a leader)."""
    burst_leader: ObjectId | None = None
    """The row that leads this row's burst (None: none, or itself)."""
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)
    """What a failed row also keeps (``error``, ``failed_at``): written, never read back."""

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> InboxRow:
        """The row ``doc`` holds; ``BadRecord`` (naming the field) if it cannot be one."""
        row_id = doc.get("_id")
        if not isinstance(row_id, ObjectId):
            raise BadRecord(f"_id is {row_id!r}, not an ObjectId")
        received = moment(doc, "received_at")
        if received is None:
            raise BadRecord("received_at is missing")
        media = doc.get("media") or ()
        if not isinstance(media, list | tuple) or not all(isinstance(m, Mapping) for m in media):
            raise BadRecord("media is not a list of documents")
        burst = doc.get("burst_ids") or ()
        if not isinstance(burst, list | tuple) or not all(isinstance(i, ObjectId) for i in burst):
            raise BadRecord("burst_ids is not a list of ids")
        leader = doc.get("burst_leader")
        if leader is not None and not isinstance(leader, ObjectId):
            raise BadRecord(f"burst_leader is {leader!r}, not an ObjectId")
        return cls(
            id=row_id,
            channel=text(doc, "channel"),
            external_id=text(doc, "external_id"),
            chat_id=text(doc, "chat_id"),
            sender_id=text(doc, "sender_id"),
            text=text(doc, "text"),
            received_at=received,
            sender_name=text(doc, "sender_name"),
            reply_to=maybe_text(doc, "reply_to"),
            meta=mapping(doc, "meta") or _EMPTY,
            conversation_key=text(doc, "conversation_key"),
            status=text(doc, "status", "pending"),
            attempts=whole(doc, "attempts", 1),
            claimed_at=moment(doc, "claimed_at"),
            media=tuple(MediaEntry.from_doc(m) for m in media),
            burst_ids=tuple(burst),
            burst_leader=leader,
        )

    def to_doc(self) -> Doc:
        """The row as it is stored (``_id`` its own key: ``storage.collections.inbox_key``)."""
        doc: Doc = {
            "_id": self.id,
            "channel": self.channel,
            "external_id": self.external_id,
            "chat_id": self.chat_id,
            "sender_id": self.sender_id,
            "sender_name": self.sender_name,
            "text": self.text,
            "reply_to": self.reply_to,
            "meta": dict(self.meta),
            "received_at": self.received_at,
            "conversation_key": self.conversation_key,
            "status": self.status,
            "attempts": self.attempts,
        }
        if self.claimed_at is not None:
            doc["claimed_at"] = self.claimed_at
        if self.media:
            doc["media"] = [m.to_doc() for m in self.media]
        doc.update(self.extra)
        return doc


async def received_since(
    inbox: AsyncCollection[Doc],
    since: datetime | None,
    *,
    until: datetime | None = None,
    statuses: Iterable[str] = STATUSES,
    projection: Mapping[str, Any] | None = None,
) -> AsyncIterator[Doc]:
    """The rows received after ``since`` (ever, if None) and up to ``until`` (now, if
    None) with one of ``statuses``, status by status, as stored (``projection``: only
    those fields; the readers below make records of them)."""
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


async def burst_rows(db: AsyncDatabase[Doc], lead_id: str) -> list[InboxRow]:
    """The row ``lead_id``, or every row of the burst it leads, in order (none: gone)."""
    inbox = db[c.INBOX]
    lead = await inbox.find_one({"_id": ObjectId(lead_id)})
    if lead is None:
        return []
    row = InboxRow.from_doc(lead)
    if not row.burst_ids:
        return [row]
    found = {row.id: row}
    async for doc in inbox.find({"_id": {"$in": [i for i in row.burst_ids if i != row.id]}}):
        member = InboxRow.from_doc(doc)
        found[member.id] = member
    return [found[i] for i in row.burst_ids if i in found]


async def unfinished(
    inbox: AsyncCollection[Doc], query: Mapping[str, Any]
) -> AsyncIterator[tuple[str, ObjectId]]:
    """The conversation and ``_id`` of each row ``query`` finds, oldest first: what a
    dead process left to handle (``channels.delivery.intake``)."""
    cursor = inbox.find(query, projection={"conversation_key": 1}, sort=[("received_at", 1)])
    async with cursor:
        async for doc in cursor:
            yield str(doc.get("conversation_key", "")), doc["_id"]


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
    db: AsyncDatabase[Doc], since: datetime, *, statuses: Iterable[str] = STATUSES
) -> list[Arrival]:
    """The messages received after ``since`` with one of ``statuses``, as ``Arrival``s."""
    rows = received_since(db[c.INBOX], since, statuses=statuses, projection=Arrival.FIELDS)
    return [Arrival.from_doc(doc) async for doc in rows]


async def newest_received(
    db: AsyncDatabase[Doc], keep: Callable[[InboxRow], bool], limit: int, now: datetime
) -> list[InboxRow]:
    """The ``limit`` newest rows ``keep`` accepts, newest first: read a window at a time
    back from ``now`` (``SPANS``), so a question about recent messages reads recent rows
    only. Exact: once ``limit`` rows are found back to a window's start, nothing older
    can be among the newest. A row that does not parse is logged and skipped."""
    found: list[InboxRow] = []
    until: datetime | None = None  # the first window is open-ended: rows after ``now`` too
    for since in [now - span for span in SPANS] + [None]:
        async for doc in received_since(db[c.INBOX], since, until=until):
            row = parsed(doc, InboxRow.from_doc, "inbox row")
            if row is not None and keep(row):
                found.append(row)
        if len(found) >= limit:
            break
        until = since
    found.sort(key=lambda row: row.received_at, reverse=True)
    return found[:limit]
