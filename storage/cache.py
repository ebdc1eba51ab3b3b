"""A read-through cache for small documents read on every exchange.

Owned by the repository that writes the document, so every write through it
invalidates at once; a write by another process is seen within ``ttl`` seconds.
Used only for data where that short lag is harmless (the system instruction, the
pulse settings shown in the prompt, the active conversation of a chat).

Concurrent misses of one key share one load (a burst of chats arriving together
reads the document once, not once each). An ``invalidate`` during a load makes
later callers load afresh, and the stale answer is not kept.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    def __init__(
        self, ttl: float, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl = ttl
        self._max = max_entries
        self._clock = clock
        self._entries: dict[K, tuple[float, V]] = {}
        self._loading: dict[K, asyncio.Future[V]] = {}

    async def get(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        while True:
            now = self._clock()
            hit = self._entries.get(key)
            if hit is not None and now - hit[0] < self._ttl:
                return hit[1]
            pending = self._loading.get(key)
            if pending is None:
                break
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not pending.cancelled() or (task is not None and task.cancelling()):
                    raise  # this caller was cancelled, not the load it waited for
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._loading[key] = future
        try:
            value = await load()
        except BaseException as exc:
            self._settle(key, future, exc)
            raise
        if self._loading.get(key) is future:  # not invalidated meanwhile
            if len(self._entries) >= self._max:
                self._entries.clear()  # rare; cheaper than tracking recency
            self._entries[key] = (now, value)
        self._settle(key, future, value)
        return value

    def _settle(self, key: K, future: asyncio.Future[V], outcome: V | BaseException) -> None:
        if self._loading.get(key) is future:
            del self._loading[key]
        if isinstance(outcome, asyncio.CancelledError):
            future.cancel()  # waiters load for themselves (see ``get``)
        elif isinstance(outcome, BaseException):
            future.set_exception(outcome)
            future.exception()  # retrieved: no "never retrieved" warning without waiters
        else:
            future.set_result(outcome)

    def invalidate(self, key: K | None = None) -> None:
        if key is None:
            self._entries.clear()
            self._loading.clear()
        else:
            self._entries.pop(key, None)
            self._loading.pop(key, None)
