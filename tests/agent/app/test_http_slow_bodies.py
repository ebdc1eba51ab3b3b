"""Slow request bodies and connection floods (issue 28): a client that sends headers and
part of a body to any route, ``POST /login`` included, then stalls, gets 408 and is cut
at the body deadline while the owner goes on being served; past the connection cap a
new connection is refused at once with 503 instead of taking a descriptor the database
or Telegram needs, and served again once there is room."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from agent.app.http import make_web_app, serve
from agent.app.listen import bind
from tests.databases import AppDb
from tests.fakes.alert_app import ADMIN, alert_app

DEADLINE = 1.0
"""``HTTP_READ_TIMEOUT_SECONDS`` here, shortened from 10."""
WATCHDOG = 15.0
STALLED = 30
HELD = 120.0
"""Idle time of kept-alive connections in the cap tests: longer than any test."""


@contextlib.asynccontextmanager
async def _served(
    web_app: web.Application, header_timeout: float = DEADLINE * 5, **limits: int
) -> AsyncIterator[tuple[int, aiohttp.ClientSession]]:
    """Served on a real socket; kept-alive connections idle ``header_timeout`` (the cap
    tests hold theirs open for the whole test)."""
    sockets = bind("127.0.0.1", 0)
    try:
        async with (
            serve(web_app, sockets, header_timeout=header_timeout, **limits) as port,
            aiohttp.ClientSession(
                f"http://127.0.0.1:{port}", cookie_jar=aiohttp.CookieJar(unsafe=True)
            ) as owner,
        ):
            yield port, owner
    finally:
        for sock in sockets:
            sock.close()


async def _stall(port: int, path: str, head: str = "", sent: bytes = b"token=abc") -> bytes:
    """Send headers and part of a form body, then stall; what the server answers
    until it closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: x\r\n{head}"
            "Content-Type: application/x-www-form-urlencoded\r\n"
            f"Content-Length: {len(sent) + 100}\r\n\r\n".encode()
            + sent
        )
        await writer.drain()
        return await asyncio.wait_for(reader.read(), WATCHDOG)  # read() ends at EOF
    finally:
        writer.close()


async def test_stalled_login_bodies_are_cut_while_the_owner_is_served(app_db: AppDb) -> None:
    async with (
        alert_app(app_db, http_read_timeout_seconds=DEADLINE) as h,
        _served(make_web_app(h.app)) as (port, owner),
    ):
        stalled = [asyncio.create_task(_stall(port, "/login")) for _ in range(STALLED)]
        login = await owner.post("/login", data={"token": ADMIN}, allow_redirects=False)
        assert login.status == 303 and "wk_session" in login.cookies
        page = await owner.get("/alerts", allow_redirects=False)
        assert page.status == 200
        assert (await owner.get("/healthz")).status == 200

        answers = await asyncio.gather(*stalled)
        for answer in answers:
            assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
            assert b"wk_session" not in answer
        assert (await owner.get("/healthz")).status == 200


async def test_a_stalled_body_is_cut_on_a_dashboard_action_and_a_webhook(
    app_db: AppDb,
) -> None:
    """Every route has the deadline: a dashboard POST behind the login, and the SMS
    webhook (whose own reader says 408 as well)."""
    async with (
        alert_app(app_db, http_read_timeout_seconds=DEADLINE) as h,
        _served(make_web_app(h.app)) as (port, _owner),
    ):
        alert = await h.router.raise_alert(severity="warning", title="disk")
        bearer = f"Authorization: Bearer {ADMIN}\r\n"
        action = _stall(port, f"/alerts/{alert.code}/ack", head=bearer)
        sms = _stall(port, "/webhooks/twilio/sms", head="X-Twilio-Signature: x\r\n")
        for answer in await asyncio.gather(action, sms):
            assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
        stored = await h.router.store.by_code(alert.code)
        assert stored is not None and stored.status == "open"


async def test_a_prompt_body_and_a_slow_handler_are_not_cut(app_db: AppDb) -> None:
    """The deadline is on receiving the body: handling it may take longer."""

    async def slow(request: web.Request) -> web.Response:
        form = await request.post()
        await asyncio.sleep(DEADLINE * 1.5)
        more = await request.read()  # the body read again, after the deadline
        return web.Response(text=f"{form['token']} {len(more)}")

    async with alert_app(app_db, http_read_timeout_seconds=DEADLINE) as h:
        web_app = make_web_app(h.app)
        web_app.router.add_post("/slow", slow)
        async with _served(web_app) as (_port, owner):
            resp = await owner.post("/slow", data={"token": "abc"})
            assert resp.status == 200
            assert await resp.text() == "abc 9"


async def _open_and_served(
    port: int, source: str = "127.0.0.1"
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A kept-alive connection that has been answered once: the server holds it open."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n"), WATCHDOG)
    assert head.startswith(b"HTTP/1.1 200"), head
    return reader, writer


async def _answer(port: int, source: str = "127.0.0.1") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        await writer.drain()
        return await asyncio.wait_for(reader.read(), WATCHDOG)
    except ConnectionError:
        return b""
    finally:
        writer.close()


async def _refused(port: int, source: str = "127.0.0.1") -> bytes:
    """What a new connection hears before it sends anything: past the cap, a 503 and
    the close, at once (a client that had sent its request may see a reset instead)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    try:
        return await asyncio.wait_for(reader.read(), WATCHDOG)
    finally:
        writer.close()


async def _served_again(port: int) -> bytes:
    """Ask until a connection is served (room is made when the server sees a close)."""
    async with asyncio.timeout(WATCHDOG):
        while not (answer := await _answer(port)).startswith(b"HTTP/1.1 200"):
            assert not answer or answer.startswith(b"HTTP/1.1 503"), answer[:80]
        return answer


async def test_past_the_cap_new_connections_are_refused_until_there_is_room(
    app_db: AppDb,
) -> None:
    async with (
        alert_app(app_db) as h,
        _served(make_web_app(h.app), HELD, max_connections=4) as (port, _owner),
    ):
        held = [await _open_and_served(port) for _ in range(4)]
        refused = await _refused(port)
        assert refused.startswith(b"HTTP/1.1 503"), refused[:80]
        assert b"Retry-After: 5" in refused
        _reader, writer = held.pop()
        writer.close()
        await _served_again(port)
        for _reader, writer in held:
            writer.close()


async def test_one_address_cannot_take_every_connection(app_db: AppDb) -> None:
    """Past ``per_peer`` from one address, that address is refused; a proxy listed in
    ``TRUSTED_PROXIES`` carries many clients, so it is not."""
    async with (
        alert_app(app_db) as h,
        _served(make_web_app(h.app), HELD, max_connections=50, per_peer=3) as (port, _owner),
    ):
        held = [await _open_and_served(port) for _ in range(3)]
        assert (await _refused(port)).startswith(b"HTTP/1.1 503")
        for _reader, writer in held:
            writer.close()
        await _served_again(port)
    async with (
        alert_app(app_db, trusted_proxies="127.0.0.0/8") as h,
        _served(make_web_app(h.app), HELD, max_connections=50, per_peer=3) as (port, _owner),
    ):
        held = [await _open_and_served(port) for _ in range(6)]
        assert (await _answer(port)).startswith(b"HTTP/1.1 200")
        for _reader, writer in held:
            writer.close()


async def test_at_the_cap_the_busiest_address_makes_room_for_another(app_db: AppDb) -> None:
    """A flood over a few addresses fills the cap; the owner's monitor, from an address
    of its own, is still served: the busiest address loses its oldest connection."""
    async with (
        alert_app(app_db) as h,
        _served(make_web_app(h.app), HELD, max_connections=6, per_peer=10) as (port, _owner),
    ):
        flood = [await _open_and_served(port, source="127.0.0.2") for _ in range(6)]
        answer = await _answer(port, source="127.0.0.1")
        assert answer.startswith(b"HTTP/1.1 200"), answer[:80]
        oldest_reader, _writer = flood[0]
        await asyncio.wait_for(oldest_reader.read(), WATCHDOG)  # the rest of its answer
        assert oldest_reader.at_eof()  # then closed: given up
        # The flood's own address gains nothing: at the cap, it is refused.
        await _served_again(port)  # the owner's connection closed: room for one
        flood.append(await _open_and_served(port, source="127.0.0.2"))
        assert (await _refused(port, source="127.0.0.2")).startswith(b"HTTP/1.1 503")
        for _reader, writer in flood:
            writer.close()
