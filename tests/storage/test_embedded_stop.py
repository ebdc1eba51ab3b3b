"""The embedded server's stop lets go of its port at once: the accept thread is woken
by a connection to the server's own address (``storage.embedded.server``)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

import pytest
from pymongo import AsyncMongoClient, MongoClient
from secantus import SecantusDBServer

from storage.embedded.owner import EmbeddedServer
from storage.embedded.serving import stop_server


def test_stop_wakes_the_accept_thread_and_frees_the_port(tmp_path: Path) -> None:
    server = SecantusDBServer(
        host="127.0.0.1", port=0, storage_path=str(tmp_path), replica_set_name=None
    )
    server.start()
    address = server.address
    client: MongoClient[dict[str, object]] = MongoClient(server.uri, directConnection=True)
    try:
        client.t.notes.insert_one({"_id": 1, "text": "pay rent"})
    finally:
        client.close()
    stop_server(server)
    # Merely closed, a listening socket that an accept is blocked on still takes
    # connections (Linux): a refused connection shows the accept thread has let go.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(address, timeout=10).close()
    reopened = SecantusDBServer(
        host="127.0.0.1", port=0, storage_path=str(tmp_path), replica_set_name=None
    )
    reopened.start()
    client = MongoClient(reopened.uri, directConnection=True)
    try:
        assert client.t.notes.find_one({"_id": 1}) == {"_id": 1, "text": "pay rent"}
    finally:
        client.close()
        stop_server(reopened)


async def test_a_cancelled_second_start_leaves_the_running_server_alone(
    private_embedded: EmbeddedServer,
) -> None:
    """A database opened again on a server already started (the app on the server
    ``watchkeeper run`` launched, a start-up cut short by a refused token) must not stop
    it: the second start answers the address at once, and cancelling it stops nothing."""
    uri = await private_embedded.start()
    for steps in range(8):  # cancelled at each of its first waits in turn
        again = asyncio.ensure_future(private_embedded.start())
        for _ in range(steps):
            await asyncio.sleep(0)
        again.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await again
    assert await private_embedded.start() == uri
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
        uri, serverSelectionTimeoutMS=5000
    )
    try:
        assert (await client.admin.command("ping"))["ok"] == 1
    finally:
        await client.close()
