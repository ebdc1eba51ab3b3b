"""Hostile ``db_query`` input (issue 11) against a real SecantusDB server.

Each case is refused before it reaches the database, with a message the model can act
on, or is answered within fixed time and size: patterns are checked wherever they hide,
growth is refused, the answer is read only up to its cap. Caps on names, paging and
nesting, and a stalled server, are in ``test_sandbox_hostile_limits``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring

from storage.sandbox.read import MAX_ROW_BYTES
from tests.storage.sandbox_kit import Db, q, refused

NESTED = r"^(\w+\s?)*$"
TITLE = "a natural looking title with fifty characters or so"


def _regex(pattern: str) -> dict[str, Any]:
    return {"$regularExpression": {"pattern": pattern, "options": ""}}


def _expr(operator: str, regex: Any) -> dict[str, Any]:
    return {operator: {"input": "$title", "regex": regex}}


def _pipe(*stages: dict[str, Any]) -> dict[str, Any]:
    return {"pipeline": list(stages)}


R, X = {"$regex": NESTED}, _regex(NESTED)
# Every place a pattern can hide, each with the freezing pattern of the issue.
HIDING_PLACES: list[tuple[str, dict[str, Any]]] = [
    ("find", {"filter": {"title": R}}),
    ("find", {"filter": {"title": {"$regex": NESTED, "$options": "i"}}}),
    ("find", {"filter": {"title": X}}),
    ("find", {"filter": {"title": {"$regex": X}}}),
    ("find", {"filter": {"title": {"$in": ["x", X]}}}),
    ("find", {"filter": {"title": {"$nin": [X]}}}),
    ("find", {"filter": {"title": {"$not": R}}}),
    ("find", {"filter": {"title": {"$not": X}}}),
    ("find", {"filter": {"tags": {"$elemMatch": R}}}),
    ("find", {"filter": {"$and": [{"n": 1}, {"title": R}]}}),
    ("find", {"filter": {"$or": [{"title": R}]}}),
    ("find", {"filter": {"$nor": [{"title": R}]}}),
    ("find", {"filter": {"$expr": _expr("$regexMatch", NESTED)}}),
    ("find", {"projection": {"tags": {"$elemMatch": R}}}),
    ("find", {"filter": {"$jsonSchema": {"properties": {"title": {"pattern": NESTED}}}}}),
    ("find", {"filter": {"$jsonSchema": {"patternProperties": {NESTED: {}}}}}),
    ("findOne", {"filter": {"title": R}}),
    ("countDocuments", {"filter": {"title": R}}),
    ("aggregate", _pipe({"$match": {"title": R}})),
    ("aggregate", _pipe({"$project": {"m": _expr("$regexMatch", NESTED)}})),
    ("aggregate", _pipe({"$project": {"m": _expr("$regexFind", X)}})),
    ("aggregate", _pipe({"$project": {"m": _expr("$regexFindAll", {"$literal": NESTED})}})),
    ("aggregate", _pipe({"$lookup": {"from": "ai_t", "as": "x", "pipeline": [{"$match": R}]}})),
    ("aggregate", _pipe({"$facet": {"a": [{"$match": {"title": X}}]}})),
    ("updateMany", {"filter": {"title": R}, "update": {"$set": {"x": 1}}}),
    ("updateMany", {"filter": {}, "update": {"$pull": {"tags": R}}}),
    ("updateMany", {"filter": {}, "update": [{"$set": {"m": _expr("$regexMatch", NESTED)}}]}),
    ("deleteMany", {"filter": {"title": R}}),
    ("insertOne", {"data": {"pattern": X}}),
]  # fmt: skip


@pytest.fixture
async def titles(db: Db) -> Db:
    await db.ai_t.insert_many(
        [{"n": i, "title": TITLE + "!" * i, "tags": [TITLE, "ok"]} for i in range(3)]
    )
    return db


@pytest.mark.parametrize(("operation", "args"), HIDING_PLACES)
async def test_a_nested_quantifier_is_refused_wherever_it_hides(
    titles: Db, operation: str, args: dict[str, Any]
) -> None:
    async with asyncio.timeout(30):  # watchdog; figures: python bench/bench_hostile.py
        message = await refused(titles, "exponential time", operation, "ai_t", **args)
    assert r"use ^[\w\s]*$ instead of ^(\w+\s?)*$" in message
    assert await titles.ai_t.count_documents({"x": 1}) == 0


async def test_the_issue_pattern_is_refused_with_its_rewrite(titles: Db) -> None:
    message = await refused(titles, "regex", "find", "ai_t", filter={"t": {"$regex": "^(a+)+$"}})
    assert "use ^a+$ instead of ^(a+)+$" in message and message.startswith("filter: ")


@pytest.mark.parametrize(
    ("pattern", "options", "match"),
    [
        (r"(a|aa)+$", "", "alternatives can start with the same character"),
        (r"(\w|\d)*x", "", r"use \[\\w\\d\]\*x instead"),
        (r"\w+\s?\w+@", "", "cubic time"),
        (r"[a-z]+[0-9]", "", r"quadratic time .* use \[a-z\]\[0-9\] instead"),
        (r".*x", "m", "quadratic time"),
        (r"^\S+@\S+\.\S+$", "", r"\[\^@\\s\]\+@"),
        (r"(a)\1", "", "backreference"),
        (r"(?=a)b", "", "lookahead and lookbehind"),
        (r"(?<!a)b", "", "lookahead and lookbehind"),
        (r"(?R)", "", "recursion"),
        (r"( a + ) +", "x", "exponential time"),
        (r"A+a+$", "i", "cubic time"),
        ("x" * 201, "", "at most 200"),
        (r"\p{L}+", "", r"\\p is not supported"),
        ("a", "g", "option 'g' is not supported"),
    ],
)
async def test_unsafe_or_unportable_patterns_are_refused(
    titles: Db, pattern: str, options: str, match: str
) -> None:
    await refused(
        titles, match, "find", "ai_t", filter={"t": {"$regex": pattern, "$options": options}}
    )


async def test_a_pattern_read_from_a_field_is_refused(titles: Db) -> None:
    expr = {"$regexMatch": {"input": "$title", "regex": "$pattern"}}
    await refused(titles, "cannot be checked", "find", "ai_t", filter={"$expr": expr})
    computed = {"$regexFind": {"input": "$title", "regex": {"$concat": ["^", "$p"]}}}
    await refused(
        titles, "cannot be checked", "aggregate", "ai_t", pipeline=[{"$set": {"m": computed}}]
    )


async def test_safe_patterns_work_in_every_form(titles: Db) -> None:
    found = await q(
        titles, "find", "ai_t", filter={"title": {"$regex": "^A NATURAL", "$options": "i"}}
    )
    assert len(found["rows"]) == 3
    assert len((await q(titles, "find", "ai_t", filter={"title": _regex(r"!!$")}))["rows"]) == 1
    assert (
        await q(titles, "countDocuments", "ai_t", filter={"tags": {"$in": [_regex("^ok$")]}})
    ) == {"count": 3}
    match = {"$regexMatch": {"input": "$title", "regex": r"\w \w+", "options": "i"}}
    rows = (await q(titles, "aggregate", "ai_t", pipeline=[{"$project": {"_id": 0, "m": match}}]))[
        "rows"
    ]
    assert rows == [{"m": True}] * 3
    for pattern in (
        r"^[^@\s]+@[^@\s.]+\.[^@\s]+$",
        r"^\d{4}-\d{2}-\d{2}$",
        r"^\w+(\s\w+)*$",
        "dentist|doctor",
        r"(?i)^meeting",
    ):
        await q(titles, "find", "ai_t", filter={"title": {"$regex": pattern}})


# --- growth and memory ------------------------------------------------------------------

DOUBLING = {
    "$reduce": {
        "input": {"$range": [0, 30]},
        "initialValue": "xxxxxxxx",
        "in": {"$concat": ["$$value", "$$value"]},
    }
}


@pytest.mark.parametrize(
    ("expression", "match"),
    [
        (DOUBLING, r"uses \$\$value more than once"),
        (
            {
                "$reduce": {
                    "input": "$tags",
                    "initialValue": [],
                    "in": {"$concatArrays": ["$$value", "$$value"]},
                }
            },
            "doubles",
        ),
        (
            {
                "$reduce": {
                    "input": "$tags",
                    "initialValue": "",
                    "in": {"$let": {"vars": {"v": "$$value"}, "in": {"$concat": ["$$v", "$$v"]}}},
                }
            },
            "more than once",
        ),
        (
            {
                "$reduce": {
                    "input": "$tags",
                    "initialValue": "",
                    "in": {"$concat": ["$$value", "$title"]},
                }
            },
            "only from",
        ),
        (
            {
                "$reduce": {
                    "input": {"$range": [0, 500]},
                    "initialValue": "",
                    "in": {"$concat": ["$$value", "x" * 101]},
                }
            },
            "at most 20 characters",
        ),
        ({"$concat": ["$title", "$title"]}, r'takes "\$title" more than once'),
        ({"$range": [0, 100_000_000]}, "100,000,000 numbers; at most 500"),
        ({"$range": [0, "$n"]}, "written as integers"),
        ({"$map": {"input": "$tags", "in": {"$range": [0, 10]}}}, "one array per element"),
        ({"$map": {"input": {"$range": [0, 500]}, "in": "$title"}}, "own variables"),
        ({"$replaceAll": {"input": "$title", "find": "a", "replacement": "b" * 500}}, "500 times"),
    ],
)
async def test_growing_expressions_are_refused(
    titles: Db, expression: dict[str, Any], match: str
) -> None:
    async with asyncio.timeout(30):  # watchdog; figures: python bench/bench_hostile.py
        pipeline = [{"$project": {"s": expression}}]
        await refused(titles, match, "aggregate", "ai_t", pipeline=pipeline)
        update = [{"$set": {"s": expression}}]
        await refused(titles, match, "updateMany", "ai_t", filter={}, update=update)


async def test_doubling_through_an_alias_over_stages_is_refused(titles: Db) -> None:
    stages = [{"$set": {"b": "$title"}}, {"$set": {"title": {"$concat": ["$title", "$b"]}}}] * 10
    await refused(titles, "up to 1,024 times larger", "aggregate", "ai_t", pipeline=stages)
    loop = {"$map": {"input": {"$range": [0, 500]}, "in": {str(k): k for k in range(60)}}}
    await refused(
        titles,
        "longer than 300 characters",
        "aggregate",
        "ai_t",
        pipeline=[{"$project": {"s": loop}}],
    )


async def test_bounded_growth_still_works(titles: Db) -> None:
    joined = {
        "$reduce": {
            "input": "$tags",
            "initialValue": "",
            "in": {"$concat": ["$$value", "$$this", ","]},
        }
    }
    days = {"$map": {"input": {"$range": [0, 7]}, "as": "d", "in": {"$multiply": ["$$d", 2]}}}
    name = {"$concat": ["$title", " (", {"$toString": {"$strLenCP": "$title"}}, ")"]}
    result = await q(
        titles,
        "aggregate",
        "ai_t",
        pipeline=[
            {"$match": {"n": 0}},
            {"$project": {"_id": 0, "j": joined, "d": days, "t": name}},
        ],
    )
    assert result["rows"] == [
        {"j": f"{TITLE},ok,", "d": [0, 2, 4, 6, 8, 10, 12], "t": f"{TITLE} (51)"}
    ]
    await refused(
        titles,
        r"\$densify needs",
        "aggregate",
        "ai_t",
        pipeline=[{"$densify": {"field": "n", "range": {"step": 1, "bounds": "full"}}}],
    )


async def test_rows_over_the_row_cap_are_never_decoded_and_the_cap_is_named(db: Db) -> None:
    big = "x" * (MAX_ROW_BYTES + 10)
    await db.ai_big.insert_many([{"n": 0, "s": "small"}, {"n": 1, "s": big}, {"n": 2, "s": big}])
    result = await q(db, "find", "ai_big", sort={"n": 1})
    assert [r["n"] for r in result["rows"]] == [0]
    assert (
        f"over the limit of {MAX_ROW_BYTES:,} bytes" in result["note"]
        and "skip=2" in result["note"]
    )
    await refused(db, f"{MAX_ROW_BYTES:,} bytes", "find", "ai_big", filter={"n": 1})
    await refused(db, f"{MAX_ROW_BYTES:,} bytes", "findOne", "ai_big", filter={"n": 2})
    await refused(db, r"\$skip: 1", "aggregate", "ai_big", pipeline=[{"$match": {"n": {"$gt": 0}}}])
    projected = await q(db, "find", "ai_big", projection={"_id": 0, "n": 1}, sort={"n": 1})
    assert projected == {"rows": [{"n": 0}, {"n": 1}, {"n": 2}]}


async def test_reading_stops_at_the_cap_instead_of_fetching_everything(
    mongo_server: str, db: Db
) -> None:
    await db.ai_wide.insert_many([{"n": i, "s": "y" * 60_000} for i in range(200)])
    counter = _Transferred()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        mongo_server, directConnection=True, tz_aware=True, event_listeners=[counter]
    )
    try:
        result = await q(client[db.name], "find", "ai_wide", limit=200)
    finally:
        await client.close()
    assert result["rows"] == [] and "returned 0 of more than" in result["note"]
    assert counter.documents < 150, counter.documents  # of 200 rows, 12 MB


class _Transferred(monitoring.CommandListener):
    """Counts the documents the server sent in find/getMore replies."""

    documents = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        cursor = event.reply.get("cursor") or {}
        self.documents += len(cursor.get("firstBatch") or cursor.get("nextBatch") or [])

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass
