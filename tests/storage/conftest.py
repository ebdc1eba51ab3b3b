"""Fixtures of the storage tests: ``watched`` (``tests.fakes.commands``), a database on the
test server whose client records every command it sends; ``quiet_server``, a server that
closes a connection after ``IDLE`` seconds of silence, ``relay`` in front of it (its
``quiet()`` is the event "the server closed every idle connection") and ``bare_client``
through that relay."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from tests.fakes.commands import Commands
from tests.fakes.fixtures import watched
from tests.fakes.unheard_close import UnheardCloseRelay

Doc = dict[str, Any]
__all__ = ["Commands", "watched"]  # a fixture, and its listener for the tests' types


IDLE = 0.6
"""The server's client idle timeout in these tests, in seconds."""


@pytest.fixture(scope="module")
def quiet_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A SecantusDB server that closes a connection after ``IDLE`` seconds of silence."""
    from secantus import SecantusDBServer

    server = SecantusDBServer(
        host="127.0.0.1",
        port=0,
        storage_path=str(tmp_path_factory.mktemp("quiet")),
        client_idle_timeout_s=IDLE,
        replica_set_name=None,
    )
    server.start()
    try:
        yield str(server.uri)
    finally:
        server.stop()


@pytest.fixture
async def relay(quiet_server: str) -> AsyncIterator[UnheardCloseRelay]:
    """``quiet_server`` behind ``UnheardCloseRelay``: when the server drops a silent
    connection the client does not hear of it, as behind a NAT, and its next write on
    it is reset, whichever event loop runs the test."""
    async with UnheardCloseRelay(quiet_server) as relay:
        yield relay


@pytest.fixture
async def bare_client(relay: UnheardCloseRelay) -> AsyncIterator[AsyncMongoClient[Doc]]:
    """A client that keeps idle connections as long as it likes (pymongo's default),
    reaching the quiet server through ``relay``."""
    client: AsyncMongoClient[Doc] = AsyncMongoClient(
        relay.uri,
        directConnection=True,
        retryWrites=False,
        tz_aware=True,
        heartbeatFrequencyMS=60_000,  # no heartbeat failure clears the pool meanwhile
    )
    try:
        yield client
    finally:
        await client.close()
