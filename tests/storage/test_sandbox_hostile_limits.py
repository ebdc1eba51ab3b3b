"""Hostile ``db_query`` input (issue 11), part two: caps on collection names, paging
numbers and nesting, every hostile call through the tool, and a stalled server.

Each refusal is a short message that names the limit, never a traceback, and nothing
is written; a frozen database still gets an answer from the tool within its time limit.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pymongo import AsyncMongoClient

from agent.context import AgentDeps
from agent.tools.db import DB_QUERY
from storage.sandbox import DbOperation
from storage.sandbox.execute import QueryTimeout, run_db_query
from storage.sandbox.read import MAX_CHARS
from tests.conftest import make_settings
from tests.contexts import agent_deps, owner_ctx
from tests.storage.sandbox_kit import Db, q, refused

DOUBLING = {
    "$reduce": {
        "input": {"$range": [0, 30]},
        "initialValue": "xxxxxxxx",
        "in": {"$concat": ["$$value", "$$value"]},
    }
}


# --- caps on names, paging, nesting -------------------------------------------------------


async def test_list_collections_is_bounded(db: Db) -> None:
    for i in range(160):
        await db.create_collection(f"ai_{i:03d}_" + "n" * 100)
    result = await q(db, "listCollections")
    assert len(json.dumps(result)) <= MAX_CHARS
    assert "showing the first" in result["note"] and "ai_000_" in result["collections"][0]


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ({"skip": 2**64}, "skip must be between 0 and 2,147,483,647"),
        ({"skip": 2**31}, "skip must be between"),
        ({"limit": 10_001}, "limit must be between 0 and 10,000"),
        ({"filter": {"n": 2**70}}, "out of range; MongoDB integers are 64-bit"),
    ],
)
async def test_out_of_range_numbers_are_refused(db: Db, args: dict[str, Any], match: str) -> None:
    await refused(db, match, "find", "ai_x", **args)


async def test_numbers_in_pipelines_and_indexes_are_bounded(db: Db) -> None:
    await refused(db, "out of range", "aggregate", "ai_x", pipeline=[{"$limit": 2**64}])
    index = {"keys": {"at": 1}, "options": {"expireAfterSeconds": 2**40}}
    await refused(db, "expireAfterSeconds must be at most", "createIndex", "ai_x", index=index)
    assert (await q(db, "find", "ai_x", limit=0)) == {"rows": []}


def _nested(depth: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        doc = {"a": doc}
    return doc


async def test_documents_nested_past_100_levels_are_refused(db: Db) -> None:
    await refused(db, "nests more than 100 levels", "insertOne", "ai_deep", data=_nested(101))
    await refused(
        db, "more than 100 levels", "insertMany", "ai_deep", data=[{"a": 1}, _nested(200)]
    )
    await q(db, "insertMany", "ai_deep", data=[_nested(100)])
    await db.ai_deep.delete_many({})
    await refused(
        db,
        "101 levels deep",
        "updateOne",
        "ai_deep",
        filter={},
        update={"$set": {"a": _nested(100)}},
        upsert=True,
    )
    await refused(db, "more than 100 levels", "find", "ai_deep", filter=_nested(5_000))
    assert await db.ai_deep.count_documents({}) == 0
    await q(db, "insertOne", "ai_deep", data=_nested(90))
    assert await db.ai_deep.count_documents({}) == 1


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("ai_notes\nsystem.users", "control and invisible characters"),
        ("ai_\tnotes", "control and invisible characters"),
        ("ai_no\u200btes", "control and invisible characters"),
        ("ai_\u202eseton", "control and invisible characters"),
        ("ai_notes ", "no spaces at the start or end"),
        ("ai_" + "é" * 60, "longer than 120 bytes"),
        ("ai_" + "x" * 5_000, "longer than 120 bytes"),
    ],
)
async def test_bad_collection_names_are_refused(db: Db, name: str, match: str) -> None:
    message = await refused(db, match, "insertOne", name, data={"a": 1})
    assert len(message) < 300
    await refused(db, match, "find", name)
    await refused(
        db,
        match,
        "aggregate",
        "ai_x",
        pipeline=[{"$lookup": {"from": name, "as": "x", "pipeline": []}}],
    )
    assert not [n for n in await db.list_collection_names() if n.startswith("ai_")]


# --- through the tool: every hostile call is a short error, never a traceback -------------------


async def test_every_hostile_call_is_a_short_error_result(db: Db, deps: AgentDeps) -> None:
    await db.ai_t.insert_many([{"n": i, "title": "a title"} for i in range(3)])
    ctx = owner_ctx(deps)
    calls: list[dict[str, Any]] = [
        {"operation": "find", "collection": "ai_t", "skip": 2**70},
        {"operation": "find", "collection": "ai_t", "limit": 2**70},
        {"operation": "find", "collection": "ai_t", "filter": {"t": {"$regex": "^(a+)+$"}}},
        {
            "operation": "aggregate",
            "collection": "ai_t",
            "pipeline": [{"$project": {"s": DOUBLING}}],
        },
        {"operation": "insertOne", "collection": "ai_t", "data": _nested(300)},
        {"operation": "find", "collection": "ai_t\n", "filter": {}},
        {"operation": "find", "collection": "ai_t", "filter": _nested(20_000)},
    ]
    for call in calls:
        result = await DB_QUERY.invoke(call, ctx)
        assert set(result) == {"error"}, (call, result)
        assert "Traceback" not in result["error"] and len(result["error"]) <= 1_000


# --- a stalled database --------------------------------------------------------------------------


@pytest.fixture
async def stalled(tmp_path: Path) -> AsyncIterator[Db]:
    """A SecantusDB server in its own process, with one document, frozen with SIGSTOP."""
    script = (
        "import sys, time; from secantus import SecantusDBServer; "
        "s = SecantusDBServer(host='127.0.0.1', port=0, storage_path=sys.argv[1], "
        "replica_set_name=None); s.start(); "
        "print(s.uri, flush=True); time.sleep(600)"
    )
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, str(tmp_path / "db"), stdout=asyncio.subprocess.PIPE
    )
    assert child.stdout is not None
    uri = (await child.stdout.readline()).decode().strip()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        uri, directConnection=True, retryWrites=False, tz_aware=True, serverSelectionTimeoutMS=3000
    )
    try:
        await client.w.ai_t.insert_one({"n": 1})
        os.kill(child.pid, signal.SIGSTOP)
        yield client.w
    finally:
        os.kill(child.pid, signal.SIGCONT)
        await client.close()
        child.kill()
        await child.wait()


async def test_a_stalled_database_still_gets_an_answer_in_time(
    stalled: Db, http: aiohttp.ClientSession
) -> None:
    # The database never answers (SIGSTOP): only the time limit can end these calls.
    with pytest.raises(QueryTimeout, match="did not finish within 1 s"):
        op = DbOperation(operation="find", collection="ai_t")
        async with asyncio.timeout(30):
            await run_db_query(stalled, op, time_limit=1.0)

    ctx = owner_ctx(agent_deps(make_settings(openai_api_key="x"), stalled, http))
    async with asyncio.timeout(30):
        result = await DB_QUERY.invoke({"operation": "countDocuments", "collection": "ai_t"}, ctx)
    assert "did not finish within 4 s" in result["error"]
