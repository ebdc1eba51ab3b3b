"""The ``db_query`` sandbox against a real SecantusDB server.

Each refusal checks the message the model would read and, for writes, that nothing
was written; each allowed case checks the answer's shape as the model sees it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring
from pymongo.asynchronous.database import AsyncDatabase

from agent.context import AgentDeps
from agent.tools.base import result_json
from agent.tools.db import DB_QUERY
from storage.ejson import from_ejson, to_ejson
from storage.sandbox import MAX_CHARS, DbOperation, SandboxError, run_db_query
from tests.contexts import owner_ctx

Db = AsyncDatabase[dict[str, Any]]


async def q(db: Db, operation: str, collection: str = "", **args: Any) -> dict[str, Any]:
    """Run one db_query operation as the model would send it."""
    args |= {"operation": operation, "collection": collection}
    return await run_db_query(db, DbOperation.model_validate(args))


async def refused(db: Db, match: str, operation: str, collection: str = "", **args: Any) -> str:
    """Assert the sandbox refuses the operation with a message matching ``match``."""
    with pytest.raises(SandboxError, match=match) as info:
        await q(db, operation, collection, **args)
    return str(info.value)


async def seed(db: Db, name: str, count: int, **extra: Any) -> None:
    await db[name].insert_many([{"n": i, **extra} for i in range(count)])


# --- $out / $merge ------------------------------------------------------------------


async def test_out_into_settings_is_refused(db: Db) -> None:
    await seed(db, "ai_src", 3)
    message = await refused(
        db, "protected", "aggregate", "ai_src", pipeline=[{"$match": {}}, {"$out": "settings"}]
    )
    assert "'settings'" in message
    assert await db.settings.count_documents({}) == 0


async def test_merge_into_messages_is_refused_in_every_form(db: Db) -> None:
    await seed(db, "ai_src", 3)
    before = await db.messages.count_documents({})
    for merge in ("messages", {"into": "messages"}, {"into": {"db": db.name, "coll": "messages"}}):
        await refused(
            db, "'messages' is protected", "aggregate", "ai_src", pipeline=[{"$merge": merge}]
        )
    assert await db.messages.count_documents({}) == before


async def test_out_and_merge_into_another_database_are_refused(db: Db) -> None:
    await seed(db, "ai_src", 1)
    for stage in (
        {"$out": {"db": "admin", "coll": "ai_x"}},
        {"$merge": {"into": {"db": "other", "coll": "ai_x"}}},
    ):
        await refused(db, "another database", "aggregate", "ai_src", pipeline=[stage])


async def test_out_from_a_protected_source_into_an_ai_collection_is_allowed(db: Db) -> None:
    await db.alerts.insert_many([{"code": "a1", "status": "open"}, {"code": "b2", "status": "x"}])
    result = await q(
        db,
        "aggregate",
        "alerts",
        pipeline=[
            {"$match": {"status": "open"}},
            {"$project": {"_id": 0, "code": 1}},
            {"$out": "ai_open_alerts"},
        ],
    )
    assert result["rows"] == [] and "ai_open_alerts" in result["note"]
    assert [d["code"] async for d in db.ai_open_alerts.find()] == ["a1"]


async def test_out_must_be_the_last_stage_and_not_nested(db: Db) -> None:
    await seed(db, "ai_src", 1)
    await refused(
        db, "last stage", "aggregate", "ai_src", pipeline=[{"$out": "ai_x"}, {"$match": {}}]
    )
    await refused(
        db, "last stage", "aggregate", "ai_src", pipeline=[{"$facet": {"a": [{"$out": "ai_x"}]}}]
    )
    assert "ai_x" not in await db.list_collection_names()


# --- server-side JavaScript -----------------------------------------------------------


async def test_where_in_a_filter_is_refused(db: Db) -> None:
    await seed(db, "ai_notes", 2)
    message = await refused(
        db, r"\$where is not allowed", "find", "ai_notes", filter={"$where": "this.n > 0"}
    )
    assert "filter" in message
    await refused(db, r"\$where", "deleteMany", "ai_notes", filter={"$where": "true"})
    assert await db.ai_notes.count_documents({}) == 2


async def test_function_nested_in_expr_is_refused(db: Db) -> None:
    expr = {
        "$expr": {
            "$and": [
                {
                    "$eq": [
                        {
                            "$function": {
                                "body": "function(x) { return true }",
                                "args": ["$n"],
                                "lang": "js",
                            }
                        },
                        True,
                    ]
                }
            ]
        }
    }
    await refused(db, r"\$function", "find", "ai_notes", filter=expr)
    await refused(db, r"\$function", "countDocuments", "messages", filter=expr)


async def test_accumulator_in_group_is_refused(db: Db) -> None:
    group = {
        "$group": {
            "_id": None,
            "x": {
                "$accumulator": {
                    "init": "function() { return 0 }",
                    "accumulate": "function(s) { return s }",
                    "accumulateArgs": [],
                    "merge": "function(a, b) { return a }",
                    "lang": "js",
                }
            },
        }
    }
    await refused(db, r"\$accumulator", "aggregate", "ai_notes", pipeline=[group])


async def test_where_hidden_in_lookup_subpipeline_and_facet_is_refused(db: Db) -> None:
    lookup = {
        "$lookup": {
            "from": "messages",
            "as": "m",
            "pipeline": [{"$match": {"$and": [{"x": 1}, {"$where": "true"}]}}],
        }
    }
    await refused(db, r"\$where", "aggregate", "ai_notes", pipeline=[lookup])
    facet = {"$facet": {"ok": [{"$match": {}}], "bad": [{"$match": {"$where": "1"}}]}}
    await refused(db, r"\$where", "aggregate", "ai_notes", pipeline=[facet])


async def test_javascript_in_update_projection_and_merge_pipeline_is_refused(db: Db) -> None:
    await seed(db, "ai_notes", 1)
    await refused(
        db,
        r"\$function",
        "updateMany",
        "ai_notes",
        update=[{"$set": {"y": {"$function": {"body": "f", "args": [], "lang": "js"}}}}],
    )
    await refused(
        db,
        r"\$function",
        "find",
        "ai_notes",
        projection={"y": {"$function": {"body": "f", "args": [], "lang": "js"}}},
    )
    await refused(
        db,
        r"\$where",
        "aggregate",
        "ai_notes",
        pipeline=[{"$merge": {"into": "ai_y", "whenMatched": [{"$match": {"$where": "1"}}]}}],
    )
    await refused(db, r"\$where", "find", "ai_notes", sort={"$where": 1})
    await refused(db, r"\$function", "createIndex", "ai_notes", index={"keys": {"$function": 1}})
    assert await db.ai_notes.find_one({"y": {"$exists": True}}) is None
    assert list(await db.ai_notes.index_information()) == ["_id_"]


async def test_admin_stages_are_refused(db: Db) -> None:
    for stage in ("$currentOp", "$listSessions", "$listLocalSessions"):
        await refused(db, "administrative", "aggregate", "ai_notes", pipeline=[{stage: {}}])


# --- protected and unlisted collections -------------------------------------------------


async def test_insert_into_cronjobs_is_refused(db: Db) -> None:
    message = await refused(
        db,
        "'cronjobs' is protected",
        "insertOne",
        "cronjobs",
        data={"name": "sneaky", "cron_expression": "* * * * *"},
    )
    assert "manage_cronjob" in message
    assert await db.cronjobs.count_documents({}) == 0


async def test_update_one_on_settings_is_refused(db: Db) -> None:
    await db.settings.insert_one({"_id": "pulse", "enabled": True})
    await refused(
        db,
        "'settings' is protected",
        "updateOne",
        "settings",
        filter={"_id": "pulse"},
        update={"$set": {"enabled": False}},
    )
    assert (await db.settings.find_one({"_id": "pulse"}) or {})["enabled"] is True


async def test_create_index_on_messages_is_refused(db: Db) -> None:
    before = await db.messages.index_information()
    await refused(
        db, "'messages' is protected", "createIndex", "messages", index={"keys": {"text": 1}}
    )
    assert await db.messages.index_information() == before


async def test_write_to_an_unlisted_collection_is_refused(db: Db) -> None:
    message = await refused(db, "'notes' is not writable", "insertOne", "notes", data={"a": 1})
    assert "ai_notes" in message
    await refused(db, "not writable", "createCollection", "notes")
    assert "notes" not in await db.list_collection_names()


async def test_reading_protected_and_unlisted_collections_is_allowed(db: Db) -> None:
    await db.messages.insert_many(
        [{"conversation_id": "c", "seq": i, "text": f"m{i}"} for i in range(3)]
    )
    await db.notes.insert_one({"a": 1})
    rows = (await q(db, "find", "messages", sort={"seq": -1}))["rows"]
    assert [r["seq"] for r in rows] == [2, 1, 0]
    assert (await q(db, "countDocuments", "notes")) == {"count": 1}
    joined = await q(
        db,
        "aggregate",
        "notes",
        pipeline=[
            {"$lookup": {"from": "messages", "pipeline": [{"$match": {"seq": 1}}], "as": "m"}},
            {"$unionWith": {"coll": "cronjobs"}},
            {"$project": {"_id": 0}},
        ],
    )
    assert joined["rows"][0]["m"][0]["text"] == "m1"


async def test_system_collections_are_refused(db: Db) -> None:
    await refused(db, "system collection", "find", "system.users")
    await refused(db, "system collection", "insertOne", "system.users", data={"user": "x"})
    await refused(
        db,
        "system collection",
        "aggregate",
        "ai_notes",
        pipeline=[
            {"$lookup": {"from": "system.users", "localField": "a", "foreignField": "b", "as": "u"}}
        ],
    )


async def test_bad_collection_names_are_refused(db: Db) -> None:
    await refused(db, r"'\$' and NUL", "insertOne", "ai_$x", data={"a": 1})
    await refused(db, r"'\$' and NUL", "find", "ai\0x")
    await refused(db, "'.' is not allowed", "find", "admin.users")
    await refused(db, "collection is required", "find", "")
    assert not [n for n in await db.list_collection_names() if n.startswith("ai_")]


async def test_cross_database_lookup_and_union_with_are_refused(db: Db) -> None:
    await refused(
        db,
        "another database",
        "aggregate",
        "ai_notes",
        pipeline=[
            {
                "$lookup": {
                    "from": {"db": "admin", "coll": "users"},
                    "localField": "a",
                    "foreignField": "b",
                    "as": "u",
                }
            }
        ],
    )
    await refused(
        db,
        "another database",
        "aggregate",
        "ai_notes",
        pipeline=[{"$unionWith": {"db": "other", "coll": "things"}}],
    )
    await refused(
        db,
        "another database",
        "aggregate",
        "ai_notes",
        pipeline=[{"$unionWith": {"coll": {"db": "other", "coll": "things"}}}],
    )


async def test_unknown_operation_drop_is_refused(db: Db) -> None:
    await seed(db, "ai_notes", 1)
    message = await refused(db, "unknown operation 'drop'", "drop", "ai_notes")
    assert "find" in message and "createIndex" in message
    assert await db.ai_notes.count_documents({}) == 1


async def test_arguments_an_operation_does_not_take_are_named(db: Db) -> None:
    await refused(db, "find does not take data", "find", "ai_notes", data={"a": 1})


# --- indexes and collections ------------------------------------------------------------


async def test_create_index_on_an_ai_collection_with_unique_and_ttl(db: Db) -> None:
    unique = await q(
        db,
        "createIndex",
        "ai_notes",
        index={"keys": {"slug": 1}, "options": {"unique": True, "name": "slug_unique"}},
    )
    ttl = await q(
        db,
        "createIndex",
        "ai_notes",
        index={"keys": {"expires_at": -1}, "options": {"expireAfterSeconds": 3600}},
    )
    assert unique == {"success": True, "collection": "ai_notes", "index": "slug_unique"}
    assert ttl["success"] is True
    info = await db.ai_notes.index_information()
    assert info["slug_unique"]["unique"] is True
    assert info[ttl["index"]]["expireAfterSeconds"] == 3600
    assert info[ttl["index"]]["key"] == [("expires_at", -1)]


async def test_create_collection_only_for_writable_names(db: Db) -> None:
    assert await q(db, "createCollection", "ai_log") == {
        "success": True,
        "collection": "ai_log",
    }
    again = await q(db, "createCollection", "ai_log")
    assert again["success"] is True and "already" in again["note"]
    await refused(db, "protected", "createCollection", "leases")


async def test_list_collections_is_sorted_without_system(db: Db) -> None:
    await db.ai_b.insert_one({})
    await db.ai_a.insert_one({})
    result = await q(db, "listCollections")
    names = result["collections"]
    assert names == sorted(names)
    assert {"ai_a", "ai_b", "messages"} <= set(names)
    assert not [n for n in names if n.startswith("system.")]


# --- limits and size ----------------------------------------------------------------------


async def test_find_is_capped_at_200_with_a_note(db: Db) -> None:
    await seed(db, "ai_big", 10_000)
    result = await q(db, "find", "ai_big", limit=10_000, projection={"_id": 0})
    assert len(result["rows"]) == 200
    assert "capped at 200" in result["note"]


async def test_find_default_limit_is_50(db: Db) -> None:
    await seed(db, "ai_big", 120)
    result = await q(db, "find", "ai_big", sort={"n": 1}, skip=10)
    assert [r["n"] for r in result["rows"]] == list(range(10, 60))
    assert "note" not in result


async def test_answer_is_cut_at_16k_with_whole_rows(db: Db) -> None:
    await seed(db, "ai_big", 100, text="x" * 500)
    result = await q(db, "find", "ai_big", limit=100, sort={"n": 1})
    text = result_json(result)
    assert len(text) <= MAX_CHARS
    kept = len(result["rows"])
    assert 0 < kept < 100
    assert all(r["text"] == "x" * 500 for r in result["rows"])
    assert f"returned {kept} of 100 rows" in result["note"]
    assert f"skip={kept}" in result["note"]
    assert json.loads(text)["rows"] == result["rows"]


async def test_aggregate_is_capped_at_200(db: Db) -> None:
    await seed(db, "ai_big", 450)
    result = await q(db, "aggregate", "ai_big", pipeline=[{"$project": {"_id": 0, "n": 1}}])
    assert len(result["rows"]) == 200 and "capped at 200" in result["note"]
    small = await q(
        db,
        "aggregate",
        "ai_big",
        pipeline=[{"$match": {"n": {"$lt": 5}}}, {"$project": {"_id": 0}}],
    )
    assert small == {"rows": [{"n": i} for i in range(5)]}


class CommandLog(monitoring.CommandListener):
    """Records the commands a client sends, to see what reaches the server."""

    def __init__(self) -> None:
        self.commands: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.commands.append(dict(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def test_every_operation_carries_a_server_time_limit(mongo_server: str, db: Db) -> None:
    log = CommandLog()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        mongo_server, directConnection=True, tz_aware=True, event_listeners=[log]
    )
    watched = client[db.name]
    calls: list[tuple[str, dict[str, Any]]] = [
        ("insertOne", {"data": {"a": 1}}),
        ("find", {}),
        ("findOne", {}),
        ("countDocuments", {}),
        ("aggregate", {"pipeline": [{"$match": {}}]}),
        ("updateMany", {"filter": {}, "update": {"$set": {"b": 2}}}),
        ("deleteMany", {"filter": {"b": 3}}),
    ]
    try:
        for operation, args in calls:
            log.commands.clear()
            await q(watched, operation, "ai_t", **args)
            sent = log.commands[-1]
            assert 0 < sent["maxTimeMS"] <= 5000, (operation, sent)
            assert sent["comment"] == "watchkeeper db_query", operation
    finally:
        await client.close()


# --- Extended JSON round trips --------------------------------------------------------------


async def test_object_id_round_trip(db: Db) -> None:
    inserted = await q(db, "insertOne", "ai_people", data={"name": "Ada"})
    oid = inserted["insertedId"]
    assert set(oid) == {"$oid"}
    rows = (await q(db, "find", "ai_people"))["rows"]
    assert rows == [{"_id": oid, "name": "Ada"}]
    found = await q(db, "findOne", "ai_people", filter={"_id": rows[0]["_id"]})
    assert found == {"row": {"_id": oid, "name": "Ada"}}
    missing = await q(db, "findOne", "ai_people", filter={"_id": {"$oid": "0" * 24}})
    assert missing == {"row": None}


async def test_date_round_trip_and_range_query(db: Db) -> None:
    days = [{"title": f"d{i}", "at": {"$date": f"2026-01-0{i}T09:00:00Z"}} for i in range(1, 6)]
    await q(db, "insertMany", "schedule", data=days)
    stored = await db.schedule.find_one({"title": "d1"})
    assert stored is not None and stored["at"] == datetime(2026, 1, 1, 9, tzinfo=UTC)
    result = await q(
        db,
        "find",
        "schedule",
        sort={"at": 1},
        filter={"at": {"$gte": {"$date": "2026-01-02"}, "$lt": {"$date": "2026-01-04T00:00:00Z"}}},
        projection={"_id": 0},
    )
    assert result["rows"] == [
        {"title": "d2", "at": {"$date": "2026-01-02T09:00:00Z"}},
        {"title": "d3", "at": {"$date": "2026-01-03T09:00:00Z"}},
    ]
    again = await q(db, "countDocuments", "schedule", filter={"at": result["rows"][0]["at"]})
    assert again == {"count": 1}


def test_ejson_helpers_round_trip() -> None:
    value = {"at": datetime(2026, 3, 1, tzinfo=UTC) + timedelta(milliseconds=5), "n": 2}
    assert from_ejson(to_ejson(value)) == value
    with pytest.raises(ValueError, match="ISO-8601"):
        from_ejson({"$date": "next tuesday"})


async def test_malformed_extended_json_is_explained(db: Db) -> None:
    await refused(
        db, "filter: invalid Extended JSON", "find", "ai_x", filter={"_id": {"$oid": "not-hex"}}
    )


# --- writes --------------------------------------------------------------------------------


async def test_insert_many_returns_ids(db: Db) -> None:
    result = await q(
        db, "insertMany", "contacts", data=[{"name": "A"}, {"name": "B"}, {"name": "C"}]
    )
    assert result["insertedCount"] == 3
    assert len(result["insertedIds"]) == 3 and all("$oid" in i for i in result["insertedIds"])
    assert await db.contacts.count_documents({}) == 3
    await refused(db, "insertMany needs data", "insertMany", "contacts", data={"name": "D"})
    await refused(db, "at most 200", "insertMany", "contacts", data=[{"i": i} for i in range(201)])
    assert await db.contacts.count_documents({}) == 3


async def test_field_names_starting_with_dollar_are_refused(db: Db) -> None:
    await refused(db, "field name '\\$set'", "insertOne", "ai_x", data={"$set": {"a": 1}})
    assert await db.ai_x.count_documents({}) == 0


async def test_updates_and_upsert(db: Db) -> None:
    await db.master.insert_one({"_id": "owner", "name": "Sam"})
    result = await q(
        db, "updateOne", "master", filter={"_id": "owner"}, update={"$set": {"city": "Oslo"}}
    )
    assert result == {"matchedCount": 1, "modifiedCount": 1}
    upserted = await q(
        db,
        "updateOne",
        "ai_prefs",
        filter={"key": "tea"},
        update={"$set": {"value": "green"}},
        upsert=True,
    )
    assert upserted["matchedCount"] == 0 and "$oid" in upserted["upsertedId"]
    row = await q(
        db, "findOne", "ai_prefs", filter={"_id": upserted["upsertedId"]}, projection={"_id": 0}
    )
    assert row == {"row": {"key": "tea", "value": "green"}}
    many = await q(
        db, "updateMany", "ai_prefs", filter={}, update=[{"$set": {"len": {"$strLenCP": "$value"}}}]
    )
    assert many["modifiedCount"] == 1


async def test_replacement_update_is_refused(db: Db) -> None:
    await db.master.insert_one({"_id": "owner", "name": "Sam"})
    await refused(
        db,
        r"operators such as \$set",
        "updateOne",
        "master",
        filter={"_id": "owner"},
        update={"name": "Bob"},
    )
    await refused(db, "needs update", "updateMany", "master", filter={})
    assert await db.master.find_one({"_id": "owner"}) == {"_id": "owner", "name": "Sam"}


async def test_deletes(db: Db) -> None:
    await seed(db, "ai_tmp", 5)
    assert await q(db, "deleteOne", "ai_tmp", filter={"n": 1}) == {"deletedCount": 1}
    assert await q(db, "deleteMany", "ai_tmp", filter={}) == {"deletedCount": 4}


async def test_aggregate_with_group(db: Db) -> None:
    await db.ai_spend.insert_many(
        [{"cat": c, "eur": e} for c, e in [("food", 10), ("food", 5), ("rent", 900)]]
    )
    result = await q(
        db,
        "aggregate",
        "ai_spend",
        pipeline=[
            {"$group": {"_id": "$cat", "total": {"$sum": "$eur"}, "n": {"$sum": 1}}},
            {"$sort": {"_id": 1}},
        ],
    )
    assert result == {
        "rows": [{"_id": "food", "total": 15, "n": 2}, {"_id": "rent", "total": 900, "n": 1}]
    }


# --- through the tool ----------------------------------------------------------------------


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
