"""A local HTTP server for monitors to watch: it answers as a test says (a status, a
body, or never), counts the requests, and can go away and come back on its port."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class Target:
    status: int = 200
    body: str = "all good"
    hang: bool = False
    """Accept the request and never answer (a wedged server)."""
    hits: int = 0
    port: int = 0
    _runner: web.AppRunner | None = None
    _released: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/health"

    async def _answer(self, request: web.Request) -> web.Response:
        self.hits += 1
        if self.hang:
            await self._released.wait()
        return web.Response(status=self.status, text=self.body)

    async def start(self) -> Target:
        """Listen (on the same port again after ``stop``)."""
        app = web.Application()
        app.router.add_get("/health", self._answer)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        if not self.port:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                self.port = probe.getsockname()[1]
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        return self

    async def stop(self) -> None:
        """Go away: the port refuses connections until ``start`` again."""
        self._released.set()
        if self._runner is not None:
            await self._runner.cleanup()
        self._runner = None
        self._released = asyncio.Event()
