"""Issue 28 against a real SecantusDB server: ``db_query`` writes cannot grow a value past
what an answer can show, and the quadratic regex that then froze the database is refused.

The issue's sequence: accepted updates doubled one string through an alias until it
was 256,000 characters; then ``[a-z]+[0-9]`` held the database for 35 s or more.
"""

from __future__ import annotations

import asyncio
from typing import Any

from storage.sandbox import SandboxError
from storage.sandbox.growth import MAX_BUILT_BYTES, MAX_STRING_CHARS
from tests.storage.sandbox_kit import Db, q, refused

DOUBLE = [{"$set": {"t": "$s"}}, {"$set": {"s": {"$concat": ["$s", "$t"]}}}, {"$unset": "t"}]
LONG = "x" * (MAX_STRING_CHARS + 1)


async def test_the_issue_sequence_stops_growing_and_its_regex_is_refused(db: Db) -> None:
    await q(db, "insertOne", "ai_t", data={"_id": 1, "s": "a" * 2_000})
    length = 2_000
    while True:  # each request doubles the value, as in the issue
        try:
            await q(db, "updateOne", "ai_t", filter={"_id": 1}, update=DOUBLE)
        except SandboxError as exc:
            message = str(exc)
            break
        length *= 2
    assert length == 64_000  # 128,000 characters would not fit one row
    assert f"at most {MAX_BUILT_BYTES:,} bytes" in message and "nothing was written" in message
    stored = await db.ai_t.find_one({"_id": 1})
    assert stored is not None and len(stored["s"]) == length and "t" not in stored

    await refused(db, r"quadratic time.*use \[a-z\]\[0-9\]", "find", "ai_t",
                  filter={"s": {"$regex": "[a-z]+[0-9]"}})  # fmt: skip
    async with asyncio.timeout(10):  # the owner's next read is answered at once
        found = await q(db, "find", "ai_t", filter={"s": {"$regex": "[a-z][0-9]"}},
                        projection={"s": 0})  # fmt: skip
    assert found == {"rows": []}


async def test_written_out_strings_are_capped_in_every_write(db: Db) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("insertOne", {"data": {"note": LONG}}),
        ("insertMany", {"data": [{"n": 1}, {"n": 2, "deep": {"list": ["ok", LONG]}}]}),
        ("updateOne", {"filter": {}, "update": {"$set": {"note": LONG}}}),
        ("updateMany", {"filter": {}, "update": {"$push": {"notes": LONG}}}),
        ("updateMany", {"filter": {}, "update": [{"$set": {"note": {"$literal": LONG}}}]}),
        ("aggregate", {"pipeline": [{"$set": {"note": LONG}}, {"$out": "ai_copy"}]}),
    ]
    await db.ai_t.insert_one({"n": 0})
    for operation, args in calls:
        message = await refused(db, f"at most {MAX_STRING_CHARS:,} characters", operation,
                                "ai_t", **args)  # fmt: skip
        assert f"{len(LONG):,} characters" in message
    assert await db.ai_t.count_documents({}) == 1
    assert "ai_copy" not in await db.list_collection_names()
    # Reading with a long value is harmless; a value at the cap is stored.
    assert await q(db, "countDocuments", "ai_t", filter={"note": LONG}) == {"count": 0}
    await q(db, "insertOne", "ai_t", data={"note": LONG[1:]})


async def test_building_writes_are_tried_first_and_leave_nothing_when_too_large(db: Db) -> None:
    await db.ai_t.insert_many([{"n": 1, "s": "b" * 10}, {"n": 2, "s": "c" * 40_000}])
    triple = [{"$set": {"s": {"$concat": ["$s", "$s2", "$s3"]}}}]
    copies = [{"$set": {"s2": "$s", "s3": "$s"}}, *triple]
    await refused(db, "this update would leave a document of", "updateMany", "ai_t",
                  filter={}, update=copies)  # fmt: skip
    # updateOne: every match is tried, so the long one refuses it too.
    await refused(db, "nothing was written", "updateOne", "ai_t", filter={}, update=copies)
    assert sorted(len(d["s"]) for d in await db.ai_t.find().to_list()) == [10, 40_000]
    assert await db.ai_t.count_documents({"s2": {"$exists": True}}) == 0

    out = [*copies, {"$out": "ai_built"}]
    await refused(db, r"this \$out would leave a document", "aggregate", "ai_t", pipeline=out)
    assert "ai_built" not in await db.list_collection_names()

    # What stays small is built as before.
    assert await q(db, "updateOne", "ai_t", filter={"n": 1}, update=copies) == {
        "matchedCount": 1, "modifiedCount": 1,
    }  # fmt: skip
    await q(db, "aggregate", "ai_t", pipeline=[{"$match": {"n": 1}}, *copies, {"$out": "ai_b"}])
    built = await db.ai_b.find_one({"n": 1})
    assert built is not None and built["s"] == "b" * 90


async def test_building_writes_that_cannot_be_tried_first_are_refused(db: Db) -> None:
    name = [{"$set": {"full": {"$concat": ["$first", " ", "$last"]}}}]
    await refused(db, "insert the document, then update it", "updateOne", "ai_t",
                  filter={"first": "Ann", "last": "Lee"}, update=name, upsert=True)  # fmt: skip
    merge = {"$merge": {"into": "ai_m", "whenMatched": name}}
    await refused(db, "whenMatched pipeline may not build", "aggregate", "ai_t",
                  pipeline=[{"$match": {}}, merge])  # fmt: skip
    assert await db.ai_t.count_documents({}) == 0
    assert "ai_m" not in await db.list_collection_names()
