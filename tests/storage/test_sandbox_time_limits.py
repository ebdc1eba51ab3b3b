"""Every command a ``db_query`` call sends carries the server's time limit (issue 28).

The call gives up after its own time limit whatever the server does; ``maxTimeMS`` is
what tells the server to stop too, wherever it can (SecantusDB checks it between
documents and scan steps). Watched on the wire, with a command listener, for every
operation of the sandbox.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring

from storage.sandbox.execute import MAX_TIME_MS
from tests.storage.sandbox_kit import Db, q

# Sent by the driver about the connection or cursor, not about new work. A getMore of a
# find or aggregate cursor is bounded by the command that opened it (MongoDB refuses a
# maxTimeMS on it); the opening command is checked.
NOT_WORK = frozenset({"getMore", "killCursors", "endSessions", "hello", "ismaster", "isMaster"})


class _Commands(monitoring.CommandListener):
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name not in NOT_WORK:
            self.sent.append((event.command_name, event.command.get("maxTimeMS")))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture
async def watched(mongo_server: str, db: Db) -> AsyncIterator[tuple[Db, _Commands]]:
    commands = _Commands()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        mongo_server, directConnection=True, tz_aware=True, event_listeners=[commands]
    )
    try:
        yield client[db.name], commands
    finally:
        await client.close()


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("createCollection", {}),
    ("insertOne", {"data": {"n": 0, "s": "a"}}),
    ("insertMany", {"data": [{"n": i, "s": "b" * 50} for i in range(1, 120)]}),
    ("createIndex", {"index": {"keys": {"n": 1}}}),
    ("find", {"filter": {"s": {"$regex": "^b"}}, "limit": 200}),
    ("findOne", {"filter": {"n": 3}}),
    ("countDocuments", {"filter": {"n": {"$gt": 5}}}),
    ("aggregate", {"pipeline": [{"$group": {"_id": "$s", "n": {"$sum": 1}}}]}),
    ("aggregate", {"pipeline": [{"$match": {"n": {"$lt": 3}}}, {"$out": "ai_copy"}]}),
    ("updateOne", {"filter": {"n": 1}, "update": {"$set": {"s": "c"}}}),
    ("updateMany", {"filter": {}, "update": [{"$set": {"t": {"$concat": ["$s", "!"]}}}]}),
    ("deleteOne", {"filter": {"n": 2}}),
    ("deleteMany", {"filter": {"n": {"$gt": 100}}}),
    ("listCollections", {}),
]


async def test_every_command_of_every_operation_carries_max_time_ms(
    watched: tuple[Db, _Commands],
) -> None:
    db, commands = watched
    for operation, args in CALLS:
        commands.sent.clear()
        await q(db, operation, "ai_t" if operation != "listCollections" else "", **args)
        assert commands.sent, operation
        for name, max_time_ms in commands.sent:
            assert max_time_ms is not None, (operation, name)
            assert 0 < max_time_ms <= MAX_TIME_MS, (operation, name, max_time_ms)
