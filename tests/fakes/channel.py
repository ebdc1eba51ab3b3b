"""The one recording channel for tests: a ``channels.types.Channel`` that keeps what it sends.

Fakes of the transports' HTTP APIs (``telegram_api``, ``twilio_api``...) are servers that
real channels talk to; this one stands in for a channel itself.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from channels.types import (
    PRESSED,
    InboundMessage,
    InboundSink,
    OutboundMessage,
    SendError,
    SendResult,
)


class RecordingChannel:
    """Records every message it is asked to send, and can fail on demand.

    * ``sent``: the messages delivered, in order; ``sent_at``: ``time.monotonic()`` at
      each; ``delivered``: an event set by every delivery;
    * ``failures``: errors the next sends raise, one per send, before any succeeds;
    * ``failing``: every send fails (retryable) while the channel still says it is up;
    * ``connected``: what ``status()`` reports; while False, sends fail too;
    * ``say()``: an inbound message from ``sender`` into the sink given to ``start()``,
      received at ``clock()`` (the wall clock when there is none).
    """

    def __init__(
        self,
        name: str = "console",
        *,
        sender: str | int = "owner",
        clock: Callable[[], datetime] | None = None,
        failures: Iterable[Exception] = (),
        failing: bool = False,
        connected: bool = True,
    ) -> None:
        self.name = name
        self.sender = str(sender)
        self.clock = clock
        self.sent: list[OutboundMessage] = []
        self.sent_at: list[float] = []
        self.failures: list[Exception] = list(failures)
        self.failing = failing
        self.connected = connected
        self.typing_in: list[str] = []
        self.sink: InboundSink | None = None
        self.delivered = asyncio.Event()
        self._ids = itertools.count(1)
        self._inbound = itertools.count(1)

    # -- the Channel protocol ---------------------------------------------------------

    async def start(self, sink: InboundSink) -> None:
        self.sink = sink

    async def stop(self) -> None:
        self.sink = None

    async def send(self, message: OutboundMessage) -> SendResult:
        if self.failures:
            raise self.failures.pop(0)
        if self.failing or not self.connected:
            raise SendError(f"{self.name} is down", retryable=True)
        self.sent.append(message)
        self.sent_at.append(time.monotonic())
        self.delivered.set()
        return SendResult(external_ids=(str(next(self._ids)),))

    async def typing(self, chat_id: str) -> None:
        self.typing_in.append(chat_id)

    def status(self) -> dict[str, Any]:
        return {"connected": self.connected}

    # -- for tests --------------------------------------------------------------------

    def texts(self, chat_id: str | None = None) -> list[str]:
        """The texts sent, to ``chat_id`` only when given."""
        return [m.text for m in self.sent if chat_id is None or m.chat_id == chat_id]

    async def press(self, data: str, *, on: str, sender: str | int | None = None) -> bool:
        """A button press, as Telegram's channel delivers one: ``data`` from the button on
        the message sent as ``on`` (one of this channel's external ids)."""
        assert self.sink is not None, f"{self.name} was not started"
        who = self.sender if sender is None else str(sender)
        number = next(self._inbound)
        return await self.sink(
            InboundMessage(
                channel=self.name,
                external_id=f"u{number}",
                chat_id=who,
                sender_id=who,
                text=data,
                received_at=self.clock() if self.clock is not None else datetime.now(UTC),
                reply_to=on,
                meta={"callback_query_id": f"q{number}", "kind": PRESSED, "shown": None},
            )
        )

    async def say(
        self,
        text: str,
        *,
        sender: str | int | None = None,
        reply_to: str | None = None,
        external_id: str | None = None,
    ) -> bool:
        """Deliver an inbound message as the transport would; False for a duplicate.
        ``external_id``: the transport's id (default ``u1``, ``u2``... per channel)."""
        assert self.sink is not None, f"{self.name} was not started"
        who = self.sender if sender is None else str(sender)
        return await self.sink(
            InboundMessage(
                channel=self.name,
                external_id=external_id or f"u{next(self._inbound)}",
                chat_id=who,
                sender_id=who,
                text=text,
                received_at=self.clock() if self.clock is not None else datetime.now(UTC),
                reply_to=reply_to,
            )
        )
