"""Group-commit writes survive a dropped connection once, as ``storage.retry``'s do: a
retried batch that meets its own stored copy (same ``_id``) is success, and a real
duplicate is still that item's own error."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import DuplicateKeyError

from storage.group_commit import insert_each, set_all, set_each

Doc = dict[str, Any]
IDLE = 0.6
"""The server closes a connection silent for this long (seconds)."""
QUIET = IDLE * 1.7


@pytest.fixture(scope="module")
def quiet_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from secantus import SecantusDBServer

    server = SecantusDBServer(
        host="127.0.0.1",
        port=0,
        storage_path=str(tmp_path_factory.mktemp("quiet_group")),
        client_idle_timeout_s=IDLE,
    )
    server.start()
    try:
        yield str(server.uri)
    finally:
        server.stop()


@pytest.fixture
async def client(quiet_server: str) -> AsyncIterator[AsyncMongoClient[Doc]]:
    bare: AsyncMongoClient[Doc] = AsyncMongoClient(
        quiet_server, directConnection=True, retryWrites=False, heartbeatFrequencyMS=60_000
    )
    try:
        yield bare
    finally:
        await bare.close()


async def _go_quiet(client: AsyncMongoClient[Doc], name: str) -> None:
    """Pool a few connections, then stay silent until the server has closed them all."""
    coll = client["quiet"][name]
    await asyncio.gather(*(coll.insert_one({"warm": i}) for i in range(4)))
    await asyncio.sleep(QUIET)


async def test_each_batch_write_survives_a_dropped_connection(
    client: AsyncMongoClient[Doc], caplog: pytest.LogCaptureFixture
) -> None:
    coll = client["quiet"][f"g_{uuid.uuid4().hex[:8]}"]
    await coll.create_index("key", unique=True, sparse=True)
    b, c, d = (await coll.insert_many([{"key": k} for k in "bcd"])).inserted_ids
    await _go_quiet(client, coll.name)
    inserted, *_ = await asyncio.gather(
        insert_each(coll)([{"key": "x"}, {"key": "y"}, {"key": "b"}]),
        set_each(coll)([(b, {"n": 1}), (c, {"n": 2})]),
        set_all(coll, lambda: {"done": True})([[c], [d]]),
    )
    assert inserted is not None and [type(o) for o in inserted] == [
        type(None),
        type(None),
        DuplicateKeyError,
    ]
    assert await coll.count_documents({"key": {"$in": ["x", "y"]}}) == 2
    assert [d["n"] async for d in coll.find({"n": {"$exists": True}}, sort=[("n", 1)])] == [1, 2]
    assert await coll.count_documents({"done": True}) == 2
    assert caplog.text.count("trying once more") == 3  # each lost its connection once


async def test_an_insert_that_landed_the_first_time_is_not_a_duplicate(
    client: AsyncMongoClient[Doc],
) -> None:
    """A batch whose reply was lost after the server stored part of it: tried again,
    each document finds its own copy (same ``_id``) and is told it was stored."""
    coll = client["quiet"][f"l_{uuid.uuid4().hex[:8]}"]
    await coll.create_index("key", unique=True, sparse=True)
    await coll.insert_one({"_id": "m1", "key": "m1"})  # what the lost first try stored
    outcomes = await insert_each(coll)([{"_id": "m1", "key": "m1"}, {"_id": "m2", "key": "m2"}])
    assert outcomes is None or list(outcomes) == [None, None]
    assert await coll.count_documents({"_id": {"$in": ["m1", "m2"]}}) == 2
