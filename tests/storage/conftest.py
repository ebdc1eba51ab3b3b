"""Fixtures of the storage tests: ``watched``, a database on the test server whose client
records every write command it sends (``Commands``); ``quiet_server``, a server that
closes a connection after ``IDLE`` seconds of silence, and ``bare_client`` on it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring
from pymongo.asynchronous.database import AsyncDatabase

Doc = dict[str, Any]


class Commands(monitoring.CommandListener):
    """The write commands a client sends: name and how many items each carried."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        items = event.command.get("updates") or event.command.get("documents") or []
        self.sent.append((event.command_name, len(items)))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def named(self, name: str) -> list[int]:
        return [n for command, n in self.sent if command == name]


@pytest.fixture
async def watched(
    mongo_server: str, db: AsyncDatabase[Doc]
) -> AsyncIterator[tuple[AsyncDatabase[Doc], Commands]]:
    commands = Commands()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(
        mongo_server, directConnection=True, retryWrites=False, event_listeners=[commands]
    )
    try:
        yield client[db.name], commands
    finally:
        await client.close()


IDLE = 0.6
"""The server's client idle timeout in these tests, in seconds."""
QUIET = IDLE * 1.7


@pytest.fixture(scope="module")
def quiet_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A SecantusDB server that closes a connection after ``IDLE`` seconds of silence."""
    from secantus import SecantusDBServer

    server = SecantusDBServer(
        host="127.0.0.1",
        port=0,
        storage_path=str(tmp_path_factory.mktemp("quiet")),
        client_idle_timeout_s=IDLE,
    )
    server.start()
    try:
        yield str(server.uri)
    finally:
        server.stop()


@pytest.fixture
async def bare_client(quiet_server: str) -> AsyncIterator[AsyncMongoClient[Doc]]:
    """A client that keeps idle connections as long as it likes (pymongo's default)."""
    client: AsyncMongoClient[Doc] = AsyncMongoClient(
        quiet_server,
        directConnection=True,
        retryWrites=False,
        tz_aware=True,
        heartbeatFrequencyMS=60_000,  # no heartbeat failure clears the pool meanwhile
    )
    try:
        yield client
    finally:
        await client.close()
