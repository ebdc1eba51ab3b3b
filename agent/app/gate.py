"""The pipeline's handler while the app starts.

``build_app`` starts the channels as soon as the database can store what arrives, and
builds the agent (its modules, tools and features) after that. A message that arrives
meanwhile is stored and acknowledged as usual; its handling waits here until the
dispatcher exists, then goes to it, in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from channels.types import InboundMessage, Reply

Handler = Callable[[InboundMessage], Awaitable[list[Reply]]]


class HandlerGate:
    """Holds messages until ``open`` gives it the real handler."""

    def __init__(self) -> None:
        self._handler: Handler | None = None
        self._opened = asyncio.Event()

    @property
    def opened(self) -> bool:
        return self._handler is not None

    def open(self, handler: Handler) -> None:
        self._handler = handler
        self._opened.set()

    async def __call__(self, message: InboundMessage) -> list[Reply]:
        if self._handler is None:
            await self._opened.wait()
        assert self._handler is not None
        return await self._handler(message)
