"""The terminal as a channel: the owner types, replies and scheduled deliveries print."""

from __future__ import annotations

import asyncio
import io
import itertools
import sys
from collections.abc import Callable
from typing import Any, TextIO

from channels.delivery.text import clean_text
from channels.registry import ChannelName
from channels.types import InboundMessage, InboundSink, OutboundMessage, SendResult
from runtime.clock import Clock, utcnow
from runtime.tasks import stop_task

CHAT_ID = "owner"


def read_stdin_line() -> str:
    """One line typed at the terminal. Bytes that do not decode (a Latin-1 terminal, a
    paste of binary) become U+FFFD rather than an error that would end the chat."""
    stream = sys.stdin
    if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
        stream.reconfigure(errors="replace")  # input() decodes a tty's line this way too
    return input("you> ")


class ConsoleChannel:
    name: str = ChannelName.CONSOLE

    def __init__(
        self,
        out: TextIO | None = None,
        read_line: Callable[[], str] | None = None,
        clock: Clock = utcnow,
    ) -> None:
        self._out = out or sys.stdout
        self._clock = clock
        self._read_line = read_line or read_stdin_line
        self._ids = itertools.count(1)
        self._task: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()
        self._session = clock().strftime("%Y%m%d%H%M%S%f")

    async def start(self, sink: InboundSink) -> None:
        self._task = asyncio.create_task(self._read(sink), name="console")

    async def _read(self, sink: InboundSink) -> None:
        try:
            while True:
                try:
                    line = await asyncio.to_thread(self._read_line)
                except (EOFError, KeyboardInterrupt):
                    break
                except UnicodeDecodeError:
                    self._out.write("\r\033[K(that line could not be read; please type it again)\n")
                    self._out.flush()
                    continue
                text = clean_text(line).strip()
                if not text:
                    continue
                if text in ("/quit", "/exit"):
                    break
                await sink(
                    InboundMessage(
                        channel=self.name,
                        external_id=f"{self._session}-{next(self._ids)}",
                        chat_id=CHAT_ID,
                        sender_id=CHAT_ID,
                        text=text,
                        received_at=self._clock(),
                    )
                )
        finally:
            self.closed.set()

    async def stop(self) -> None:
        await stop_task(self._task)

    async def send(self, message: OutboundMessage) -> SendResult:
        self._out.write(f"\r\033[Kwatchkeeper> {message.text}\n")
        for button in message.buttons:
            self._out.write(f"  [{button.label}] reply: {button.data}\n")
        self._out.flush()
        return SendResult(external_ids=(message.idempotency_key,))

    typing_after = 0.0
    """"… thinking" at once: it costs nothing here (``channels.typing_indicator``)."""

    async def typing(self, chat_id: str) -> None:
        self._out.write("\r\033[K… thinking")
        self._out.flush()

    def status(self) -> dict[str, Any]:
        return {"connected": not self.closed.is_set()}
