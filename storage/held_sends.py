"""Messages the agent wanted to send to someone the owner has not approved, held until
the owner confirms in chat ("send 4711").

A held message lives in ``settings`` under ``held_send:<code>``: readable by the model
(its own words), writable only here. Taking it is one ``find_one_and_delete``, so a
confirmation sends it at most once; unconfirmed ones expire after a day.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from storage import collections as c

PREFIX = "held_send:"
KEEP = timedelta(days=1)


@dataclass(frozen=True)
class HeldSend:
    code: str
    channel: str
    chat_id: str
    text: str


class HeldSends:
    def __init__(self, db: AsyncDatabase[dict[str, Any]]) -> None:
        self._coll = db[c.SETTINGS]

    async def hold(self, channel: str, chat_id: str, text: str, now: datetime) -> HeldSend:
        for _ in range(5):
            code = f"{secrets.randbelow(9000) + 1000}"
            try:
                await self._coll.insert_one(
                    {
                        "_id": PREFIX + code,
                        "channel": channel,
                        "chat_id": chat_id,
                        "text": text,
                        "held_at": now,
                    }
                )
            except DuplicateKeyError:
                continue
            return HeldSend(code, channel, chat_id, text)
        raise RuntimeError("could not allocate a confirmation code")

    async def take(self, code: str, now: datetime) -> HeldSend | None:
        """The held message for ``code`` (removed), or None when unknown or expired."""
        doc = await self._coll.find_one_and_delete(
            {"_id": PREFIX + code, "held_at": {"$gt": now - KEEP}}
        )
        if doc is None:
            return None
        return HeldSend(code, doc["channel"], doc["chat_id"], doc["text"])
