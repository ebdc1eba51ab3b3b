"""``AiohttpRequest`` under the real python-telegram-bot ``Bot``, against a local aiohttp
server that answers like the Bot API: timeouts, refused connections, the connection
pool, the long poll's longer read timeout, and file uploads."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import BodyPartReader, web
from aiohttp.test_utils import BaseTestServer, TestServer
from telegram import Bot
from telegram.error import BadRequest, NetworkError, TimedOut

from channels.telegram.request import AiohttpRequest
from tests.fakes.huge_answer import MIB, huge_answer

TOKEN = "123456789:AAFakeTokenForRequestTests"
ME = {"id": 123456789, "is_bot": True, "first_name": "Keeper", "username": "keeper_bot"}


@dataclass
class Api:
    """What the fake Bot API saw, and how it should behave."""

    delay: float = 0.0
    stalled: asyncio.Event | None = None
    """Answer nothing until this is set."""
    hold_until: int = 0
    """Answer nothing until this many requests are open at once (then all of them)."""
    all_in: asyncio.Event = field(default_factory=asyncio.Event)
    in_flight: int = 0
    most_in_flight: int = 0
    calls: list[str] = field(default_factory=list)
    uploads: list[dict[str, Any]] = field(default_factory=list)
    server: BaseTestServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("")).rstrip("/")


def _message(chat_id: int, text: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"message_id": 1, "date": 0, "chat": {"id": chat_id, "type": "private"}}
    if text is not None:
        found["text"] = text
    return found


async def _handle(api: Api, request: web.Request) -> web.Response:
    method = request.match_info["method"]
    api.calls.append(method)
    api.in_flight += 1
    api.most_in_flight = max(api.most_in_flight, api.in_flight)
    try:
        if method == "getUpdates":
            form = await request.post()
            await asyncio.sleep(float(str(form.get("timeout", "0"))))
            return web.json_response({"ok": True, "result": []})
        if api.hold_until:
            if api.in_flight >= api.hold_until:
                api.all_in.set()
            await asyncio.wait_for(api.all_in.wait(), timeout=10)
        if api.delay:
            await asyncio.sleep(api.delay)
        if api.stalled is not None:
            await api.stalled.wait()
        if method == "getMe":
            return web.json_response({"ok": True, "result": ME})
        if method == "sendMessage":
            form = await request.post()
            if not form.get("text"):
                error = {
                    "ok": False,
                    "error_code": 400,
                    "description": "Bad Request: text is empty",
                }
                return web.json_response(error, status=400)
            chat_id = int(str(form["chat_id"]))
            return web.json_response({"ok": True, "result": _message(chat_id, str(form["text"]))})
        if method == "sendDocument":
            upload: dict[str, Any] = {"content_type": request.content_type}
            async for part in await request.multipart():
                assert isinstance(part, BodyPartReader) and part.name is not None
                upload[part.name] = (part.filename, bytes(await part.read()))
            api.uploads.append(upload)
            return web.json_response({"ok": True, "result": _message(int(upload["chat_id"][1]))})
        return web.json_response(
            {"ok": False, "error_code": 404, "description": "Not Found"}, status=404
        )
    finally:
        api.in_flight -= 1


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    state = Api()
    app = web.Application()

    async def handle(request: web.Request) -> web.Response:
        return await _handle(state, request)

    app.router.add_post("/bot{token}/{method}", handle)
    async with TestServer(app, host="127.0.0.1") as server:
        state.server = server
        yield state


def _bot(base: str, request: AiohttpRequest, updates: AiohttpRequest | None = None) -> Bot:
    return Bot(
        TOKEN,
        base_url=f"{base}/bot",
        request=request,
        get_updates_request=updates or AiohttpRequest(connection_pool_size=1),
    )


async def test_calls_reach_the_api_and_errors_keep_their_meaning(api: Api) -> None:
    bot = _bot(api.url, AiohttpRequest())
    async with bot:
        sent = await bot.send_message(42, "héllo & <b>you</b>")
        assert sent.text == "héllo & <b>you</b>" and sent.chat.id == 42
        with pytest.raises(BadRequest, match="Text is empty"):
            await bot.send_message(42, "")
    assert api.calls == ["getMe", "sendMessage", "sendMessage"]


async def test_a_slow_answer_times_out(api: Api) -> None:
    async with _bot(api.url, AiohttpRequest(read_timeout=5.0)) as bot:
        api.stalled = asyncio.Event()  # the answer would never come
        try:
            async with asyncio.timeout(30):  # watchdog: the read timeout must end it
                with pytest.raises(TimedOut):
                    await bot.send_message(42, "hi", read_timeout=0.2)
        finally:
            api.stalled.set()


async def test_the_long_poll_waits_longer_than_the_read_timeout(api: Api) -> None:
    updates = AiohttpRequest(connection_pool_size=1, read_timeout=0.3)
    async with _bot(api.url, AiohttpRequest(), updates) as bot:
        assert await bot.get_updates(timeout=1) == ()  # answered after 1 s, past 0.3 s


async def test_a_refused_connection_is_a_network_error_not_a_timeout() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bot = _bot(f"http://127.0.0.1:{port}", AiohttpRequest())
    async with bot.request:  # the requests only: the bot's own start-up calls getMe
        with pytest.raises(NetworkError) as caught:
            await bot.send_message(42, "hi")
    assert not isinstance(caught.value, TimedOut)
    assert "aiohttp.ClientConnectorError" in caught.value.message


async def test_a_hundred_concurrent_sends_all_complete(api: Api) -> None:
    request = AiohttpRequest(connection_pool_size=128)
    async with _bot(api.url, request) as bot:
        api.hold_until = 100  # no answer until all 100 are open at once
        sent = await asyncio.gather(*(bot.send_message(1000 + i, f"m{i}") for i in range(100)))
    assert sorted(m.chat.id for m in sent) == [1000 + i for i in range(100)]
    assert api.most_in_flight == 100


async def test_a_full_pool_times_out_without_sending(api: Api) -> None:
    request = AiohttpRequest(connection_pool_size=2, pool_timeout=0.2)
    async with _bot(api.url, request) as bot:
        api.stalled = asyncio.Event()  # two requests hold both connections
        sends = [asyncio.create_task(bot.send_message(1, f"m{i}")) for i in range(3)]
        try:
            async with asyncio.timeout(30):  # watchdog: the pool timeout must end one
                await asyncio.wait(sends, return_when=asyncio.FIRST_COMPLETED)
        finally:
            api.stalled.set()
        results = await asyncio.gather(*sends, return_exceptions=True)
    timed_out = [r for r in results if isinstance(r, TimedOut)]
    assert len(timed_out) == 1 and "Pool timeout" in timed_out[0].message
    assert api.calls.count("sendMessage") == 2  # the third never left


async def test_an_uploaded_file_arrives_intact(api: Api) -> None:
    payload = bytes(range(256)) * 4000  # ~1 MB, every byte value
    async with _bot(api.url, AiohttpRequest()) as bot:
        await bot.send_document(77, payload, filename="notes.bin", caption="the file")
    (upload,) = api.uploads
    assert upload["content_type"] == "multipart/form-data"
    assert upload["document"] == ("notes.bin", payload)
    assert upload["chat_id"][1] == b"77" and upload["caption"][1] == b"the file"


async def test_shut_down_it_refuses_and_it_can_start_again(api: Api) -> None:
    request = AiohttpRequest()
    bot = _bot(api.url, request)
    async with bot:
        pass
    with pytest.raises(RuntimeError, match="not initialized"):
        await request.do_request(f"{api.url}/bot{TOKEN}/getMe", "POST")
    async with bot:
        assert (await bot.get_me()).username == "keeper_bot"


async def test_an_answer_past_the_limit_fails_after_a_bounded_read() -> None:
    """A Bot API base URL that answers without end (a wrong ``TELEGRAM_API_BASE_URL``,
    a broken proxy) costs ``answer_limit`` bytes, then a ``NetworkError``."""
    async with huge_answer(256 * MIB) as api:
        bot = _bot(api.url.removesuffix("/check"), AiohttpRequest(answer_limit=MIB))
        async with bot.request:
            with pytest.raises(NetworkError, match="the answer is over 1048576 bytes"):
                await bot.send_message(42, "hi")
        await api.done.wait()
    assert api.sent < MIB + 16 * MIB
