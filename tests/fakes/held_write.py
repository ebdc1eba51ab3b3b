"""A TCP relay to a MongoDB-wire server that holds back one chosen write.

The relay reads the client's side message by message (the wire protocol's 4-byte
length prefix); the first message ``hold`` picks (its raw bytes: the command, say an
``insert`` into ``outbox`` carrying a given text) is not passed on and ``held`` is set.
Its connection then waits for an answer that never comes, as a write still on its
way when the process dies. When the client closes that connection (the process was
killed), the held message is dropped: the server never sees it. Every other message,
on that connection before it and on every other connection, passes at once, so a test
can see which writes waited for the held one.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Callable
from typing import Self
from urllib.parse import urlsplit


class HeldWriteRelay:
    def __init__(self, uri: str, hold: Callable[[bytes], bool]) -> None:
        parts = urlsplit(uri)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 27017)
        self._hold = hold
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.held = asyncio.Event()
        """Set once the chosen message has arrived (and been held back)."""

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
            up_r, up_w = await asyncio.open_connection(*self._upstream)
        except OSError:
            client_w.close()
            self._tasks.discard(task)
            return

        async def down() -> None:
            with contextlib.suppress(ConnectionError):
                while data := await up_r.read(65536):
                    client_w.write(data)
                    await client_w.drain()
            client_w.close()

        downstream = asyncio.create_task(down())
        try:
            while True:
                header = await client_r.readexactly(4)
                (length,) = struct.unpack("<i", header)
                message = header + await client_r.readexactly(length - 4)
                if not self.held.is_set() and self._hold(message):
                    self.held.set()
                    continue  # never passed on; its caller waits for good
                up_w.write(message)
                await up_w.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            downstream.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await downstream
            up_w.close()
            if not client_w.is_closing():
                client_w.close()
            self._tasks.discard(task)
