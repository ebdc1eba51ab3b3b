"""The ``outbox`` collection's store: every query and write of the outbox
(``channels.delivery.outbox``) goes through here, in and out as ``OutboxRow``.

Writes on a reply's way to its send (``add``, ``record``) are plain functions handing
back the write to await: the outbox waits in the write itself, not in a step of ours
around it (``bench/bench_hops.py`` counts every function of ours waited in).
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime

from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c
from storage import retry
from storage.coalesce import GroupCommit, Outcomes, insert_each
from storage.ejson import aware
from storage.records import Doc, each
from storage.repos.outbox_row import OutboxRow

Chat = tuple[str, str]
"""A chat's channel and id."""
UNSENT = {"status": {"$in": ["pending", "sending"]}}


@dataclass(frozen=True, slots=True)
class Backlog:
    """What the outbox holds unsent: waiting or in their send, given up on, and when
    the oldest waiting one was queued."""

    pending: int
    failed: int
    oldest_pending_at: datetime | None


class OutboxStore:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._coll = db[c.OUTBOX]
        self._insert = GroupCommit(insert_each(self._coll, keyed=True))
        # After a send: its own command at once, never a batch (channels.delivery.outbox).
        self._record = insert_each(self._coll, keyed=True)

    def add(self, row: OutboxRow) -> Awaitable[None]:
        """Store a queued ``row`` together with rows stored meanwhile
        (``storage.coalesce``); retried once on a dropped connection, a retry meeting
        its own copy (same ``_id``) is success. Raises ``DuplicateKeyError`` when its
        idempotency key is stored already."""
        return self._insert(row.to_doc())

    def record(self, row: OutboxRow) -> Awaitable[Outcomes]:
        """Store a row whose send is over (``row.status`` says how it went) by one
        insert of its own, retried once (its own copy is success); the outcome of the
        one insert, as ``insert_each`` gives it."""
        doc = {**row.to_doc(), **row.outcome_doc()}
        if row.info:
            doc["info"] = dict(row.info)
        return self._record([doc])

    async def settle(self, row: OutboxRow) -> None:
        """Store how a claimed row's send went (``row.status``): a ``$set`` by ``_id``,
        so retried once; a lost "sent" would have it sent again."""
        fields = {**row.outcome_doc(), **{f"info.{k}": v for k, v in row.info.items()}}
        what = {"sent": "mark sent", "failed": "mark failed"}.get(row.status, "requeue")
        await retry.retried(
            lambda: self._coll.update_one({"_id": row.idempotency_key}, {"$set": fields}), what
        )

    async def claim(self, chat: Chat, now: datetime) -> OutboxRow | None:
        """Take ``chat``'s oldest row due by ``now`` (``pending`` -> ``sending``, one
        more attempt); None when it has none. ``BadRecord`` when the row is damaged."""
        channel, chat_id = chat
        # A claim tagged with a token, so a retry after a dropped connection finds the
        # message the first try took instead of taking (and stranding) a second one.
        doc = await retry.claim(
            self._coll,
            {
                "channel": channel,
                "chat_id": chat_id,
                "next_attempt_at": {"$lte": now},
                "status": "pending",
            },
            {"$set": {"status": "sending", "claimed_at": now}, "$inc": {"attempts": 1}},
            sort=[("created_at", 1)],
        )
        return None if doc is None else OutboxRow.from_doc(doc)

    async def due_chats(self, now: datetime, scan: int) -> list[Chat]:
        """The chats with a row due by ``now``, the oldest row's first, looking at the
        ``scan`` oldest due rows."""
        due = self._coll.find(
            {"status": "pending", "next_attempt_at": {"$lte": now}},
            projection=OutboxRow.CHAT_FIELDS,
            sort=[("created_at", 1)],
            limit=scan,
        )
        return list(dict.fromkeys([OutboxRow.chat_of(d) async for d in due]))

    async def requeue_sending(self, claimed_before: datetime | None = None) -> None:
        """Rows left ``sending`` (claimed before ``claimed_before``; None: all) go back
        to ``pending``. A ``$set``: retried once."""
        query: Doc = {"status": "sending"}
        if claimed_before is not None:
            query["claimed_at"] = {"$lt": claimed_before}
        await retry.retried(
            lambda: self._coll.update_many(query, {"$set": {"status": "pending"}}), "recover"
        )

    async def get(self, idempotency_key: str) -> OutboxRow | None:
        """The row stored under this key (where it went and what it said), or None."""
        doc = await self._coll.find_one(
            {"_id": idempotency_key}, projection={"text": 1, "channel": 1, "chat_id": 1}
        )
        return None if doc is None else OutboxRow.from_doc(doc)

    async def has(self, idempotency_key: str) -> bool:
        """Whether a row with this key was ever stored (its ``_id``)."""
        found = await self._coll.find_one({"_id": idempotency_key}, projection={"_id": 1})
        return found is not None

    async def unsent_count(self) -> int:
        """Rows waiting for their send or in it."""
        return await self._coll.count_documents(UNSENT)

    async def backlog(self) -> Backlog:
        """The rows unsent and given up on, and the oldest unsent one's queueing time."""
        pending = await self._coll.count_documents(UNSENT)
        failed = await self._coll.count_documents({"status": "failed"})
        oldest = None
        if pending:
            first = await self._coll.find_one(
                UNSENT, projection={"created_at": 1}, sort=[("created_at", 1)]
            )
            oldest = None if first is None else aware(first.get("created_at"))
        return Backlog(pending, failed, oldest)

    async def failed(self, limit: int) -> list[OutboxRow]:
        """The rows given up on (at most ``limit``); a damaged one is logged and skipped."""
        rows = await self._coll.find({"status": "failed"}, limit=limit).to_list()
        return each(rows, OutboxRow.from_doc, "outbox row")
