"""The Telegram webhook under hostile bodies (issue #11): the secret is checked before
the body is read, an oversize body gets 413 (not a 400 that reads as a bad update), a
stalled one 408, and nothing is stored."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from channels.telegram.channel import SECRET_HEADER, TelegramChannel
from channels.types import InboundMessage
from tests.channels.telegram_kit import SECRET, fake
from tests.fakes.telegram_api import TOKEN, FakeTelegram

__all__ = ["fake"]  # the fixture, imported for pytest
PATH = "/webhooks/telegram"


async def test_oversize_and_stalled_updates(fake: FakeTelegram) -> None:
    stored: list[InboundMessage] = []

    async def sink(message: InboundMessage) -> bool:
        stored.append(message)
        return True

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"update_id": 1, "x": "'
        for _ in range(160):
            yield b"x" * 8192
        yield b'"}'

    channel = TelegramChannel(
        TOKEN, fake.url, webhook_url="https://bot.example.invalid" + PATH,
        webhook_secret=SECRET, read_timeout=0.5,
    )  # fmt: skip
    await channel.start(sink)
    app = web.Application(client_max_size=8 * 1024 * 1024)  # ours, not aiohttp's, applies
    app.router.add_post(PATH, channel.handle_webhook)
    good = {SECRET_HEADER: SECRET, "Content-Type": "application/json"}
    try:
        async with TestClient(TestServer(app)) as client:
            big = json.dumps({"update_id": 1, "x": "x" * 2_000_000})
            assert (await client.post(PATH, data=big, headers={})).status == 403
            assert (await client.post(PATH, data=big, headers=good)).status == 413
            assert (await client.post(PATH, data=chunks(), headers=good)).status == 413
            reader, writer = await asyncio.open_connection(client.host, client.port)
            writer.write(
                f"POST {PATH} HTTP/1.1\r\nHost: x\r\n{SECRET_HEADER}: {SECRET}\r\n"
                'Content-Length: 100\r\n\r\n{"update_id": 1'.encode()
            )
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(100), 5)
            assert answer.startswith(b"HTTP/1.1 408"), answer
            writer.close()
    finally:
        await channel.stop()
    assert stored == []
