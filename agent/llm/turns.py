"""Model requests leave in the order they were asked for, each as soon as it is built.

Under a burst, many exchanges reach their model call at once: one database command
(the inbox write, opening the conversations) releases them together. Each then spends
CPU building its request before it waits for a connection. Left to the event
loop, every exchange builds before any request is written: they all leave together at
the end, their answers come back together, and storing and sending a hundred answers
queue up behind each other after the last one arrives.

``Turns.run`` builds one request at a time: it starts the call and holds the turn
until the call first waits (for its connection, usually), then hands it on. A request
is written while the next one is built, the answers come back spread out, and each is
stored and sent as it arrives, so a burst is answered sooner (``bench/bench_app.py``).
A lone request only passes through an uncontended lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Turns:
    """One model client's requests take turns at being built (FIFO)."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()  # fair: waiters go in arrival order

    async def run(self, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """``call()``, built in turn; its answer (or error) once it comes."""
        async with self._lock:
            started = asyncio.ensure_future(call())
            try:
                # One loop iteration: ``started`` runs to its first wait meanwhile.
                await asyncio.sleep(0)
            except BaseException:
                started.cancel()
                raise
        return await started  # cancelling this cancels the call too
