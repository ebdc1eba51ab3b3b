from __future__ import annotations

from datetime import UTC, datetime

from storage.repos.memories import FactSource, MemoryStore


async def test_database_round_trip(deps) -> None:  # type: ignore[no-untyped-def]
    store = MemoryStore(deps.db)
    saved = await store.add("likes tea", FactSource(), datetime.now(UTC))
    assert [f.text for f in await store.get([saved.id])] == ["likes tea"]
