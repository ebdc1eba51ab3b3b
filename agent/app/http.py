"""The HTTP server: health, admin API and webhooks, bound to 127.0.0.1 by default.

Untrusted clients are bounded in three places: the request line and headers must
arrive within ``HTTP_READ_TIMEOUT_SECONDS`` (``serve``), so must the body, on every
route (``body_deadline``), and the open connections are capped
(``agent.app.connections``), so slow clients can neither pile up nor take the
descriptors the rest of the process needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from agent.app.access import AdminGate, TooManyTries
from agent.app.application import App
from agent.app.connections import PER_PEER, ConnectionCap, default_most
from agent.app.dashboard import setup_dashboard
from agent.app.dashboard.context import secured
from agent.app.healthcheck import HealthBoard, HealthSources
from agent.app.listen import BACKLOG
from agent.app.shutdown import Shutdown
from agent.app.status import status_data

log = logging.getLogger(__name__)
REQUEST_GRACE = 2.0
"""Seconds a request being handled when the server stops gets to finish (a webhook
stores its message in milliseconds); then it is cancelled."""
APP_KEY: web.AppKey[App] = web.AppKey("watchkeeper", App)
GATE_KEY: web.AppKey[AdminGate] = web.AppKey("admin_gate", AdminGate)
HEALTH_KEY: web.AppKey[HealthBoard] = web.AppKey("health", HealthBoard)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, default=str))


async def healthz(request: web.Request) -> web.Response:
    """Each component's state, no token and no secrets (``agent.app.healthcheck``): 503
    only when the database does not answer, else 200 with what is degraded listed."""
    health = await request.app[HEALTH_KEY].read()
    return _json(health.view(), 200 if health.database_ok else 503)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BodyTimeout(TimeoutError):
    """Set on a request's body stream when it is not all there in time: every read of
    it raises this, in whatever handler. A ``TimeoutError``, so handlers that bound
    their own reads (``channels.webhook_body.read_body``) answer 408 as for their own
    deadline, and aiohttp closes the connection instead of lingering to drain it."""


@web.middleware
async def body_deadline(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The whole body must arrive within ``HTTP_READ_TIMEOUT_SECONDS`` of the headers,
    on every route (dashboard forms as much as webhooks): a client that sends part of
    one and stalls gets 408 and its connection closed at the deadline."""
    content = request.content
    if content.is_eof():  # no body, or all of it here already
        return await handler(request)
    within = request.app[APP_KEY].settings.http_read_timeout_seconds

    def expire() -> None:
        if not content.is_eof():
            content.set_exception(BodyTimeout(f"body not received within {within:g} s"))

    timer = asyncio.get_running_loop().call_later(within, expire)
    try:
        return await handler(request)
    except BodyTimeout as exc:
        response = web.Response(status=408, text=str(exc))
        response.force_close()
        return response
    finally:
        timer.cancel()


@web.middleware
async def held_clients(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A client held for wrong tokens (``TooManyTries``, from ``/api/*``, the dashboard
    or ``POST /login``) gets 429 with ``Retry-After``: JSON on ``/api/*``, else text."""
    try:
        return await handler(request)
    except TooManyTries as exc:
        text = f"Too many wrong tokens; try again in {exc.wait} s"
        if request.path.startswith("/api/"):
            response: web.StreamResponse = _json({"error": text}, 429)
        else:
            response = secured(web.Response(text=text, status=429, content_type="text/plain"))
        response.headers["Retry-After"] = str(exc.wait)
        return response


@web.middleware
async def admin_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path.startswith("/api/"):
        if request.app[APP_KEY].settings.admin_token is None:
            return _json({"error": "ADMIN_TOKEN is not configured"}, 503)
        if not request.app[GATE_KEY].bearer(request):
            return _json({"error": "unauthorized"}, 401)
    return await handler(request)


async def api_status(request: web.Request) -> web.Response:
    return _json(await status_data(request.app[APP_KEY]))


def make_web_app(app: App) -> web.Application:
    web_app = web.Application(
        middlewares=[body_deadline, held_clients, admin_auth], client_max_size=1024 * 1024
    )
    gate = AdminGate(app.settings, app.clock)
    web_app[APP_KEY] = app
    web_app[GATE_KEY] = gate
    health = web_app[HEALTH_KEY] = HealthBoard(lambda: HealthSources.of_app(app))
    web_app.router.add_get("/healthz", healthz)
    web_app.router.add_get("/api/status", api_status)
    for method, path, handler in app.routes:
        web_app.router.add_route(method, path, handler)
    setup_dashboard(web_app, app, gate, health)
    return web_app


@contextlib.asynccontextmanager
async def serve(
    web_app: web.Application,
    sockets: list[socket.socket],
    *,
    header_timeout: float,
    max_connections: int | None = None,
    per_peer: int = PER_PEER,
) -> AsyncIterator[int]:
    """Serve on ``sockets`` (from ``bind``); yields the port (useful when it was 0).

    A client must send a complete request line and headers within ``header_timeout``
    seconds of connecting, or of the previous response on a kept-alive connection;
    otherwise the connection is closed (slowloris). aiohttp has no setting by that
    name, but its keep-alive timer is exactly this: armed when a connection opens and
    after each response, not pushed back by bytes of an unfinished request, and at
    expiry it closes the connection unless a whole request has arrived. A request
    being handled is not cut, except when its body stalls (``body_deadline``). Idle
    kept-alive connections close after the same time, which webhook senders expect.

    At most ``max_connections`` are open at once (default: ``default_most()``, half
    the descriptor limit), and ``per_peer`` from one address (``agent.app.connections``).
    """
    app = web_app.get(APP_KEY)
    exempt = app.settings.trusted_proxies if app is not None else []
    # Requests in flight at the stop get REQUEST_GRACE, within the app's stop deadline.
    shutdown = app.shutdown if app is not None else Shutdown()
    runner = web.AppRunner(
        web_app,
        access_log=None,
        keepalive_timeout=header_timeout,
        shutdown_timeout=REQUEST_GRACE,
    )
    await runner.setup()
    listening: list[asyncio.Server] = []
    try:
        assert runner.server is not None  # set up above
        most = max_connections or default_most()
        cap = ConnectionCap(runner.server, most=most, per_peer=per_peer, exempt=exempt)
        loop = asyncio.get_running_loop()
        for sock in sockets:
            listening.append(await loop.create_server(cap, sock=sock, backlog=BACKLOG))
        yield int(sockets[0].getsockname()[1]) if sockets else 0
    finally:
        for server in listening:
            server.close()
        await shutdown.step("the HTTP server", runner.cleanup)
