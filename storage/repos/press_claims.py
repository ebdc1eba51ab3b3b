"""Claims of button presses (``agent.conversation.buttons``): one ``settings`` document
per press, ``_id: "press:<channel>:<chat>:<message>:<data>"``, so a press is applied
once however often it arrives, and a second press is answered with what the first did.

A claim is read here into a ``PressClaim`` and written from its fields; it expires
(``expires_at``) after the time it is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from storage import collections as c
from storage.records import Doc, maybe_text, moment


@dataclass(frozen=True)
class PressClaim:
    """A press made before: the inbound message that made it, when, and what it did
    (``notice``; None until it was applied)."""

    inbox_id: str | None
    pressed_at: datetime | None
    notice: str | None = None

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> PressClaim:
        return cls(
            maybe_text(doc, "inbox_id"), moment(doc, "pressed_at"), maybe_text(doc, "notice")
        )


class PressClaims:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._settings = db[c.SETTINGS]

    async def claim(
        self, key: str, inbox_id: str | None, now: datetime, kept: timedelta
    ) -> PressClaim | None:
        """Claim the press ``key``; None when it is ours to apply, else the claim made
        before (an empty one if it has gone meanwhile)."""
        try:
            await self._settings.insert_one(
                {"_id": key, "inbox_id": inbox_id, "pressed_at": now, "expires_at": now + kept}
            )
            return None
        except DuplicateKeyError:
            doc = await self._settings.find_one({"_id": key})
        return PressClaim.from_doc(doc or {})

    async def settle(self, key: str, notice: str) -> None:
        """Keep what the press did with its claim, for the answer to a second press."""
        await self._settings.update_one({"_id": key}, {"$set": {"notice": notice}})
