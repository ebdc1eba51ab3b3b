"""Chats arriving together read a cached document once: concurrent misses share one load,
a failed or cancelled load does not poison the others, and an invalidation during a load
is not undone by its stale answer."""

from __future__ import annotations

import asyncio

import pytest

from storage.coalesce import TtlCache


class Loader:
    def __init__(self) -> None:
        self.calls = 0
        self.gate = asyncio.Event()
        self.fail: Exception | None = None

    async def __call__(self) -> int:
        self.calls += 1
        call = self.calls
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return call


async def test_a_burst_of_misses_loads_once() -> None:
    cache: TtlCache[str, int] = TtlCache(10.0)
    load = Loader()
    waiting = [asyncio.ensure_future(cache.get("k", load)) for _ in range(50)]
    await asyncio.sleep(0)
    load.gate.set()
    assert await asyncio.gather(*waiting) == [1] * 50
    assert load.calls == 1
    assert await cache.get("k", load) == 1 and load.calls == 1  # now a hit


async def test_a_failed_load_fails_its_waiters_and_the_next_call_tries_again() -> None:
    cache: TtlCache[str, int] = TtlCache(10.0)
    load = Loader()
    load.fail = ConnectionError("database gone")
    waiting = [asyncio.ensure_future(cache.get("k", load)) for _ in range(3)]
    await asyncio.sleep(0)
    load.gate.set()
    results = await asyncio.gather(*waiting, return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in results)
    load.fail = None
    assert await cache.get("k", load) == 2


async def test_a_cancelled_loader_leaves_its_waiters_to_load_for_themselves() -> None:
    cache: TtlCache[str, int] = TtlCache(10.0)
    load = Loader()
    first = asyncio.ensure_future(cache.get("k", load))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(cache.get("k", load))
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    load.gate.set()
    assert await second == 2  # not cancelled: it loaded again
    assert load.calls == 2


async def test_an_invalidation_during_a_load_is_not_undone() -> None:
    cache: TtlCache[str, int] = TtlCache(10.0)
    load = Loader()
    first = asyncio.ensure_future(cache.get("k", load))
    await asyncio.sleep(0)
    cache.invalidate("k")  # a write landed while the old value was being read
    load.gate.set()
    assert await first == 1
    assert await cache.get("k", load) == 2  # the stale answer was not kept
