"""The ``db_query`` sandbox: what the model may do to the database, and doing it.

Everything the model sends is checked before it reaches MongoDB: a fixed list of
operations, writes only to model-writable collections, no server-side JavaScript,
no other databases, no admin stages. Answers are bounded (row cap, size cap, server
time limit) so one query cannot flood the context window or stall the agent.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal

import pymongo
from pydantic import BaseModel, Field, NonNegativeInt, PositiveInt, WithJsonSchema
from pymongo.asynchronous.database import AsyncDatabase

from storage.collections import PROTECTED, model_may_write
from storage.ejson import from_ejson, from_ejson_document, rows_within, to_ejson, walk

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
MAX_NAME_LENGTH = 120

READS: frozenset[str] = frozenset({"find", "findOne", "countDocuments", "aggregate"})
FORBIDDEN_OPERATORS: frozenset[str] = frozenset({"$where", "$function", "$accumulator"})
"""Server-side JavaScript: arbitrary code and no time or memory bounds we control."""
# Stages about the server and other clients rather than the collection's documents.
# fmt: off
FORBIDDEN_STAGES: frozenset[str] = frozenset({
    "$currentOp", "$listLocalSessions", "$listSessions", "$planCacheStats", "$changeStream",
    "$changeStreamSplitLargeEvent", "$listCatalog", "$listClusterCatalog",
    "$listSampledQueries", "$listSearchIndexes", "$querySettings", "$shardedDataDistribution",
})
# fmt: on
OUTPUT_STAGES: frozenset[str] = frozenset({"$out", "$merge"})
EMPTY: tuple[Any, ...] = (None, False, {}, [])
"""Argument values that count as not given (0 compares equal to False)."""
TOOL_HINTS: Mapping[str, str] = MappingProxyType(
    {
        "cronjobs": " Use the manage_cronjob tool instead.",
        "whatsapp_permissions": " Use the whatsapp_manage_permission tool instead.",
        "alerts": " Use raise_alert or manage_alerts instead.",
        "settings": " Use save_memory, update_db_schema or manage_pulse instead.",
    }
)
WRITABLE_HINT = "db_query writes only to master, contacts, schedule and ai_* collections"


class SandboxError(ValueError):
    """A refused or malformed query; the message is shown to the model as is."""


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


def check_collection_name(name: str) -> None:
    """Refuse names that are empty, reach system collections or another database."""
    if not name:
        raise SandboxError("collection is required (for example 'ai_notes')")
    if "\0" in name or "$" in name:
        raise SandboxError(f"invalid collection name {name!r}: '$' and NUL are not allowed")
    if name == "system" or name.startswith("system."):
        raise SandboxError(f"collection {name!r} is a system collection and is off limits")
    if "." in name:
        raise SandboxError(
            f"invalid collection name {name!r}: '.' is not allowed (no other databases or "
            "sub-namespaces); use '_' instead"
        )
    if len(name) > MAX_NAME_LENGTH:
        raise SandboxError(f"collection name is longer than {MAX_NAME_LENGTH} characters")


def check_writable(name: str) -> None:
    """Refuse a write to anything but master, contacts, schedule and ai_* collections."""
    check_collection_name(name)
    if model_may_write(name):
        return
    if name in PROTECTED:
        raise SandboxError(
            f"collection {name!r} is protected: it can be read but not changed; "
            f"{WRITABLE_HINT}.{TOOL_HINTS.get(name, '')}"
        )
    raise SandboxError(
        f"collection {name!r} is not writable: {WRITABLE_HINT} (use 'ai_{name}' instead)"
    )


def scan(node: Any, where: str) -> None:
    """Refuse forbidden operators and stages at any depth (``$expr``, ``$facet``, sub-pipelines).

    Also checks the sources of ``$lookup``/``$graphLookup``/``$unionWith`` wherever they
    are; ``$out``/``$merge`` are valid only as the last top-level stage (``check_pipeline``).
    """
    for key, value in walk(node):
        if key in FORBIDDEN_OPERATORS:
            raise SandboxError(
                f"{key} is not allowed (server-side JavaScript is disabled); found in {where}. "
                "Use query operators, $expr or aggregation operators instead."
            )
        if key in FORBIDDEN_STAGES:
            raise SandboxError(f"{key} is an administrative stage and is not allowed")
        if key in OUTPUT_STAGES:
            raise SandboxError(f"{key} is only allowed as the last stage of an aggregate pipeline")
        if key in ("$lookup", "$graphLookup"):
            _check_source(value.get("from") if isinstance(value, Mapping) else None, key)
        elif key == "$unionWith":
            _check_source(value.get("coll") if isinstance(value, Mapping) else value, key)
            if isinstance(value, Mapping) and "db" in value:
                raise SandboxError("$unionWith may not read another database")


def _check_source(source: Any, stage: str) -> None:
    if source is None:
        return
    if isinstance(source, Mapping):
        raise SandboxError(
            f"{stage} may not read another database; name a collection of this database"
        )
    if not isinstance(source, str):
        raise SandboxError(f"{stage}: the source collection must be a name")
    check_collection_name(source)


def check_pipeline(pipeline: list[Doc], db_name: str, where: str = "pipeline") -> None:
    """Check stage shapes and that ``$out``/``$merge`` write only into writable collections."""
    for position, stage in enumerate(pipeline):
        if len(stage) != 1 or not next(iter(stage)).startswith("$"):
            raise SandboxError(
                f'{where} stage {position + 1} must be one {{"$stage": ...}} object, '
                f"got {json.dumps(stage, default=str)[:200]}"
            )
        name, spec = next(iter(stage.items()))
        if name in OUTPUT_STAGES:
            if position != len(pipeline) - 1:
                raise SandboxError(f"{name} is only allowed as the last stage of the pipeline")
            check_writable(output_target(name, spec, db_name))
            scan(spec, where)
        else:
            scan(stage, where)


def output_target(stage: str, spec: Any, db_name: str) -> str:
    """The collection a ``$out``/``$merge`` stage writes into (refusing other databases)."""
    target = spec.get("into") if stage == "$merge" and isinstance(spec, Mapping) else spec
    if isinstance(target, Mapping):
        if target.get("db", db_name) != db_name:
            raise SandboxError(f"{stage} may not write into another database")
        target = target.get("coll")
    if not isinstance(target, str):
        raise SandboxError(f"{stage} needs a target collection name")
    return target


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
