"""Hostile input on the HTTP server (issue #11, item 5): absurd JSON on ``POST
/api/alerts`` gets a 400, oversize bodies a 413, a stalled body a 408, and a client
that sends its headers slowly (slowloris) is cut off while normal requests go on."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from agent.app.http import make_web_app, serve
from agent.app.listen import bind
from tests.databases import AppDb
from tests.fakes.alert_app import ADMIN, Harness, alert_app
from tests.waiting import WATCHDOG

AUTH = {"Authorization": f"Bearer {ADMIN}"}
OK = {"severity": "info", "title": "disk", "body": "almost full"}


async def _raise(h: Harness, body: bytes | str, **headers: str) -> tuple[int, str]:
    resp = await h.client.post("/api/alerts", data=body, headers=AUTH | headers)
    return resp.status, await resp.text()


async def test_deeply_nested_json_gets_400(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        for depth in (65, 1000, 10_000):  # 10,000 objects: 50 KB, under the limit
            for opener, closer in (("[", "]"), ('{"a":', "}")):
                nested = opener * depth + "1" + closer * depth
                status, _ = await _raise(h, nested)
                assert status == 400, (depth, opener)
                inside = json.dumps(OK)[:-1] + ', "body": ' + nested + "}"
                status, _ = await _raise(h, inside)
                assert status == 400, (depth, opener, "inside")
        assert await h.app.database.db["alerts"].count_documents({}) == 0


async def test_absurd_numbers_get_400(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        for body in (
            '{"severity": 1e999, "title": "t"}',
            '{"severity": "info", "title": ' + "9" * 5000 + "}",
            '{"severity": "info", "title": "t", "dedupe_key": -' + "9" * 4000 + "}",
            '{"severity": "info", "title": "t", "body": NaN}',
            '{"severity": "info", "title": "t", "source": ' + "1" * 300 + "}",
        ):
            status, _ = await _raise(h, body)
            assert status == 400, body[:60]
        assert await h.app.database.db["alerts"].count_documents({}) == 0


async def test_errors_never_echo_a_huge_input(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        many = json.dumps(OK | {f"extra_field_{i:05d}": i for i in range(2000)})
        long_severity = json.dumps(OK | {"severity": "x" * 50_000})
        long_key = json.dumps(OK | {"k" * 50_000: 1})
        for body in (many, long_severity, long_key):
            status, text = await _raise(h, body)
            assert status == 400 and len(text) < 1000, text[:200]


async def test_oversize_bodies_get_413(app_db: AppDb) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"severity": "info", "title": "t", "body": "'
        for _ in range(40):
            yield b"x" * 8192
        yield b'"}'

    async with alert_app(app_db) as h:
        big = json.dumps(OK | {"body": "x" * 100_000})
        huge = json.dumps(OK | {"body": "x" * 3_000_000})
        assert (await _raise(h, big))[0] == 413
        assert (await _raise(h, huge))[0] == 413
        resp = await h.client.post("/api/alerts", data=chunks(), headers=AUTH)
        assert resp.status == 413
        assert (await _raise(h, json.dumps(OK)))[0] == 201


async def test_a_stalled_alert_body_gets_408(app_db: AppDb) -> None:
    async with alert_app(app_db, http_read_timeout_seconds=0.5) as h:
        reader, writer = await asyncio.open_connection(h.client.host, h.client.port)
        body = json.dumps(OK).encode()
        writer.write(
            b"POST /api/alerts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {ADMIN}\r\nContent-Length: {len(body) + 5}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(100), WATCHDOG)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        writer.close()
        assert await h.app.database.db["alerts"].count_documents({}) == 0


# -- the server itself: bound sockets and the header deadline ----------------------------


@contextlib.asynccontextmanager
async def _served(web_app: web.Application, header_timeout: float) -> AsyncIterator[int]:
    sockets = bind("127.0.0.1", 0)
    try:
        async with serve(web_app, sockets, header_timeout=header_timeout) as port:
            yield port
    finally:
        for sock in sockets:
            sock.close()


async def _cut_off(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """Whether the server closes the connection while we trickle one header byte every
    0.1 s, so that no read ever times out: only a deadline on the whole headers ends it.
    False after ``WATCHDOG`` seconds of trickling (a hang, not a slow machine)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WATCHDOG
    while loop.time() < deadline:
        try:
            writer.write(b"a")
            await writer.drain()
            if await asyncio.wait_for(reader.read(100), 0.1) == b"":
                return True
        except TimeoutError:
            continue
        except ConnectionError:
            return True
    return False


async def _get(port: int, path: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), WATCHDOG)
    writer.close()
    return answer


async def test_slow_headers_are_cut_off_and_normal_requests_go_on(app_db: AppDb) -> None:
    async with alert_app(app_db) as h, _served(make_web_app(h.app), 0.5) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        await writer.drain()
        assert await _cut_off(reader, writer)
        writer.close()
        # A kept-alive connection: the next request's headers have the same deadline.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        first = await asyncio.wait_for(reader.readuntil(b'"scheduler"'), WATCHDOG)
        assert first.startswith(b"HTTP/1.1 200")
        await asyncio.wait_for(reader.readuntil(b"}"), WATCHDOG)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        await writer.drain()
        assert await _cut_off(reader, writer)
        writer.close()
        # A silent connection goes too; a normal one is served.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.read(), WATCHDOG) == b""
        writer.close()
        assert (await _get(port, "/healthz")).startswith(b"HTTP/1.1 200")


async def test_a_slow_handler_is_not_cut_off() -> None:
    """The deadline is on the headers: a request being handled takes as long as it takes."""

    async def slow(_request: web.Request) -> web.Response:
        await asyncio.sleep(1.2)
        return web.Response(text="done")

    app = web.Application()
    app.router.add_get("/slow", slow)
    async with _served(app, 0.3) as port:
        assert (await _get(port, "/slow")).endswith(b"done")


async def test_an_absurd_content_length_gets_400(app_db: AppDb) -> None:
    async with alert_app(app_db) as h, _served(make_web_app(h.app), 5) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        length = "9" * 50
        writer.write(
            f"POST /webhooks/twilio/sms HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n"
            "X-Twilio-Signature: x\r\nContent-Type: application/x-www-form-urlencoded\r\n\r\n"
            "NumMedia=1".encode()
        )
        await writer.drain()
        answer: Any = await asyncio.wait_for(reader.read(100), WATCHDOG)
        assert answer.startswith((b"HTTP/1.1 400", b"HTTP/1.0 400")), answer
        writer.close()
