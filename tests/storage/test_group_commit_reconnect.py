"""Group-commit writes survive a dropped connection once, as ``storage.retry``'s do: a
retried batch that meets its own stored copy (same ``_id``) is success, and a real
duplicate is still that item's own error."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import DuplicateKeyError

from storage.coalesce import insert_each, set_all, set_each
from tests.fakes.unheard_close import UnheardCloseRelay

Doc = dict[str, Any]


async def _go_quiet(client: AsyncMongoClient[Doc], relay: UnheardCloseRelay, name: str) -> None:
    """Pool a few connections, then stay silent until the server has closed them all."""
    coll = client["quiet"][name]
    await asyncio.gather(*(coll.insert_one({"warm": i}) for i in range(4)))
    await relay.quiet()


async def test_each_batch_write_survives_a_dropped_connection(
    bare_client: AsyncMongoClient[Doc],
    relay: UnheardCloseRelay,
    caplog: pytest.LogCaptureFixture,
) -> None:
    coll = bare_client["quiet"][f"g_{uuid.uuid4().hex[:8]}"]
    await coll.create_index("key", unique=True, sparse=True)
    b, c, d = (await coll.insert_many([{"key": k} for k in "bcd"])).inserted_ids
    await _go_quiet(bare_client, relay, coll.name)
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
    bare_client: AsyncMongoClient[Doc],
) -> None:
    """A batch whose reply was lost after the server stored part of it: tried again,
    each document finds its own copy (same ``_id``) and is told it was stored."""
    coll = bare_client["quiet"][f"l_{uuid.uuid4().hex[:8]}"]
    await coll.create_index("key", unique=True, sparse=True)
    await coll.insert_one({"_id": "m1", "key": "m1"})  # what the lost first try stored
    outcomes = await insert_each(coll)([{"_id": "m1", "key": "m1"}, {"_id": "m2", "key": "m2"}])
    assert outcomes is None or list(outcomes) == [None, None]
    assert await coll.count_documents({"_id": {"$in": ["m1", "m2"]}}) == 2
