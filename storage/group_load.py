"""Group load: reads of one kind share a database command while one is in flight.

The read-side twin of ``storage.group_commit``: a lone load goes at once with its own
query; loads that queue up behind it go together, as soon as it returns, in one call
of ``load_many`` (a query by ``$in``, say). Each caller gets its own value or error;
callers asking for the same key in one batch share its answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
A = TypeVar("A")  # what a caller passes besides the key
V = TypeVar("V")
LoadOne = Callable[[K, A], Awaitable[V]]
LoadMany = Callable[[Sequence[tuple[K, A]]], Awaitable[Mapping[K, V]]]
MAX_KEYS = 200


class GroupLoad(Generic[K, A, V]):
    def __init__(
        self, load_one: LoadOne[K, A, V], load_many: LoadMany[K, A, V], *, max_keys: int = MAX_KEYS
    ) -> None:
        self._one = load_one
        self._many = load_many
        self._max = max_keys
        self._queue: dict[K, tuple[A, list[asyncio.Future[V]]]] = {}
        self._busy = False
        self._drain_task: asyncio.Task[None] | None = None  # held: the loop keeps weak refs

    async def __call__(self, key: K, arg: A) -> V:
        if self._busy:
            done: asyncio.Future[V] = asyncio.get_running_loop().create_future()
            self._queue.setdefault(key, (arg, []))[1].append(done)
            return await done
        self._busy = True
        try:
            return await self._one(key, arg)
        finally:
            self._busy = False
            if self._queue:
                self._busy = True
                self._drain_task = asyncio.create_task(self._drain(), name="group load")

    async def _drain(self) -> None:
        try:
            while self._queue:
                keys = list(self._queue)[: self._max]
                batch = {key: self._queue.pop(key) for key in keys}
                try:
                    found = await self._many([(key, arg) for key, (arg, _w) in batch.items()])
                except Exception as exc:
                    for _arg, waiters in batch.values():
                        _settle(waiters, exc)
                    continue
                for key, (_arg, waiters) in batch.items():
                    if key in found:
                        _settle(waiters, found[key])
                    else:
                        _settle(waiters, KeyError(f"group load: nothing for {key!r}"))
        finally:
            self._busy = False
            for _arg, waiters in self._queue.values():  # cancelled: nobody hears a result
                for waiter in waiters:
                    waiter.cancel()
            self._queue = {}


def _settle(waiters: list[asyncio.Future[V]], outcome: V | Exception) -> None:
    for waiter in waiters:
        if waiter.done():
            continue  # its caller was cancelled
        if isinstance(outcome, Exception):
            waiter.set_exception(outcome)
        else:
            waiter.set_result(outcome)
