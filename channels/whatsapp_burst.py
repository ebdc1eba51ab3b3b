"""Burst coalescing: several quick messages from one contact become one model call.

People type in bursts ("hi" / "are you there" / "question..."). Each burst is
flushed ``window`` seconds after its last message, and at the latest ``max_wait``
after its first, so a chatty contact cannot postpone an answer for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")
Flush = Callable[[list[T]], Awaitable[None]]


class Coalescer(Generic[T]):
    def __init__(
        self, window: float, flush: Flush[T], *, max_items: int = 20, max_wait: float | None = None
    ) -> None:
        self._window = window
        self._flush = flush
        self._max_items = max_items
        self._max_wait = max_wait if max_wait is not None else window * 4
        self._items: dict[str, list[T]] = {}
        self._started: dict[str, float] = {}
        self._timers: dict[str, asyncio.Task[None]] = {}
        self._flushing: set[asyncio.Task[None]] = set()

    def add(self, key: str, item: T) -> None:
        now = asyncio.get_running_loop().time()
        self._items.setdefault(key, []).append(item)
        self._started.setdefault(key, now)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if len(self._items[key]) >= self._max_items:
            self._spawn(self._take(key))
            return
        delay = min(self._window, self._started[key] + self._max_wait - now)
        self._timers[key] = asyncio.create_task(self._later(key, max(delay, 0.0)))

    async def _later(self, key: str, delay: float) -> None:
        await asyncio.sleep(delay)
        self._timers.pop(key, None)
        # Taken before awaiting, so a new message starts a new burst instead of
        # cancelling the submission in progress.
        self._spawn(self._take(key))

    def _take(self, key: str) -> list[T]:
        self._started.pop(key, None)
        return self._items.pop(key, [])

    def _spawn(self, items: list[T]) -> None:
        if not items:
            return
        task = asyncio.create_task(self._safe_flush(items))
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    async def _safe_flush(self, items: list[T]) -> None:
        try:
            await self._flush(items)
        except Exception:
            log.exception("submitting a burst of %d messages failed", len(items))

    @property
    def pending(self) -> int:
        return sum(len(v) for v in self._items.values())

    async def drain(self) -> None:
        """Flush everything now (shutdown): buffered messages are submitted, not lost."""
        for timer in self._timers.values():
            timer.cancel()
        for timer in list(self._timers.values()):
            with contextlib.suppress(asyncio.CancelledError):
                await timer
        self._timers.clear()
        for key in list(self._items):
            self._spawn(self._take(key))
        if self._flushing:
            await asyncio.gather(*list(self._flushing), return_exceptions=True)
