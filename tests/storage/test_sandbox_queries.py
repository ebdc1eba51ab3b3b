"""What the ``db_query`` sandbox runs, against a real SecantusDB server: indexes and
collections, limits and answer size, Extended JSON round trips, and writes.

Each allowed case checks the answer's shape as the model sees it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring

from agent.tools.base import result_json
from storage.ejson import from_ejson, to_ejson
from storage.sandbox.read import MAX_CHARS
from tests.storage.sandbox_kit import Db, q, refused, seed


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
