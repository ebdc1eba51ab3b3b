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
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from typing import Self
from urllib.parse import urlsplit


class UnheardCloseRelay:
    def __init__(self, uri: str, *, opened: asyncio.Event | None = None) -> None:
        parts = urlsplit(uri)
        self._opened = opened
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 27017)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def uri(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"mongodb://127.0.0.1:{port}/"

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
        closed_unheard = asyncio.Event()

        async def down() -> None:
            while data := await up_r.read(65536):
                client_w.write(data)
                await client_w.drain()
            closed_unheard.set()  # the server closed: the client is not told

        downstream = asyncio.create_task(down())
        try:
            while data := await client_r.read(65536):
                if closed_unheard.is_set():
                    _reset(client_w)
                    return
                up_w.write(data)
                await up_w.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            downstream.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await downstream
            up_w.close()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST instead of a FIN (SO_LINGER with a zero timeout)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
