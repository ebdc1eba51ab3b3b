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


@dataclass
class RawTarget:
    """A target that answers every request with ``status_line`` as sent, whatever it
    holds (``HTTP/1.1 2OO <anything>``): what a hostile or broken site can say before
    any parser has agreed it is HTTP."""

    status_line: str
    port: int = 0
    _server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/health"

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(self.status_line.encode() + b"\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
        except (asyncio.IncompleteReadError, OSError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> RawTarget:
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
