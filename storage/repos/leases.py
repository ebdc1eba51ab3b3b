"""Fire claims in ``leases``: one document per claimed fire under a unique ``key``, so
a fire runs once.

Two processes on one database may both wake for the same fire; whichever inserts its
key (``scheduler.fires.claims`` names them) first owns it and the other sees a
duplicate key. Leases outlive the grace window by far (a week), then a TTL index or
``prune`` removes them.

A claim survives one dropped connection: each lease document carries an ``_id`` made
here, so after a retry the leases this process holds are the ones stored with its ids
(the lost first try may have taken some), not merely the ones the retry inserted.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from bson import ObjectId
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import AutoReconnect, BulkWriteError, DuplicateKeyError

from storage import collections as c
from storage import retry
from storage.records import Doc

log = logging.getLogger(__name__)
LEASE_KEEP = timedelta(days=7)
DUPLICATE_KEY = 11000


class LeaseStore:
    def __init__(self, db: AsyncDatabase[Doc], owner: str) -> None:
        self._coll = db[c.LEASES]
        self.owner = owner
        """Which process holds a lease (its boot id, ``scheduler.fires.leases``): for
        diagnosis only."""

    def _lease(self, key: str, now: datetime) -> Doc:
        return {
            "_id": ObjectId(),
            "key": key,
            "owner": self.owner,
            "created_at": now,
            "expires_at": now + LEASE_KEEP,
        }

    async def acquire(self, key: str, now: datetime) -> bool:
        """True when this process now owns ``key``; False when another one does."""
        try:
            await retry.insert(self._coll, self._lease(key, now))
        except DuplicateKeyError:
            return False
        return True

    async def acquire_many(self, keys: list[str], now: datetime) -> set[str]:
        """The subset of ``keys`` this process now owns, in one round trip."""
        if not keys:
            return set()
        docs = [self._lease(key, now) for key in keys]
        for last in (False, True):  # once more after a dropped connection
            try:
                await self._coll.insert_many(docs, ordered=False)
            except BulkWriteError as exc:
                errors = exc.details.get("writeErrors", [])
                if any(error.get("code") != DUPLICATE_KEY for error in errors):
                    raise
                if not last:
                    taken = {int(error["index"]) for error in errors}
                    return {key for index, key in enumerate(keys) if index not in taken}
            except AutoReconnect as exc:
                if last or not retry.transient(exc):
                    raise
                log.warning("claiming leases: connection lost (%s); trying once more", exc)
                continue
            if not last:
                return set(keys)
        # The lost first try may have taken some: ours are the ones stored with our ids.
        ids = [doc["_id"] for doc in docs]
        ours = {d["key"] async for d in self._coll.find({"_id": {"$in": ids}}, {"key": 1})}
        return {key for key in keys if key in ours}

    async def release(self, key: str) -> None:
        """Let go of ``key`` if this process holds it (a run asked for by hand ended)."""
        await retry.retried(  # deleting twice deletes nothing more
            lambda: self._coll.delete_one({"key": key, "owner": self.owner}), "release a lease"
        )

    async def release_stale(self, key: str, before: datetime) -> bool:
        """Whether ``key`` is free after removing its lease if taken before ``before``
        (a claim whose process stopped before it recorded anything)."""
        await retry.retried(  # deleting twice deletes nothing more
            lambda: self._coll.delete_one({"key": key, "created_at": {"$lt": before}}),
            "release a stale lease",
        )
        return await self._coll.find_one({"key": key}, projection={"_id": 1}) is None

    async def prune(self, now: datetime) -> int:
        """Remove expired leases (a backstop where the TTL index is not honoured)."""
        result = await retry.retried(  # deleting what expired twice deletes nothing more
            lambda: self._coll.delete_many({"expires_at": {"$lt": now}}), "prune leases"
        )
        return result.deleted_count
