"""Messages the agent wanted to send to someone the owner has not approved, held until
the owner confirms in chat ("send 4711") or declines ("cancel 4711").

The sends one exchange holds (one chat message answered, one cron or pulse run) form
one group under one code, so a fan-out to twenty new numbers is one question to the
owner. A group lives in ``settings`` under ``held_send:<code>``, with the exchange's
id: readable by the model (its own words), writable only here. Guarantees:

1. A send is in its exchange's group once: the same message held again (a replayed
   exchange) is not added twice (``$addToSet``).
2. A group has a ``key`` no other group ever has (codes are reused, keys are not):
   the outbox keys of its question and of its sends derive from it, so a confirmation
   replayed after a crash half-way, or sent twice, queues each send once.
3. An approved group stays approved until ``release`` (its sends queued): it can no
   longer be declined, and a second "send" finishes what a first one left.
4. A declined or expired group is never sent; unconfirmed groups expire after a day.
"""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from storage import collections as c

PREFIX = "held_send:"
KEEP = timedelta(days=1)
Doc = dict[str, Any]


@dataclass(frozen=True)
class HeldSend:
    """One message waiting for the owner."""

    channel: str
    chat_id: str
    text: str


@dataclass(frozen=True)
class HeldGroup:
    """The sends one exchange held, approved or declined together by ``code``."""

    code: str
    key: str
    """This group's own id, never another's (guarantee 2)."""
    sends: tuple[HeldSend, ...]


def _group(doc: Doc) -> HeldGroup:
    code = str(doc["_id"]).removeprefix(PREFIX)
    key = str(doc.get("key") or f"{code}:{doc.get('held_at')}")
    if "sends" not in doc:  # held one by one before groups existed
        return HeldGroup(code, key, (HeldSend(doc["channel"], doc["chat_id"], doc["text"]),))
    sends = tuple(HeldSend(s["channel"], s["chat_id"], s["text"]) for s in doc["sends"])
    return HeldGroup(code, key, sends)


def _open(now: datetime) -> Doc:
    """Still waiting for the owner: neither approved nor expired."""
    return {"approved": {"$exists": False}, "held_at": {"$gt": now - KEEP}}


class HeldSends:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._coll = db[c.SETTINGS]

    async def hold(self, send: HeldSend, now: datetime, *, exchange: str | None) -> HeldGroup:
        """Add ``send`` to the open group of ``exchange`` (a new group when it has none,
        or when ``exchange`` is None: an exchange without a stable id)."""
        if exchange is not None:
            doc = await self._coll.find_one_and_update(
                {"_id": {"$regex": f"^{PREFIX}"}, "exchange": exchange, **_open(now)},
                {"$addToSet": {"sends": asdict(send)}},
                return_document=ReturnDocument.AFTER,
            )
            if doc is not None:
                return _group(doc)
        for _ in range(5):
            code = f"{secrets.randbelow(9000) + 1000}"
            doc = {
                "_id": PREFIX + code,
                "key": secrets.token_hex(8),
                "exchange": exchange,
                "sends": [asdict(send)],
                "held_at": now,
            }
            try:
                await self._coll.insert_one(doc)
            except DuplicateKeyError:
                continue
            return _group(doc)
        raise RuntimeError("could not allocate a confirmation code")

    async def waiting(self, code: str, now: datetime) -> HeldGroup | None:
        """The open group of ``code``, as the owner is to be asked about it."""
        doc = await self._coll.find_one({"_id": PREFIX + code, **_open(now)})
        return _group(doc) if doc is not None else None

    async def approve(self, code: str, now: datetime) -> HeldGroup | None:
        """The group of ``code``, now approved (or approved before and not yet
        released); None when unknown, expired or declined."""
        doc = await self._coll.find_one_and_update(
            {"_id": PREFIX + code, "$or": [{"approved": True}, _open(now)]},
            {"$set": {"approved": True}},
            return_document=ReturnDocument.AFTER,
        )
        return _group(doc) if doc is not None else None

    async def release(self, group: HeldGroup) -> None:
        """Forget an approved group once its sends are queued."""
        await self._coll.delete_one({"_id": PREFIX + group.code, "approved": True})

    async def decline(self, code: str, now: datetime) -> HeldGroup | None:
        """Drop the open group of ``code``; what it held, or None when there was none."""
        doc = await self._coll.find_one_and_delete({"_id": PREFIX + code, **_open(now)})
        return _group(doc) if doc is not None else None
