"""A local HTTP server whose every answer is huge: a chunked body of ``total`` bytes
(no ``Content-Length``, so nothing tells the client in advance), counting what it got
to hand to the network before the client went away.

What it counts includes what the kernel's socket buffers hold on loopback (a few MB),
so a client that stops reading at its cap shows up as ``sent`` far below ``total``,
and one that reads everything as ``sent == total``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from aiohttp import web

CHUNK = 64 * 1024
MIB = 1024 * 1024


@dataclass
class HugeAnswer:
    total: int = 64 * MIB
    status: int = 200
    head: bytes = b""
    """Sent first (a keyword a monitor looks for, say)."""
    url: str = ""
    sent: int = 0
    requests: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when an answer ended: all sent, or the client closed the connection."""

    async def answer(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        response = web.StreamResponse(status=self.status)
        response.content_type = "text/plain"
        await response.prepare(request)
        chunk = b"x" * CHUNK
        try:
            if self.head:
                await response.write(self.head)
                self.sent += len(self.head)
            while self.sent < self.total:
                await response.write(chunk)
                self.sent += len(chunk)
            await response.write_eof()
        except (ConnectionError, RuntimeError):  # the client went away: what it wanted
            pass
        finally:
            self.done.set()
        return response


@contextlib.asynccontextmanager
async def huge_answer(
    total: int = 64 * MIB, *, status: int = 200, head: bytes = b""
) -> AsyncIterator[HugeAnswer]:
    """Serve a ``HugeAnswer`` on a free port of 127.0.0.1."""
    fake = HugeAnswer(total, status, head)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", fake.answer)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{runner.addresses[0][1]}/check"
    try:
        yield fake
    finally:
        await runner.cleanup()
