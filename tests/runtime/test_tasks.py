"""Stopping background loops: a cancellation is never swallowed, a stop is bounded.

The hang once seen in a full run (a test stuck for 15 minutes while an app stopped)
comes from ``asyncio.wait_for(event.wait(), t)`` on Python 3.11: a cancel that lands
as the event is set is swallowed, so a ``while True`` loop runs on and ``stop()``
waits for it for ever. Every loop of ours waits with ``wait_event`` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable

import pytest

from agent.alerts.router import AlertRouter
from runtime.tasks import stop_task, wait_event
from tests.databases import AppDb
from tests.fakes.alert_app import alert_app
from tests.waiting import until

Waiter = Callable[[asyncio.Event], Awaitable[object]]


async def _stops_when_cancelled_as_woken(waiter: Waiter) -> bool:
    """Whether the loop ends, or (the cancel swallowed) goes round to wait again."""
    event = asyncio.Event()
    rounds = 0

    async def loop() -> None:
        nonlocal rounds
        while True:
            event.clear()
            rounds += 1
            await waiter(event)

    task = asyncio.create_task(loop())
    await until(lambda: rounds == 1, "the loop waits")
    event.set()  # woken and cancelled in the same tick, as stop() after enqueue()
    task.cancel()
    await until(lambda: task.done() or rounds == 2, "the loop ended or went round")
    stopped = task.done()
    task.cancel()  # a second cancel, not woken at once, is not swallowed
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return stopped


async def test_wait_for_on_this_python_can_swallow_a_cancel() -> None:
    """The trap itself (documents why ``wait_event`` exists; fixed in Python 3.12)."""

    async def with_wait_for(event: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), 10)

    if sys.version_info >= (3, 12):
        pytest.skip("wait_for no longer swallows cancellations")
    assert not await _stops_when_cancelled_as_woken(with_wait_for)


async def test_wait_event_never_swallows_a_cancel() -> None:
    assert await _stops_when_cancelled_as_woken(lambda event: wait_event(event, 10))


async def test_wait_event_says_whether_it_was_woken() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    event.set()
    assert await wait_event(event, 1) is True


async def test_a_task_that_refuses_to_stop_is_left_behind_with_its_place_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def stubborn() -> None:
        while True:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(10)

    task = asyncio.create_task(stubborn(), name="stubborn")
    await asyncio.sleep(0)
    with caplog.at_level(logging.ERROR, logger="runtime.tasks"):
        async with asyncio.timeout(30):  # watchdog: the task never stops, stop_task must
            await stop_task(task, grace=0.2)
    assert "stubborn did not stop" in caplog.text and "test_tasks.py" in caplog.text
    task.get_coro().close()  # type: ignore[union-attr]


@pytest.mark.parametrize("component", ["outbox", "router"])
async def test_app_loops_stop_even_when_woken_as_they_are_stopped(
    component: str, app_db: AppDb
) -> None:
    """The two wake-up loops of the app, stopped right after a wake-up, many times."""
    async with alert_app(app_db) as h:
        for _ in range(20):
            if component == "outbox":
                await h.app.outbox.stop()
                await h.app.outbox.start()
                h.app.outbox._wake.set()
                async with asyncio.timeout(5):
                    await h.app.outbox.stop()
                await h.app.outbox.start()
            else:
                router: AlertRouter = h.router
                await router.start(background=True)
                router._wake.set()
                async with asyncio.timeout(5):
                    await router.stop()
