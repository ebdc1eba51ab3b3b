from __future__ import annotations

import socket

import pytest

from tests.conftest import BlockedNetwork


async def test_database_round_trip(deps) -> None:  # type: ignore[no-untyped-def]
    await deps.instructions.set_memory("likes tea")
    assert (await deps.instructions.get()).memory == "likes tea"


def test_internet_is_blocked() -> None:
    with pytest.raises(BlockedNetwork):
        socket.create_connection(("93.184.216.34", 80), timeout=1)
