"""The channels' sink while the database opens: what a channel reads waits here, unstored.

``build_app`` starts the channels before the database is open, and builds the agent
(its modules, tools and features) after that. A message read before the intake exists
waits at this gate, unstored and so unacknowledged (Telegram offers it again after a
crash), until the intake stores it. One stored before the agent exists is acknowledged
and waits in the intake's queue for the pipeline (``channels.delivery.intake``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from channels.types import InboundMessage

Sink = Callable[[InboundMessage], Awaitable[bool]]


class SinkGate:
    """Holds messages until ``open`` gives it the intake's ``submit``; then passes
    each on. ``first`` is called when the first message arrives: what only a message
    needs (the model's SDK) starts loading then, while the database may still be
    opening, instead of after it is stored."""

    def __init__(self, first: Callable[[], None] | None = None) -> None:
        self._sink: Sink | None = None
        self._opened = asyncio.Event()
        self._first = first

    def open(self, sink: Sink) -> None:
        self._sink = sink
        self._opened.set()

    def __call__(self, message: InboundMessage) -> Awaitable[bool]:
        """Once open, the intake's own ``submit`` (the gate adds no step); before, a
        wait for it."""
        if self._first is not None:
            first, self._first = self._first, None
            first()
        if self._sink is not None:
            return self._sink(message)
        return self._after_open(message)

    async def _after_open(self, message: InboundMessage) -> bool:
        await self._opened.wait()
        assert self._sink is not None
        return await self._sink(message)
