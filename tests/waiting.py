"""Waiting for an event in a test: poll a condition until it holds, under a watchdog.

A test waits for the thing that proves a step finished (a record, a request the fake
server saw, a counter) and then asserts; it never sleeps a guessed time. ``within`` is
only a watchdog for a broken build, generous so a busy machine never trips it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from inspect import CORO_CREATED
from typing import Protocol

from tests.timeout_tasks import await_chain

WATCHDOG = 30.0
"""Seconds a condition may take before the test fails (a hang, not a slow machine)."""


async def until(
    condition: Callable[[], object], what: str = "the condition", within: float = WATCHDOG
) -> None:
    """Return once ``condition()`` is true; fail after ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"{what}: not reached within {within} s")
        await asyncio.sleep(0.005)


async def until_async(
    condition: Callable[[], Awaitable[object]],
    what: str = "the condition",
    within: float = WATCHDOG,
) -> None:
    """``until`` for a condition that has to await (a database query)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await condition():
        if loop.time() > deadline:
            raise AssertionError(f"{what}: not reached within {within} s")
        await asyncio.sleep(0.01)


class _Outbox(Protocol):
    async def pending_count(self) -> int: ...


async def outbox_drained(outbox: _Outbox, within: float = WATCHDOG) -> None:
    """Wait until the outbox holds nothing pending or being sent."""

    async def drained() -> bool:
        return await outbox.pending_count() == 0

    await until_async(drained, "the outbox sent everything queued", within)


def waiting_in(qualname: str, task_prefix: str = "") -> int:
    """How many pending tasks (named ``task_prefix...``) are suspended inside the function
    ``qualname`` (``"SinkGate._after_open"``): the event "that step is reached and held there"."""
    found = 0
    for task in asyncio.all_tasks():
        if not task.get_name().startswith(task_prefix):
            continue
        coro = task.get_coro()
        if inspect.iscoroutine(coro) and inspect.getcoroutinestate(coro) == CORO_CREATED:
            continue  # not started: its frame is there, but it is not inside yet
        if any(f.f_code.co_qualname == qualname for f, _ in await_chain(task.get_coro())):
            found += 1
    return found
