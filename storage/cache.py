"""A read-through cache for small documents read on every exchange.

Owned by the repository that writes the document, so every write through it
invalidates at once; a write by another process is seen within ``ttl`` seconds.
Used only for data where that short lag is harmless (the system instruction, the
pulse settings shown in the prompt, the active conversation of a chat).
"""

from __future__ import annotations

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

    async def get(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        now = self._clock()
        hit = self._entries.get(key)
        if hit is not None and now - hit[0] < self._ttl:
            return hit[1]
        value = await load()
        if len(self._entries) >= self._max:
            self._entries.clear()  # rare; cheaper than tracking recency
        self._entries[key] = (now, value)
        return value

    def invalidate(self, key: K | None = None) -> None:
        if key is None:
            self._entries.clear()
        else:
            self._entries.pop(key, None)
