"""One local server standing in for every service ``doctor`` checks by a plain request:
Telegram's ``getMe``, Twilio's account and its numbers, an OpenAI-style model list (empty), and a
Gemini that refuses the key. Each answers with just what the check reads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web
from aiohttp.test_utils import TestServer

TELEGRAM_TOKEN = "123:abc"
TWILIO_SID = "AC1"
TWILIO_NUMBER = "+15550001111"
"""The one number the stand-in Twilio account owns."""


@asynccontextmanager
async def stand_ins() -> AsyncIterator[tuple[str, list[str]]]:
    """The server's base URL, and what it was asked: ``"<path> <Authorization>"`` for
    an answered request, the path alone for a refused one."""
    seen: list[str] = []

    async def ok(request: web.Request) -> web.Response:
        seen.append(f"{request.path} {request.headers.get('Authorization', '')}")
        return web.json_response({"ok": True, "result": {}, "data": []})

    async def refuse(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response({"error": "bad key"}, status=401)

    async def numbers(request: web.Request) -> web.Response:
        seen.append(f"{request.path} {request.headers.get('Authorization', '')}")
        wanted = request.query.get("PhoneNumber")
        owned = [{"phone_number": TWILIO_NUMBER}] if wanted in (None, TWILIO_NUMBER) else []
        return web.json_response({"incoming_phone_numbers": owned})

    app = web.Application()
    app.router.add_get("/gemini/{version}/models", refuse)
    app.router.add_get("/v1/models", ok)
    app.router.add_get(f"/bot{TELEGRAM_TOKEN}/getMe", ok)
    app.router.add_get(f"/2010-04-01/Accounts/{TWILIO_SID}.json", ok)
    app.router.add_get(f"/2010-04-01/Accounts/{TWILIO_SID}/IncomingPhoneNumbers.json", numbers)
    server = TestServer(app)
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/"), seen
    finally:
        await server.close()
