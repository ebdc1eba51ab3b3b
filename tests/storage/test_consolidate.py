"""Consolidation by itself: once a day, only in the owner's quiet hours, through the
real database; what it changed is logged for the dashboard's undo."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from pymongo.asynchronous.database import AsyncDatabase

from storage.consolidate import consolidate_if_due, last_log
from storage.repos.memories import FactSource, MemoryStore

BERLIN = ZoneInfo("Europe/Berlin")


async def test_runs_once_a_day_and_only_in_quiet_hours(db: AsyncDatabase[dict[str, Any]]) -> None:
    store = MemoryStore(db)
    evening = datetime(2026, 11, 26, 21, 0, tzinfo=BERLIN)
    await store.add("The owner likes green tea", FactSource(), evening - timedelta(days=2))
    await store.add("the owner likes green tea!", FactSource(), evening - timedelta(days=1))
    assert await consolidate_if_due(db, evening, BERLIN, quiet=False) is None
    assert [f.status for f in await store.all()] == ["active", "active"]
    night = evening.replace(hour=23, minute=30)
    changes = await consolidate_if_due(db, night, BERLIN, quiet=True)
    assert changes is not None and [(c.fact.id, c.note) for c in changes] == [
        ("m1", "merged into m2 (duplicate)")
    ]
    assert [f.status for f in await store.all()] == ["replaced", "active"]
    log = await last_log(db)
    assert log is not None and [d["_id"] for d in log.before] == ["m1"]
    assert await consolidate_if_due(db, night + timedelta(minutes=20), BERLIN, quiet=True) is None
    assert await consolidate_if_due(db, night + timedelta(days=1), BERLIN, quiet=True) == []
