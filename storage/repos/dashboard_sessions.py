"""Dashboard logouts that survive a restart: the ``settings`` document
``dashboard_sessions`` maps each revoked session id to when its cookie would have
expired anyway (then it is dropped). ``agent.app.dashboard.auth`` loads it when the web
app starts and writes it at each logout.

A damaged entry (edited by hand, half-written by an older version) is skipped; the
others still count.
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
    """The revoked session ids and when each would have expired."""

    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._coll = db[c.SETTINGS]

    async def load(self, now: datetime) -> dict[str, datetime]:
        """The logouts whose cookies would still be valid after ``now``."""
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
        """Keep ``revoked`` (the ``MAX_REVOKED`` latest to expire) in place of the last."""
        kept = dict(sorted(revoked.items(), key=lambda item: item[1])[-MAX_REVOKED:])
        await retry.retried(  # a whole-field $set: safe to repeat
            lambda: self._coll.update_one(
                {"_id": DOC_ID}, {"$set": {"revoked": kept}}, upsert=True
            ),
            "remember a dashboard logout",
        )
