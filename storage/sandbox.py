"""The ``db_query`` sandbox: what the model may do to the database, and doing it.

Everything the model sends is checked before it reaches MongoDB: a fixed list of
operations, writes only to model-writable collections, no server-side JavaScript,
no other databases, no admin stages. Answers are bounded (row cap, size cap, server
time limit) so one query cannot flood the context window or stall the agent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal

import pymongo
from pydantic import BaseModel, Field, NonNegativeInt, PositiveInt, WithJsonSchema
from pymongo.asynchronous.database import AsyncDatabase

from storage.ejson import from_ejson, from_ejson_document, rows_within, to_ejson
from storage.sandbox_rules import (
    EMPTY,
    OUTPUT_STAGES,
    READS,
    SandboxError,
    check_collection_name,
    check_pipeline,
    check_writable,
    output_target,
    scan,
)

__all__ = ["DbOperation", "IndexOptions", "IndexSpec", "SandboxError", "run_db_query"]

Doc = dict[str, Any]
Direction = Literal[1, -1]

DEFAULT_LIMIT = 50
MAX_ROWS = 200
MAX_CHARS = 16_000
NOTE_RESERVE = 600
"""Characters kept free for the result's keys and notes within ``MAX_CHARS``."""
MAX_TIME_MS = 5_000
COMMENT = "watchkeeper db_query"


class IndexOptions(BaseModel):
    unique: bool | None = None
    expireAfterSeconds: NonNegativeInt | None = None  # MongoDB's spelling
    name: str | None = None


class IndexSpec(BaseModel):
    keys: dict[str, Direction]
    options: IndexOptions | None = None


# Lean JSON schemas: the field types below are validated by pydantic, but the schema the
# model sees only says "object"/"array", which keeps every request's tool list small.
_OBJECT = WithJsonSchema({"type": "object"})
_INTEGER = WithJsonSchema({"type": "integer"})
_OBJECTS = WithJsonSchema({"type": "array", "items": {"type": "object"}})
_OBJECT_OR_OBJECTS = WithJsonSchema(
    {"anyOf": [{"type": "object"}, {"type": "array", "items": {"type": "object"}}]}
)


class DbOperation(BaseModel):
    # Arguments of db_query; the names are fixed by DESIGN.md (no docstring: it would
    # become part of the schema sent with every request).

    operation: str = Field(
        description="find, findOne, insertOne, insertMany, updateOne, updateMany, deleteOne, "
        "deleteMany, countDocuments, aggregate, createCollection, createIndex, listCollections"
    )
    collection: str = ""
    filter: Annotated[Doc | None, _OBJECT] = None
    data: Annotated[Doc | list[Doc] | None, _OBJECT_OR_OBJECTS] = None
    update: Annotated[Doc | list[Doc] | None, _OBJECT_OR_OBJECTS] = Field(
        None, description='{"$set": {...}} etc., or a pipeline'
    )
    pipeline: Annotated[list[Doc] | None, _OBJECTS] = None
    sort: Annotated[dict[str, Direction] | None, _OBJECT] = None
    limit: Annotated[PositiveInt | None, _INTEGER] = Field(None, description="default 50, max 200")
    skip: Annotated[NonNegativeInt | None, _INTEGER] = None
    projection: Annotated[Doc | None, _OBJECT] = None
    upsert: bool | None = Field(None, description="updates: insert if no match")
    index: Annotated[IndexSpec | None, _OBJECT] = Field(
        None,
        description='{"keys": {field: 1 or -1}, "options": {unique, expireAfterSeconds, name}}',
    )


async def run_db_query(db: AsyncDatabase[Doc], op: DbOperation) -> Doc:
    """Check ``op`` against the sandbox rules, run it, and answer in Extended JSON.

    Raises ``SandboxError`` for anything refused; MongoDB's own errors propagate.
    """
    _check_operation(op)
    if op.operation in READS:
        check_collection_name(op.collection)
    elif op.operation != "listCollections":
        check_writable(op.collection)
    for name in ("filter", "update", "projection", "data", "sort"):
        scan(getattr(op, name), name)
    scan(op.index.keys if op.index else None, "index")
    if op.pipeline is not None:
        check_pipeline(op.pipeline, db.name)
    _, run = OPERATIONS[op.operation]
    return await run(db, op)


def _check_operation(op: DbOperation) -> None:
    if op.operation not in OPERATIONS:
        raise SandboxError(
            f"unknown operation {op.operation!r}; use one of: {', '.join(OPERATIONS)}"
            " (dropping collections or databases is not possible)"
        )
    given = {
        name
        for name in DbOperation.model_fields
        if name not in ("operation", "collection") and getattr(op, name) not in EMPTY
    }
    takes, _ = OPERATIONS[op.operation]
    if extra := given - takes:
        wanted = ", ".join(sorted(takes)) or "no other arguments"
        raise SandboxError(
            f"{op.operation} does not take {', '.join(sorted(extra))}; it takes {wanted}"
        )


def _convert(value: Any, where: str, *, document: bool = False) -> Any:
    """Extended JSON to BSON types; a document to store also may not have ``$`` fields."""
    try:
        return from_ejson_document(value) if document else from_ejson(value)
    except ValueError as exc:
        raise SandboxError(f"{where}: {exc}") from None


def _read_args(op: DbOperation) -> Doc:
    """Keyword arguments shared by find and find_one, with the server time limit."""
    return {
        "filter": _convert(op.filter or {}, "filter"),
        "projection": _convert(op.projection, "projection"),
        "sort": list(op.sort.items()) if op.sort else None,
        "skip": op.skip or 0,
        "max_time_ms": MAX_TIME_MS,
        "comment": COMMENT,
    }


def fit_rows(docs: list[Doc], skip: int) -> Doc:
    """``{"rows": [...]}`` within ``MAX_CHARS``, with a note when whole rows were dropped."""
    rows = rows_within(docs, MAX_CHARS - NOTE_RESERVE)
    result: Doc = {"rows": rows}
    if len(rows) < len(docs):
        result["note"] = (
            f"answer cut at about {MAX_CHARS} characters: returned {len(rows)} of "
            f"{len(docs)} rows; use a projection or a smaller limit, or skip={skip + len(rows)} "
            "for the rest"
        )
    return result


def _add_note(result: Doc, note: str | None) -> Doc:
    if note:
        result["note"] = f"{note}; {result['note']}" if "note" in result else note
    return result


async def _find(db: AsyncDatabase[Doc], op: DbOperation) -> Doc:
    limit = op.limit or DEFAULT_LIMIT
    note = None
    if limit > MAX_ROWS:
        note = f"limit {limit} capped at {MAX_ROWS} rows; use skip to page"
        limit = MAX_ROWS
    docs = await db[op.collection].find(**_read_args(op), limit=limit).to_list(length=limit)
    return _add_note(fit_rows(docs, op.skip or 0), note)


async def _find_one(db: AsyncDatabase[Doc], op: DbOperation) -> Doc:
    doc = await db[op.collection].find_one(**_read_args(op))
    rows = rows_within([] if doc is None else [doc], MAX_CHARS - NOTE_RESERVE)
    if doc is not None and not rows:
        return {"row": None, "note": "the document is too large to show; use a projection"}
    return {"row": rows[0] if rows else None}


async def _count(db: AsyncDatabase[Doc], op: DbOperation) -> Doc:
    options: Doc = {k: v for k, v in (("limit", op.limit), ("skip", op.skip)) if v}
    options |= {"maxTimeMS": MAX_TIME_MS, "comment": COMMENT}
    count = await db[op.collection].count_documents(_convert(op.filter or {}, "filter"), **options)
    return {"count": count}


async def _aggregate(db: AsyncDatabase[Doc], op: DbOperation) -> Doc:
    pipeline: list[Doc] = _convert(op.pipeline, "pipeline")
    if not pipeline:
        raise SandboxError("aggregate needs a non-empty pipeline")
    last = next(iter(pipeline[-1]))
    writes = last in OUTPUT_STAGES
    if not writes:
        pipeline = [*pipeline, {"$limit": MAX_ROWS + 1}]
    cursor = await db[op.collection].aggregate(pipeline, maxTimeMS=MAX_TIME_MS, comment=COMMENT)
    docs = await cursor.to_list(length=MAX_ROWS + 1)
    if writes:
        target = output_target(last, pipeline[-1][last], db.name)
        return {"rows": [], "note": f"pipeline output written to {target!r}"}
    note = None
    if len(docs) > MAX_ROWS:
        docs = docs[:MAX_ROWS]
        note = f"capped at {MAX_ROWS} rows; add $skip/$limit stages to page"
    return _add_note(fit_rows(docs, 0), note)


async def _list_collections(db: AsyncDatabase[Doc], op: DbOperation) -> Doc:
    names = await db.list_collection_names(comment=COMMENT)
    return {"collections": sorted(n for n in names if not n.startswith("system."))}


async def _insert(db: AsyncDatabase[Doc], op: DbOperation) -> Doc:
    coll = db[op.collection]
    if op.operation == "insertOne":
        if not isinstance(op.data, dict):
            raise SandboxError("insertOne needs data: one document (use insertMany for a list)")
        with pymongo.timeout(MAX_TIME_MS / 1000):
            one = await coll.insert_one(_convert(op.data, "data", document=True), comment=COMMENT)
        return {"insertedId": to_ejson(one.inserted_id)}
    if not isinstance(op.data, list) or not op.data:
        raise SandboxError("insertMany needs data: a non-empty list of documents")
    if len(op.data) > MAX_ROWS:
        raise SandboxError(f"insertMany takes at most {MAX_ROWS} documents per call")
    docs = [_convert(d, "data", document=True) for d in op.data]
    with pymongo.timeout(MAX_TIME_MS / 1000):
        many = await coll.insert_many(docs, comment=COMMENT)
    return {"insertedCount": len(many.inserted_ids), "insertedIds": to_ejson(many.inserted_ids)}


def _update_spec(op: DbOperation) -> Doc | list[Doc]:
    update = op.update
    if not update:
        raise SandboxError(f'{op.operation} needs update, e.g. {{"$set": {{"field": value}}}}')
    if isinstance(update, dict):
        plain = [k for k in update if not k.startswith("$")]
        if plain:
            raise SandboxError(
                f"update must use operators such as $set, $unset, $inc, $push (found plain "
                f'field {plain[0]!r}); write {{"$set": {{...}}}} to change fields'
            )
    else:
        check_pipeline(update, "", "update")  # $out/$merge were refused by scan()
    converted: Doc | list[Doc] = _convert(update, "update")
    return converted


async def _update(db: AsyncDatabase[Doc], op: DbOperation) -> Doc:
    coll = db[op.collection]
    method = coll.update_one if op.operation == "updateOne" else coll.update_many
    update = _update_spec(op)
    with pymongo.timeout(MAX_TIME_MS / 1000):
        res = await method(
            _convert(op.filter or {}, "filter"), update, upsert=bool(op.upsert), comment=COMMENT
        )
    result: Doc = {"matchedCount": res.matched_count, "modifiedCount": res.modified_count}
    if res.upserted_id is not None:
        result["upsertedId"] = to_ejson(res.upserted_id)
    return result


async def _delete(db: AsyncDatabase[Doc], op: DbOperation) -> Doc:
    coll = db[op.collection]
    method = coll.delete_one if op.operation == "deleteOne" else coll.delete_many
    with pymongo.timeout(MAX_TIME_MS / 1000):
        res = await method(_convert(op.filter or {}, "filter"), comment=COMMENT)
    return {"deletedCount": res.deleted_count}


async def _create_collection(db: AsyncDatabase[Doc], op: DbOperation) -> Doc:
    if op.collection in await db.list_collection_names():
        return {"success": True, "collection": op.collection, "note": "it already existed"}
    await db.create_collection(op.collection)
    return {"success": True, "collection": op.collection}


async def _create_index(db: AsyncDatabase[Doc], op: DbOperation) -> Doc:
    if op.index is None or not op.index.keys:
        raise SandboxError('createIndex needs index: {"keys": {"field": 1}, "options": {...}}')
    keys = op.index.keys
    options = op.index.options.model_dump(exclude_none=True) if op.index.options else {}
    ttl = options.get("expireAfterSeconds")
    if ttl is not None and len(keys) != 1:
        raise SandboxError("expireAfterSeconds needs a single-field index (on a date field)")
    with pymongo.timeout(MAX_TIME_MS / 1000):
        name = await db[op.collection].create_index(list(keys.items()), comment=COMMENT, **options)
    return {"success": True, "collection": op.collection, "index": name}


Runner = Callable[[AsyncDatabase[Doc], DbOperation], Awaitable[Doc]]
OPERATIONS: Mapping[str, tuple[frozenset[str], Runner]] = MappingProxyType(
    {
        "find": (frozenset({"filter", "projection", "sort", "limit", "skip"}), _find),
        "findOne": (frozenset({"filter", "projection", "sort", "skip"}), _find_one),
        "countDocuments": (frozenset({"filter", "limit", "skip"}), _count),
        "aggregate": (frozenset({"pipeline"}), _aggregate),
        "listCollections": (frozenset(), _list_collections),
        "insertOne": (frozenset({"data"}), _insert),
        "insertMany": (frozenset({"data"}), _insert),
        "updateOne": (frozenset({"filter", "update", "upsert"}), _update),
        "updateMany": (frozenset({"filter", "update", "upsert"}), _update),
        "deleteOne": (frozenset({"filter"}), _delete),
        "deleteMany": (frozenset({"filter"}), _delete),
        "createCollection": (frozenset(), _create_collection),
        "createIndex": (frozenset({"index"}), _create_index),
    }
)
"""Each operation: the arguments it takes (besides operation and collection), its runner."""
