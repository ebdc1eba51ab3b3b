"""``db_query``: the model's sandboxed access to the MongoDB memory."""

from __future__ import annotations

from datetime import tzinfo
from typing import Any

from bson.errors import BSONError
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import ExecutionTimeout, OperationFailure, PyMongoError

from agent.context import RunContext
from agent.tools.base import Tool, ToolError, ToolResult
from storage.sandbox import DbOperation, SandboxError, run_db_query
from storage.sandbox.rules import OUTPUT_STAGES, READS

MAX_ERROR_CHARS = 300
MAX_REFUSAL_CHARS = 1_000


async def _db_query(args: DbOperation, ctx: RunContext) -> ToolResult:
    """Every outcome is a bounded result: refusals and server errors become error text."""
    try:
        return await run_db_query(in_timezone(ctx.deps.db, ctx.tz), args)
    except SandboxError as exc:
        raise ToolError(str(exc)[:MAX_REFUSAL_CHARS]) from None
    except ExecutionTimeout:
        raise ToolError(
            "the query ran over its time limit; narrow the filter, add a limit or an index"
        ) from None
    except OperationFailure as exc:
        raise ToolError(f"database refused the query: {_server_message(exc)}") from None
    except (PyMongoError, BSONError) as exc:
        raise ToolError(f"database error: {_first_line(str(exc))}") from None
    except (OverflowError, RecursionError, MemoryError):
        raise ToolError("the query is too large or too deeply nested; simplify it") from None


def reads_only(op: DbOperation) -> bool:
    """Whether ``op`` only reads: a find, a count, a listing, a pipeline that writes
    nowhere (no ``$out``/``$merge``)."""
    if op.operation == "aggregate":
        last = (op.pipeline or [{}])[-1]
        return not any(stage in last for stage in OUTPUT_STAGES)
    return op.operation in READS or op.operation == "listCollections"


def in_timezone(db: AsyncDatabase[dict[str, Any]], tz: tzinfo) -> AsyncDatabase[dict[str, Any]]:
    """``db`` reading dates as aware datetimes in ``tz``: answers show the owner's offset."""
    return db.with_options(codec_options=db.codec_options.with_options(tz_aware=True, tzinfo=tz))


def _server_message(exc: OperationFailure) -> str:
    """The server's own message, without pymongo's ``full error: {...}`` dump."""
    details = exc.details or {}
    message = details.get("errmsg")
    write_errors = details.get("writeErrors")
    if not message and write_errors:
        message = write_errors[0].get("errmsg")
    return _first_line(str(message or exc).split(", full error:")[0])


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "unknown error"
    return line[:MAX_ERROR_CHARS]


DB_QUERY: Tool[DbOperation] = Tool(
    name="db_query",
    description=(
        "One MongoDB operation; writable: master, contacts, schedule, ai_*. Operation "
        "(fields): find (filter projection sort limit skip), findOne (no limit), "
        "countDocuments (filter), aggregate (pipeline), insertOne/insertMany (data), "
        "updateOne/updateMany (filter update upsert), deleteOne/deleteMany (filter), "
        'createIndex (index), createCollection, listCollections. Dates: {"$date": ISO}, '
        "shown in the owner's timezone with offset; write an offset or Z (none = UTC). "
        'Ids: {"$oid": hex}.'
    ),
    args=DbOperation,
    handler=_db_query,
    writes=True,
    acting=lambda op: not reads_only(op),
)
