"""Calls that wait while the app starts, then go through in order.

``build_app`` starts the channels before the database is open, and builds the agent
(its modules, tools and features) after that. Two gates hold what arrives meanwhile:

- the channels' sink: a message read before the pipeline exists waits here, unstored
  and so unacknowledged (Telegram offers it again after a crash), until the pipeline
  stores it;
- the pipeline's handler: a stored and acknowledged message's handling waits here
  until the dispatcher exists.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from channels.delivery.envelope import Envelope
from channels.types import InboundMessage, Reply

A = TypeVar("A")
R = TypeVar("R")


class Gate(Generic[A, R]):
    """Holds calls until ``open`` gives it the callee; then passes each on."""

    def __init__(self) -> None:
        self._callee: Callable[[A], Awaitable[R]] | None = None
        self._opened = asyncio.Event()

    @property
    def opened(self) -> bool:
        return self._callee is not None

    def open(self, callee: Callable[[A], Awaitable[R]]) -> None:
        self._callee = callee
        self._opened.set()

    async def __call__(self, message: A) -> R:
        if self._callee is None:
            await self._opened.wait()
        assert self._callee is not None
        return await self._callee(message)


class SinkGate(Gate[InboundMessage, bool]):
    """The channels' sink until the pipeline can store what they read."""


class HandlerGate(Gate[Envelope, list[Reply]]):
    """The pipeline's handler until the dispatcher exists."""
