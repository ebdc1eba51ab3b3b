"""Running a ``db_query``: every check of the sandbox, then the operation, in bounded time.

``check_request`` runs the pure checks (``storage.sandbox.rules``, ``regex``, ``growth``)
in an order that bounds the later walks; ``OPERATIONS`` is the table of operations, the
arguments each takes and the function that runs it. Every command gets the server's
``maxTimeMS`` and the call itself gives up after ``CALL_TIMEOUT`` seconds even if the
server stalls; answers are read within ``storage.sandbox.read``'s caps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any

import pymongo
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import ExecutionTimeout, NetworkTimeout

from storage import retry
from storage.ejson import from_ejson, from_ejson_document, to_ejson
from storage.sandbox.growth import (
    builds,
    check_built_sizes,
    check_growth,
    check_untried_building,
    check_written_strings,
)
from storage.sandbox.read import (
    BATCH_SIZE,
    answer,
    fit_json,
    fit_names,
    raw_collection,
    read,
)
from storage.sandbox.regex import check_regexes
from storage.sandbox.rules import (
    EMPTY,
    OUTPUT_STAGES,
    READS,
    DbOperation,
    SandboxError,
    check_document_depth,
    check_paging,
    check_pipeline,
    check_readable,
    check_shape,
    check_stage_count,
    check_ttl,
    check_update_depth,
    check_writable,
    output_target,
    scan,
)

Doc = dict[str, Any]

DEFAULT_LIMIT = 50
MAX_ROWS = 200
MAX_TIME_MS = 4_000
"""The server's time limit (``maxTimeMS``, and pymongo's own deadline for the call)."""
CALL_TIMEOUT = 5.0
"""Seconds after which the call gives up whatever the server does (it may be stalled)."""
COMMENT = "watchkeeper db_query"
ARGUMENTS = ("filter", "data", "update", "pipeline", "sort", "projection", "index")
WRAPPERS = {"data": 1, "update": 2}
"""Levels an argument's own shape adds above what it stores: a list of documents, or an
update operator and its field map."""
EXPRESSIONS = ("filter", "update", "projection", "pipeline")
"""Arguments that may hold aggregation expressions."""


class QueryTimeout(SandboxError):
    """The call ran out of time; the server may still be working on it."""


async def run_db_query(
    db: AsyncDatabase[Doc], op: DbOperation, *, time_limit: float = CALL_TIMEOUT
) -> Doc:
    """Check ``op`` against the sandbox rules, run it, and answer in Extended JSON.

    Raises ``SandboxError`` for anything refused, ``QueryTimeout`` (one of them) when
    the call outlives ``time_limit`` seconds or the server's time limit; MongoDB's other
    errors propagate.
    """
    check_request(op, db.name)
    _, run = OPERATIONS[op.operation]
    try:
        async with asyncio.timeout(time_limit) as deadline:
            with pymongo.timeout(min(time_limit, MAX_TIME_MS / 1000)):
                answer = await run(db, op)
        # The deadline's cancellation can meet the driver's own timeout and be lost
        # there (seen under load: an answer came back past the limit, as if the stalled
        # server had found nothing): past the deadline is a timeout, whatever came back.
        if not deadline.expired():
            return answer
    except (TimeoutError, ExecutionTimeout, NetworkTimeout):
        pass
    raise QueryTimeout(
        f"the query did not finish within {min(time_limit, MAX_TIME_MS / 1000):g} s and was "
        "abandoned; narrow the filter, add a limit or an index, or split the work"
    ) from None


def check_request(op: DbOperation, db_name: str) -> None:
    """Every pure check of the sandbox, in an order that bounds the later walks."""
    _check_operation(op)
    check_paging(op.limit, op.skip)
    check_ttl(op.index.options.expireAfterSeconds if op.index and op.index.options else None)
    if op.operation in READS:
        check_readable(op.collection)
    elif op.operation != "listCollections":
        check_writable(op.collection)
    values = {name: getattr(op, name) for name in ARGUMENTS}
    values["index"] = op.index.keys if op.index else None
    for doc in op.data if isinstance(op.data, list) else [op.data] if op.data else []:
        check_document_depth(doc, "data")
    check_update_depth(op.update)
    for name, value in values.items():  # before the recursive walks below: depth is bounded
        check_shape(value, name, wrappers=WRAPPERS.get(name, 0))
    for name, value in values.items():
        if name != "pipeline":
            scan(value, name)
        check_regexes(value, name)
    for name in EXPRESSIONS:
        check_growth(values[name], name)
    writes_output = op.operation == "aggregate" and _writes(op.pipeline)
    for name in ("data", "update", *(("pipeline",) if writes_output else ())):
        check_written_strings(values[name], name)
    check_untried_building(op.update, bool(op.upsert), op.pipeline if writes_output else None)
    check_stage_count(op.pipeline, "pipeline")
    check_stage_count(op.update if isinstance(op.update, list) else None, "update")
    if op.pipeline is not None:
        check_pipeline(op.pipeline, db_name)


def _writes(pipeline: list[Doc] | None) -> bool:
    """The pipeline ends in ``$out`` or ``$merge``."""
    last = pipeline[-1] if pipeline else None
    return isinstance(last, dict) and bool(last.keys() & OUTPUT_STAGES)


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
    """Keyword arguments of find; ``pymongo.timeout`` gives every command its ``maxTimeMS``."""
    return {
        "filter": _convert(op.filter or {}, "filter"),
        "projection": _convert(op.projection, "projection"),
        "sort": list(op.sort.items()) if op.sort else None,
        "skip": op.skip or 0,
        "comment": COMMENT,
    }


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
    skip = op.skip or 0
    cursor = raw_collection(db, op.collection).find(
        **_read_args(op), limit=limit, batch_size=min(limit, BATCH_SIZE)
    )
    reading = await read(cursor, db.codec_options, limit)
    return _add_note(answer(reading, lambda n: f"skip={skip + n}"), note)


async def _find_one(db: AsyncDatabase[Doc], op: DbOperation) -> Doc:
    skip = op.skip or 0
    cursor = raw_collection(db, op.collection).find(**_read_args(op), limit=1)
    reading = await read(cursor, db.codec_options, 1)
    rows = answer(reading, lambda n: f"skip={skip + n}")["rows"]
    return {"row": rows[0] if rows else None}


async def _count(db: AsyncDatabase[Doc], op: DbOperation) -> Doc:
    options: Doc = {k: v for k, v in (("limit", op.limit), ("skip", op.skip)) if v}
    count = await db[op.collection].count_documents(
        _convert(op.filter or {}, "filter"), comment=COMMENT, **options
    )
    return {"count": count}


async def _aggregate(db: AsyncDatabase[Doc], op: DbOperation) -> Doc:
    pipeline: list[Doc] = _convert(op.pipeline, "pipeline")
    if not pipeline:
        raise SandboxError("aggregate needs a non-empty pipeline")
    last = next(iter(pipeline[-1]))
    writes = last in OUTPUT_STAGES
    if not writes:
        pipeline = [*pipeline, {"$limit": MAX_ROWS + 1}]
    elif builds(pipeline[:-1]):
        await check_built_sizes(db, op.collection, pipeline[:-1], f"this {last}", COMMENT)
    cursor = await raw_collection(db, op.collection).aggregate(
        pipeline, batchSize=BATCH_SIZE, comment=COMMENT
    )
    reading = await read(cursor, db.codec_options, MAX_ROWS)
    if writes:
        target = output_target(last, pipeline[-1][last], db.name)
        return {"rows": [], "note": f"pipeline output written to {target!r}"}
    note = f"capped at {MAX_ROWS} rows; add $skip/$limit stages to page" if reading.capped else None
    return _add_note(answer(reading, lambda n: f"a {{$skip: {n}}} stage"), note)


async def _list_collections(db: AsyncDatabase[Doc], op: DbOperation) -> Doc:
    names = await db.list_collection_names(comment=COMMENT)
    return fit_names(sorted(n for n in names if not n.startswith("system.")))


async def _insert(db: AsyncDatabase[Doc], op: DbOperation) -> Doc:
    coll = db[op.collection]
    if op.operation == "insertOne":
        if not isinstance(op.data, dict):
            raise SandboxError("insertOne needs data: one document (use insertMany for a list)")
        doc = _convert(op.data, "data", document=True)
        with pymongo.timeout(MAX_TIME_MS / 1000):
            await retry.insert(coll, doc, comment=COMMENT)  # a retry knows its own _id
        return {"insertedId": to_ejson(doc["_id"])}
    if not isinstance(op.data, list) or not op.data:
        raise SandboxError("insertMany needs data: a non-empty list of documents")
    if len(op.data) > MAX_ROWS:
        raise SandboxError(f"insertMany takes at most {MAX_ROWS} documents per call")
    docs = [_convert(d, "data", document=True) for d in op.data]
    with pymongo.timeout(MAX_TIME_MS / 1000):
        await retry.insert_many(coll, docs, comment=COMMENT)  # a retry adds what is missing
    ids, note = fit_json(to_ejson([doc["_id"] for doc in docs]), "insertedIds")
    return _add_note({"insertedCount": len(docs), "insertedIds": ids}, note)


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
    query = _convert(op.filter or {}, "filter")
    if isinstance(update, list) and builds(update):
        stages = [{"$match": query}, *update]
        await check_built_sizes(db, op.collection, stages, "this update", COMMENT)

    async def send() -> Any:
        with pymongo.timeout(MAX_TIME_MS / 1000):
            return await method(query, update, upsert=bool(op.upsert), comment=COMMENT)

    res = await (retry.retried(send, "db_query update") if _repeatable(op, update) else send())
    result: Doc = {"matchedCount": res.matched_count, "modifiedCount": res.modified_count}
    if res.upserted_id is not None:
        result["upsertedId"] = to_ejson(res.upserted_id)
    return result


IDEMPOTENT_UPDATES = frozenset(
    {"$set", "$unset", "$setOnInsert", "$min", "$max", "$addToSet", "$pull", "$pullAll"}
)


def _repeatable(op: DbOperation, update: Doc | list[Doc]) -> bool:
    """Whether sending this update twice is the same as once, so a dropped connection
    may be retried: idempotent operators only, and either by ``_id`` or over every
    match without an upsert (the model's other writes get the error and decide)."""
    if not isinstance(update, dict) or not set(update) <= IDEMPOTENT_UPDATES:
        return False
    return "_id" in (op.filter or {}) or (op.operation == "updateMany" and not op.upsert)


async def _delete(db: AsyncDatabase[Doc], op: DbOperation) -> Doc:
    coll = db[op.collection]
    method = coll.delete_one if op.operation == "deleteOne" else coll.delete_many
    query = _convert(op.filter or {}, "filter")

    async def send() -> Any:
        with pymongo.timeout(MAX_TIME_MS / 1000):
            return await method(query, comment=COMMENT)

    repeatable = op.operation == "deleteMany" or "_id" in query
    res = await (retry.retried(send, "db_query delete") if repeatable else send())
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
