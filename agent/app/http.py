"""The HTTP server: health, admin API and webhooks, bound to 127.0.0.1 by default."""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from agent.app.parts import App
from agent.app.status import status_data

log = logging.getLogger(__name__)
APP_KEY: web.AppKey[App] = web.AppKey("watchkeeper", App)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, default=str))


async def healthz(request: web.Request) -> web.Response:
    app = request.app[APP_KEY]
    db_ok = await app.database.ping()
    body = {
        "status": "ok" if db_ok else "degraded",
        "db": "ok" if db_ok else "unreachable",
        "channels": {name: bool(s.get("connected", True)) for name, s in app.status().items()},
        "scheduler": app.deps.scheduler.state if app.deps.scheduler else "not configured",
    }
    return _json(body, 200 if db_ok else 503)


def bearer_matches(header: str, token: str) -> bool:
    """``Authorization: Bearer <token>``; the scheme is case-insensitive (RFC 7235)."""
    scheme, _, given = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode("utf-8", "replace"), token.encode())


@web.middleware
async def admin_auth(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    if request.path.startswith("/api/"):
        token = request.app[APP_KEY].settings.admin_token
        if token is None:
            return _json({"error": "ADMIN_TOKEN is not configured"}, 503)
        if not bearer_matches(request.headers.get("Authorization", ""), token.get_secret_value()):
            return _json({"error": "unauthorized"}, 401)
    return await handler(request)


async def api_status(request: web.Request) -> web.Response:
    return _json(await status_data(request.app[APP_KEY]))


def make_web_app(app: App) -> web.Application:
    web_app = web.Application(middlewares=[admin_auth], client_max_size=1024 * 1024)
    web_app[APP_KEY] = app
    web_app.router.add_get("/healthz", healthz)
    web_app.router.add_get("/api/status", api_status)
    for method, path, handler in app.routes:
        web_app.router.add_route(method, path, handler)
    return web_app


@contextlib.asynccontextmanager
async def serve(web_app: web.Application, host: str, port: int) -> AsyncIterator[int]:
    """Run the server; yields the bound port (useful when ``port`` is 0)."""
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        yield int(sockets[0].getsockname()[1]) if sockets else port
    finally:
        await runner.cleanup()
