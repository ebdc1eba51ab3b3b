"""Fixtures of the storage tests: ``watched``, a database on the test server whose client
records every write command it sends (``Commands``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
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
