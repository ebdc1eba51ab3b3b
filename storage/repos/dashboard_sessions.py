"""Dashboard logouts remembered across restarts: the ``settings`` document
``dashboard_sessions`` maps each revoked session id to when its cookie would have
expired anyway (``agent.app.dashboard.auth`` checks cookies against it).
"""

from __future__ import annotations

from datetime import datetime

from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c
from storage import retry
from storage.ejson import aware
from storage.records import Doc

DOC_ID = "dashboard_sessions"
MAX_REVOKED = 1000
"""Logouts remembered at most (the soonest to expire are dropped first)."""


class RevokedStore:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._coll = db[c.SETTINGS]

    async def load(self, now: datetime) -> dict[str, datetime]:
        """The sessions revoked whose cookies have not expired by ``now``; a damaged
        entry (or document) is none."""
        doc = await self._coll.find_one({"_id": DOC_ID})
        stored = doc.get("revoked", {}) if doc is not None else {}
        found: dict[str, datetime] = {}
        if isinstance(stored, dict):
            for sid, until in stored.items():
                moment = aware(until)
                if moment is not None and moment > now:
                    found[str(sid)] = moment
        return found

    async def save(self, revoked: dict[str, datetime]) -> None:
        """Remember ``revoked`` (the ``MAX_REVOKED`` expiring last)."""
        kept = dict(sorted(revoked.items(), key=lambda item: item[1])[-MAX_REVOKED:])
        await retry.retried(  # a whole-field $set: safe to repeat
            lambda: self._coll.update_one(
                {"_id": DOC_ID}, {"$set": {"revoked": kept}}, upsert=True
            ),
            "remember a dashboard logout",
        )
