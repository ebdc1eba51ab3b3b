"""A TCP relay that hides a server's close from the client, as a NAT or proxy does.

When a server drops a silent connection, a client whose event loop is watching the
socket may hear the FIN and discard the connection before its next write (uvloop
often does; asyncio's own loop, with pymongo's reads paused, does not). Between a
user's agent and a remote MongoDB the usual case is different: a NAT or proxy forgets
the connection and nobody hears anything until the next write, which is then reset.

This relay makes every test see that case: when the server closes, the client's side
stays open and silent; the client's next bytes are answered with a reset (RST), what
a peer that forgot the connection sends.

``opened``: when given, connections are accepted but reach the server only once it is
set, as a database still starting (or far away) answers late.

``quiet()`` is the event a test of a quiet stretch waits for: the server has closed
every relayed connection that sat idle (its last request answered). A connection whose
request is still unanswered (a monitor's long-polling ``hello``) is not idle, and the
server does not time it out. ``server_closes`` counts the closes so far.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass
from typing import Self
from urllib.parse import urlsplit


@dataclass(eq=False)
class _Link:
    """One relayed connection as the server sees it."""

    awaiting: bool = False
    """The client sent bytes the server has not answered yet."""
    closed: bool = False
    """The server closed its side (the client was not told)."""


class UnheardCloseRelay:
    def __init__(self, uri: str, *, opened: asyncio.Event | None = None) -> None:
        parts = urlsplit(uri)
        self._opened = opened
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 27017)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._links: set[_Link] = set()
        self._changed = asyncio.Event()
        self.server_closes = 0
        """Connections the server has closed so far."""

    @property
    def uri(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"mongodb://127.0.0.1:{port}/"

    async def quiet(self) -> None:
        """Return once the server has closed every relayed connection that sat idle
        (or the client closed it first): after this, a client that kept such a
        connection pooled meets a dead one on its next write."""
        while not all(link.closed or link.awaiting for link in self._links):
            await self._changed.wait()

    def _note(self) -> None:
        """Wake whoever waits in ``quiet()`` to look again."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._pass_on(client_r, client_w)
        finally:
            if not client_w.is_closing():
                client_w.close()
            self._tasks.discard(task)

    async def _pass_on(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
    ) -> None:
        if self._opened is not None:
            await self._opened.wait()
        try:
            up_r, up_w = await asyncio.open_connection(*self._upstream)
        except OSError:
            return
        link = _Link()
        self._links.add(link)

        async def down() -> None:
            with contextlib.suppress(ConnectionError):
                while data := await up_r.read(65536):
                    link.awaiting = False
                    client_w.write(data)
                    await client_w.drain()
            link.closed = True  # the server closed: the client is not told
            self.server_closes += 1
            self._note()

        downstream = asyncio.create_task(down())
        try:
            while data := await client_r.read(65536):
                if link.closed:
                    _reset(client_w)
                    return
                link.awaiting = True
                up_w.write(data)
                await up_w.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._links.discard(link)
            downstream.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await downstream
            up_w.close()
            self._note()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST instead of a FIN (SO_LINGER with a zero timeout)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
