"""What is kept of the people who write but are not the owner, in ``settings``: a
stranger's tally (messages, characters, when last seen, when last refused; never their
words), and a contact over the message rate, noticed once per window.

Read and written here, typed; the dispatcher (``agent.conversation.dispatch``) decides
what to answer.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from bson import ObjectId
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from storage import collections as c
from storage.ejson import aware
from storage.records import Doc


class ContactLog:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._db = db
        self._settings = db[c.SETTINGS]

    async def forget_words(self, inbox_id: str) -> None:
        """Empty a stranger's stored inbox row: their words are kept nowhere the model
        or the pulse could read them."""
        await self._db[c.INBOX].update_one(
            {"_id": ObjectId(inbox_id)},
            {
                "$set": {"text": "", "sender_name": "", "meta": {}, "stranger": True},
                "$unset": {"reply_to": "", "media": ""},
            },
        )

    async def stranger_seen(
        self, channel: str, sender_id: str, chars: int, now: datetime
    ) -> datetime | None:
        """Count a stranger's message (``chars`` long, at ``now``); when they were last
        refused, None if never."""
        before = await self._settings.find_one_and_update(
            {"_id": _stranger(channel, sender_id)},
            {
                "$inc": {"count": 1, "chars": chars},
                "$set": {"last_seen": now},
                "$unset": {"name": ""},
            },
            upsert=True,
        )
        return None if before is None else aware(before.get("refused_at"))

    async def stranger_refused(self, channel: str, sender_id: str, now: datetime) -> None:
        """The stranger was told (at ``now``) that this assistant is not theirs."""
        await self._settings.update_one(
            {"_id": _stranger(channel, sender_id)}, {"$set": {"refused_at": now}}
        )

    async def notice_rate(
        self, channel: str, sender_id: str, now: datetime, window: timedelta
    ) -> bool:
        """Claim the one notice of ``window`` to a contact over the message rate: True
        for the claim that gets it, False when it was noticed already in the window."""
        key = f"contact_rate:{channel}:{sender_id}"
        claimed = await self._settings.update_one(
            {"_id": key, "noticed_at": {"$not": {"$gt": now - window}}},
            {"$set": {"noticed_at": now}},
            upsert=False,
        )
        if claimed.matched_count:
            return True
        try:
            await self._settings.insert_one({"_id": key, "noticed_at": now})
        except DuplicateKeyError:
            return False  # noticed already in this window
        return True


def _stranger(channel: str, sender_id: str) -> str:
    return f"stranger:{channel}:{sender_id}"
