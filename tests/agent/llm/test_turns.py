"""Requests of a burst are built in turn, and each leaves as soon as it is built."""

from __future__ import annotations

import asyncio
import time

import pytest

from agent.llm.limiter import Turns

BUILD = 0.003  # CPU a request takes to build (blocking, as real building is)
CONNECT = 0.005  # then it waits, as for its connection


def spin(seconds: float) -> None:
    """Busy the CPU, as building a request does (the event loop waits meanwhile)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def burst(turns: Turns | None, n: int = 12) -> list[str]:
    events: list[str] = []
    release = asyncio.Event()

    async def call(i: int) -> int:
        events.append(f"built {i}")
        spin(BUILD)
        await asyncio.sleep(CONNECT)
        events.append(f"sent {i}")
        return i

    async def exchange(i: int) -> int:
        await release.wait()  # all released at once, as by one database command
        if turns is None:
            return await call(i)
        return await turns.run(lambda: call(i))

    tasks = [asyncio.create_task(exchange(i)) for i in range(n)]
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(*tasks) == list(range(n))
    return events


async def test_the_first_request_leaves_before_the_last_is_built() -> None:
    events = await burst(Turns())
    built = [e for e in events if e.startswith("built")]
    assert built == [f"built {i}" for i in range(12)]  # in the order asked
    assert events.index("sent 0") < events.index("built 11")


async def test_without_turns_every_request_is_built_before_any_leaves() -> None:
    # What Turns is for: the event loop alone builds them all first.
    events = await burst(None)
    assert events.index("sent 0") > events.index("built 11")


async def test_an_error_reaches_its_caller_and_the_next_call_runs() -> None:
    turns = Turns()

    async def broken() -> int:
        raise RuntimeError("HTTP 500")

    async def fine() -> int:
        await asyncio.sleep(0)
        return 7

    with pytest.raises(RuntimeError, match="HTTP 500"):
        await turns.run(broken)
    assert await turns.run(fine) == 7


async def test_cancelling_the_caller_cancels_the_call_and_frees_the_turn() -> None:
    turns = Turns()
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def slow() -> int:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return 1

    waiting = asyncio.create_task(turns.run(slow))
    await started.wait()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.wait_for(cancelled.wait(), 1)

    async def fine() -> int:
        return 2

    assert await asyncio.wait_for(turns.run(fine), 1) == 2
