"""What the ``db_query`` sandbox refuses, against a real SecantusDB server: ``$out`` and
``$merge``, server-side JavaScript, protected, unlisted and system collections.

Each refusal checks the message the model would read and, for writes, that nothing
was written.
"""

from __future__ import annotations

from tests.storage.sandbox_kit import Db, q, refused, seed


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
