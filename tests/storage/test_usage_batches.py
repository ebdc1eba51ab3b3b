"""Token counts for the Spend page cost no database command per message: they are
written together within a couple of seconds, before a read, and when the app stops."""

from __future__ import annotations

from datetime import date
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from storage.repos.usage import UsageLog
from tests.waiting import until_async

DAY = date(2026, 11, 26)


async def _rows(db: AsyncDatabase[dict[str, Any]], count: int) -> bool:
    return await db["usage"].count_documents({}) == count


async def test_many_exchanges_are_one_write_within_the_flush_window(
    db: AsyncDatabase[dict[str, Any]],
) -> None:
    usage = UsageLog(db, flush_seconds=0.2)
    for _ in range(50):
        usage.add(DAY, "chat", 10, 2)
    usage.add(DAY, "pulse", 7, 1)
    assert await db["usage"].count_documents({}) == 0  # nothing on the hot path
    await until_async(lambda: _rows(db, 2), "the flush window's one write")
    chat = await db["usage"].find_one({"_id": "2026-11-26:chat"})
    assert chat is not None and (chat["input"], chat["output"], chat["exchanges"]) == (500, 100, 50)
    assert await db["usage"].count_documents({}) == 2


async def test_a_read_and_a_stop_write_what_is_pending(db: AsyncDatabase[dict[str, Any]]) -> None:
    usage = UsageLog(db, flush_seconds=60)
    usage.add(DAY, "cron", 5, 1)
    counts = await usage.since(DAY)
    assert [(c.kind, c.input, c.exchanges) for c in counts] == [("cron", 5, 1)]
    usage.add(DAY, "cron", 5, 1)
    await usage.close()
    stored = await db["usage"].find_one({"_id": "2026-11-26:cron"})
    assert stored is not None and stored["exchanges"] == 2
