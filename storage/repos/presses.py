"""Button presses claimed before they are applied, so each is applied once
(``agent.conversation.buttons``).

A claim lives in ``settings`` under ``press:<channel>:<chat>:<message>:<data>`` with the
stored message (``inbox_id``) that made it, and is deleted by the collection's TTL index
a month later (far longer than Telegram offers a callback again). Writable only here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from storage import collections as c
from storage.ejson import aware

KEPT = timedelta(days=30)
PREFIX = "press:"


@dataclass(frozen=True)
class Claim:
    """A press claimed before: by which stored message, when, and what it did."""

    inbox_id: Any
    pressed_at: datetime | None
    notice: str | None


class Presses:
    def __init__(self, db: AsyncDatabase[dict[str, Any]]) -> None:
        self._coll = db[c.SETTINGS]

    async def claim(self, key: str, inbox_id: Any, now: datetime) -> Claim | None:
        """Claim the press ``key`` for ``inbox_id``; None when it is ours to apply (first
        claimed now), else the claim made before."""
        _id = PREFIX + key
        try:
            await self._coll.insert_one(
                {"_id": _id, "inbox_id": inbox_id, "pressed_at": now, "expires_at": now + KEPT}
            )
            return None
        except DuplicateKeyError:
            doc = await self._coll.find_one({"_id": _id}) or {}
        notice = doc.get("notice")
        return Claim(
            doc.get("inbox_id"),
            aware(doc.get("pressed_at")),
            notice if isinstance(notice, str) else None,
        )

    async def settle(self, key: str, notice: str) -> None:
        """Keep what the press did with its claim, for the answer to a second press."""
        await self._coll.update_one({"_id": PREFIX + key}, {"$set": {"notice": notice}})
