"""The contacts' store: a stranger's tally kept without their words and their last
refusal given back typed; a contact over the rate noticed once per window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from storage.repos.contacts import ContactLog

Doc = dict[str, Any]
NOW = datetime(2026, 3, 6, 12, tzinfo=UTC)
WINDOW = timedelta(minutes=1)


async def test_a_strangers_last_refusal_is_given_back_with_their_tally(
    db: AsyncDatabase[Doc],
) -> None:
    contacts = ContactLog(db)
    assert await contacts.stranger_seen("telegram", "7", 5, NOW) is None
    await contacts.stranger_refused("telegram", "7", NOW)
    later = NOW + timedelta(hours=1)
    assert await contacts.stranger_seen("telegram", "7", 3, later) == NOW
    stats = await db["settings"].find_one({"_id": "stranger:telegram:7"})
    assert stats == {
        "_id": "stranger:telegram:7",
        "count": 2,
        "chars": 8,
        "last_seen": later,
        "refused_at": NOW,
    }


async def test_a_contact_over_the_rate_is_noticed_once_per_window(db: AsyncDatabase[Doc]) -> None:
    contacts = ContactLog(db)
    assert await contacts.notice_rate("whatsapp", "+1", NOW, WINDOW) is True
    assert await contacts.notice_rate("whatsapp", "+1", NOW + WINDOW / 2, WINDOW) is False
    assert await contacts.notice_rate("whatsapp", "+2", NOW, WINDOW) is True
    assert await contacts.notice_rate("whatsapp", "+1", NOW + WINDOW * 2, WINDOW) is True
