from __future__ import annotations


async def test_database_round_trip(deps) -> None:  # type: ignore[no-untyped-def]
    await deps.instructions.set_memory("likes tea")
    assert (await deps.instructions.get()).memory == "likes tea"
