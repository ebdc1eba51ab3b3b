"""The embedded server's stop lets go of its port at once: the accept thread is woken
by a connection to the server's own address (``storage.embedded.server``)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from pymongo import MongoClient
from secantus import SecantusDBServer

from storage.embedded.server import _stop_server


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
    _stop_server(server)
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
        _stop_server(reopened)
