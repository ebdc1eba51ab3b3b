"""The adaptive limit on its own: turns in order, halving once per round, pauses that
end on time, growth back to the ceiling, and Retry-After as providers send it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime

import pytest

from agent.llm.limiter import AdaptiveLimit, retry_after_seconds, retry_delay_from_details
from tests.fakes.clock import FakeMonotonic
from tests.waiting import until


async def _hold(limit: AdaptiveLimit, release: asyncio.Event, order: list[int], n: int) -> None:
    async with limit.slot():
        order.append(n)
        await release.wait()


async def test_starts_at_the_ceiling_and_queues_the_rest_in_order() -> None:
    limit = AdaptiveLimit("p", 5)
    release = asyncio.Event()
    order: list[int] = []
    tasks = [asyncio.create_task(_hold(limit, release, order, n)) for n in range(12)]
    await until(lambda: limit.in_flight + limit.waiting == 12, "every call asked for a turn")
    assert (limit.in_flight, limit.waiting, order) == (5, 7, [0, 1, 2, 3, 4])
    release.set()
    await asyncio.gather(*tasks)
    assert order == list(range(12))  # first come, first served
    assert (limit.in_flight, limit.peak, limit.limit) == (0, 5, 5)


async def test_a_round_of_429s_halves_the_limit_once() -> None:
    limit = AdaptiveLimit("p", 16)
    go = asyncio.Event()

    async def rejected() -> None:
        async with limit.slot() as slot:
            await go.wait()
            slot.overloaded()

    tasks = [asyncio.create_task(rejected()) for _ in range(16)]
    await until(lambda: limit.in_flight == 16, "16 calls in flight")
    go.set()
    await asyncio.gather(*tasks)
    assert limit.limit == 8  # 16 calls of the same round: halved once, not 16 times
    async with limit.slot() as slot:  # a call of the new round halves it again
        slot.overloaded()
    assert limit.limit == 4


async def test_never_below_the_floor() -> None:
    limit = AdaptiveLimit("p", 4, floor=2)
    for _ in range(5):
        async with limit.slot() as slot:
            slot.overloaded()
    assert limit.limit == 2


async def test_successes_grow_the_limit_back_to_the_ceiling_and_no_further() -> None:
    limit = AdaptiveLimit("p", 8, grow_after=3)
    for _ in range(2):
        async with limit.slot() as slot:
            slot.overloaded()
    assert limit.limit == 2
    grown = []
    for _ in range(30):
        async with limit.slot():
            pass
        grown.append(limit.limit)
    assert grown[:6] == [2, 2, 3, 3, 3, 4]  # +1 per 3 successes
    assert max(grown) == 8 and grown[-1] == 8


async def test_neutral_failures_neither_grow_nor_shrink() -> None:
    limit = AdaptiveLimit("p", 8, grow_after=1)
    async with limit.slot() as slot:
        slot.overloaded()
    for _ in range(3):
        async with limit.slot() as slot:
            slot.neutral()  # a 400 or a timeout says nothing about load
    with pytest.raises(RuntimeError):
        async with limit.slot():
            raise RuntimeError("unclassified")
    assert (limit.limit, limit.in_flight) == (4, 0)


async def test_retry_after_pauses_new_calls_for_exactly_that_long() -> None:
    clock = FakeMonotonic()
    limit = AdaptiveLimit("p", 8, clock=clock)
    async with limit.slot() as slot:
        slot.overloaded(retry_after=0.3)
    assert limit.paused_for() == 0.3
    clock.advance(ms=299)
    assert limit.paused_for() == 0.001
    clock.advance(ms=1)
    assert limit.paused_for() == 0
    async with asyncio.timeout(0):  # not paused any more: the turn is given without waiting
        async with limit.slot():
            pass


async def test_calls_made_during_a_pause_start_when_it_ends() -> None:
    limit = AdaptiveLimit("p", 8)
    async with limit.slot() as slot:
        slot.overloaded(retry_after=0.3)
    end = limit.paused_until_ns
    started: list[int] = []

    async def call() -> None:
        async with limit.slot():
            started.append(time.monotonic_ns())

    async with asyncio.timeout(30):  # watchdog: the pause must end
        await asyncio.gather(*(call() for _ in range(4)))
    assert len(started) == 4
    assert min(started) >= end  # nobody went before the provider said so
    assert limit.paused_for() == 0


async def test_a_long_retry_after_is_capped() -> None:
    clock = FakeMonotonic()
    limit = AdaptiveLimit("p", 8, max_pause=0.2, clock=clock)
    async with limit.slot() as slot:
        slot.overloaded(retry_after=3600)
    assert limit.paused_for() == 0.2
    waiting = asyncio.create_task(_hold(limit, asyncio.Event(), [], 0))
    await until(lambda: limit.waiting == 1, "the call waits for the pause to end")
    clock.advance(seconds=0.2)  # the capped pause is over; an hour's would not be
    await until(lambda: limit.in_flight == 1, "the waiting call got its turn")
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    assert (limit.in_flight, limit.waiting) == (0, 0)


async def test_a_cancelled_waiter_gives_its_turn_to_the_next() -> None:
    limit = AdaptiveLimit("p", 1)
    release = asyncio.Event()
    order: list[int] = []
    first = asyncio.create_task(_hold(limit, release, order, 0))
    second = asyncio.create_task(_hold(limit, release, order, 1))
    third = asyncio.create_task(_hold(limit, release, order, 2))
    await until(lambda: limit.waiting == 2, "two calls wait behind the first")
    second.cancel()
    release.set()
    await asyncio.gather(first, third)
    assert second.cancelled() and order == [0, 2]
    assert limit.in_flight == 0 and limit.waiting == 0


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="bad limit"):
        AdaptiveLimit("p", 0)
    with pytest.raises(ValueError, match="bad limit"):
        AdaptiveLimit("p", 4, floor=5)


# -- Retry-After -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),  # OpenAI's finer header first
        ({"Retry-After": "Wed, 01 Jan 2031 00:00:30 GMT"}, 30.0),
        ({"Retry-After": "Wed, 01 Jan 2031 00:00:00 GMT"}, 0.0),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "-3"}, None),
        ({"Retry-After": "inf"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_retry_after_seconds(headers: dict[str, str] | None, seconds: float | None) -> None:
    now = datetime(2031, 1, 1, tzinfo=UTC)
    assert retry_after_seconds(headers, now=now) == seconds


def test_retry_delay_from_a_google_error_body() -> None:
    body = {
        "error": {
            "code": 429,
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"},
            ],
        }
    }
    assert retry_delay_from_details(body) == 37.0
    assert retry_delay_from_details({"error": {"details": [{"retryDelay": "x"}]}}) is None
    assert retry_delay_from_details("not json") is None
