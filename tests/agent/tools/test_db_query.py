"""The ``db_query`` tool around the sandbox: errors as results, and its schema."""

from __future__ import annotations

import dataclasses
import json

from agent.context import AgentDeps
from agent.tools.db import DB_QUERY
from tests.contexts import owner_ctx


async def test_tool_turns_refusals_and_server_errors_into_error_results(deps: AgentDeps) -> None:
    ctx = owner_ctx(deps)
    refused_write = await DB_QUERY.invoke(
        {"operation": "insertOne", "collection": "settings", "data": {"a": 1}}, ctx
    )
    assert set(refused_write) == {"error"} and "protected" in refused_write["error"]
    assert await deps.db.settings.count_documents({}) == 0

    unknown = await DB_QUERY.invoke({"operation": "drop", "collection": "ai_x"}, ctx)
    assert "unknown operation" in unknown["error"]

    bad_args = await DB_QUERY.invoke({"operation": "find"} | {"limit": "lots"}, ctx)
    assert "invalid arguments for db_query" in bad_args["error"]

    await DB_QUERY.invoke(
        {
            "operation": "createIndex",
            "collection": "ai_u",
            "index": {"keys": {"k": 1}, "options": {"unique": True}},
        },
        ctx,
    )
    await DB_QUERY.invoke({"operation": "insertOne", "collection": "ai_u", "data": {"k": 1}}, ctx)
    dup = await DB_QUERY.invoke(
        {"operation": "insertOne", "collection": "ai_u", "data": {"k": 1}}, ctx
    )
    assert "duplicate key" in dup["error"] and "full error" not in dup["error"]
    assert "Traceback" not in dup["error"] and len(dup["error"]) < 400

    ok = await DB_QUERY.invoke({"operation": "find", "collection": "ai_u"}, ctx)
    assert [r["k"] for r in ok["rows"]] == [1]


def test_tool_schema_has_the_contract_arguments() -> None:
    spec = DB_QUERY.spec()
    assert spec.name == "db_query" and DB_QUERY.writes is True
    assert set(spec.parameters["properties"]) == {
        "operation",
        "collection",
        "filter",
        "data",
        "update",
        "pipeline",
        "sort",
        "limit",
        "skip",
        "projection",
        "upsert",
        "index",
    }
    assert len(json.dumps(spec.parameters)) < 1400


async def test_pairing_codes_are_never_read_through_db_query(deps: AgentDeps) -> None:
    """A stranger's pending code is a secret (whoever sends it becomes the owner): no
    read reaches ``pairing``, directly or through a pipeline, and nothing shows the code."""
    from datetime import UTC, datetime

    from storage.repos.pairing import PairingStore

    offer = await PairingStore(deps.db, lambda: datetime.now(UTC)).offer(42, "42", "Mallory")
    assert offer.pending is not None
    secret = offer.pending.code
    await deps.db.ai_t.insert_one({"user_id": 42})
    ctx = owner_ctx(deps)
    calls = [
        {"operation": "find", "collection": "pairing"},
        {"operation": "findOne", "collection": "pairing", "filter": {"kind": "code"}},
        {"operation": "countDocuments", "collection": "pairing"},
        {"operation": "aggregate", "collection": "pairing", "pipeline": [{"$match": {}}]},
        {
            "operation": "aggregate",
            "collection": "ai_t",
            "pipeline": [
                {"$lookup": {"from": "pairing", "localField": "user_id",
                             "foreignField": "user_id", "as": "p"}}
            ],
        },
        {"operation": "aggregate", "collection": "ai_t", "pipeline": [{"$unionWith": "pairing"}]},
        {
            "operation": "aggregate",
            "collection": "ai_t",
            "pipeline": [{"$facet": {"x": [{"$unionWith": {"coll": "pairing"}}]}}],
        },
    ]  # fmt: skip
    for call in calls:
        result = await DB_QUERY.invoke(call, ctx)
        assert set(result) == {"error"}, (call, result)
        assert "secret" in result["error"] and secret not in json.dumps(result)
    listed = await DB_QUERY.invoke({"operation": "listCollections", "collection": ""}, ctx)
    assert secret not in json.dumps(listed)


async def test_queries_run_on_the_query_lane_when_there_is_one(deps: AgentDeps) -> None:
    """On the embedded server the model's queries go through a client of their own
    (``storage.db.Database.queries``): the tool uses ``query_db`` when it is set."""
    lane = deps.db.client[f"{deps.db.name}_lane"]
    try:
        await lane.ai_seen.insert_one({"where": "lane"})
        await deps.db.ai_seen.insert_one({"where": "app"})
        ctx = owner_ctx(dataclasses.replace(deps, query_db=lane))
        rows = await DB_QUERY.invoke({"operation": "find", "collection": "ai_seen"}, ctx)
        assert [r["where"] for r in rows["rows"]] == ["lane"]
    finally:
        await deps.db.client.drop_database(lane.name)
