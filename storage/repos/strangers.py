"""What is kept of senders the agent does not answer in full: strangers and contacts
over their message rate (DESIGN.md, trust tiers).

A stranger is counted, never quoted: the ``settings`` document
``stranger:<channel>:<sender id>`` holds how many messages and characters came, when
the last came, and when the last refusal was sent (``StrangerSeen``); no words and no
name (a name stored by an older version is dropped at the next message).

A contact over the per-minute rate gets one notice per window: the ``settings``
document ``contact_rate:<channel>:<sender id>`` holds when it was last sent, and
claiming it is one conditional write, so two messages racing send one notice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from storage import collections as c
from storage.records import BadRecord, Doc, moment, whole

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StrangerSeen:
    """One stranger's counts, as the message just counted left them."""

    count: int
    chars: int
    last_seen: datetime | None = None
    refused_at: datetime | None = None
    """When this stranger was last sent the refusal (None: never)."""

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> StrangerSeen:
        return cls(
            count=whole(doc, "count"),
            chars=whole(doc, "chars"),
            last_seen=moment(doc, "last_seen"),
            refused_at=moment(doc, "refused_at"),
        )


def _stranger_id(channel: str, sender_id: str) -> str:
    return f"stranger:{channel}:{sender_id}"


async def count_stranger(
    db: AsyncDatabase[Doc], channel: str, sender_id: str, chars: int, now: datetime
) -> StrangerSeen:
    """Count one message of ``chars`` characters from this stranger, seen ``now``.

    A damaged document (edited by hand) still counts the message; its unreadable
    refusal time reads as never, so the stranger hears the refusal again."""
    doc = await db[c.SETTINGS].find_one_and_update(
        {"_id": _stranger_id(channel, sender_id)},
        {"$inc": {"count": 1, "chars": chars}, "$set": {"last_seen": now}, "$unset": {"name": ""}},
        upsert=True,
        return_document=ReturnDocument.AFTER,
    )
    try:
        return StrangerSeen.from_doc(doc or {})
    except BadRecord as exc:
        log.warning("stranger counts %s:%s do not parse: %s", channel, sender_id, exc)
        return StrangerSeen(count=0, chars=0, last_seen=now)


async def refused_stranger(
    db: AsyncDatabase[Doc], channel: str, sender_id: str, now: datetime
) -> None:
    """Remember that this stranger was sent the refusal ``now``."""
    await db[c.SETTINGS].update_one(
        {"_id": _stranger_id(channel, sender_id)}, {"$set": {"refused_at": now}}
    )


async def claim_rate_notice(
    db: AsyncDatabase[Doc], channel: str, sender_id: str, now: datetime, window: timedelta
) -> bool:
    """Whether this contact is to get the over-the-rate notice ``now``: True once per
    ``window`` (the claim is written), False while one sent within it stands."""
    key = f"contact_rate:{channel}:{sender_id}"
    claimed = await db[c.SETTINGS].update_one(
        {"_id": key, "noticed_at": {"$not": {"$gt": now - window}}},
        {"$set": {"noticed_at": now}},
        upsert=False,
    )
    if claimed.matched_count:
        return True
    try:
        await db[c.SETTINGS].insert_one({"_id": key, "noticed_at": now})
    except DuplicateKeyError:
        return False  # noticed already in this window
    return True
