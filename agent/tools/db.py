"""``db_query``: the model's sandboxed access to the MongoDB memory."""

from __future__ import annotations

from datetime import tzinfo
from typing import Any

from bson.errors import BSONError
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import ExecutionTimeout, OperationFailure, PyMongoError

from agent.context import RunContext
from agent.llm.untrusted import for_model
from agent.tools.base import Tool, ToolError, ToolResult, result_json
from storage import collections as c
from storage.outside import OUTSIDE_KEY, Outside
from storage.sandbox.rules import OUTPUT_STAGES, READS, DbOperation, SandboxError

MAX_ERROR_CHARS = 300
MAX_REFUSAL_CHARS = 1_000
OTHERS_WORDS = frozenset({c.INBOX, c.MESSAGES, c.CONVERSATIONS})
"""Collections whose text is often not the owner's: contacts' messages, tool results
kept with the history (MCP, web). Read through ``db_query``, their rows are outside text."""
UNTRUSTED_KEY = "untrusted"
SCAN_DEPTH = 12


async def _db_query(args: DbOperation, ctx: RunContext) -> ToolResult:
    """Every outcome is a bounded result: refusals and server errors become error text."""
    from storage.sandbox.execute import run_db_query  # the first query loads the checks

    # Through a client of its own on the embedded server (``AgentDeps.query_db``).
    db = ctx.deps.db if ctx.deps.query_db is None else ctx.deps.query_db
    try:
        result = await run_db_query(in_timezone(db, ctx.tz), args)
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
    source = stored_outside(args, result)
    if not source:
        return result
    # Words stored from outside stay outside text when read back: in their block, and
    # the run that reads them is marked where its next request is built.
    return {"outside_text": for_model(Outside(result_json(result, ctx.tz), source))}


def stored_outside(op: DbOperation, result: Any) -> str:
    """Where the words ``op`` read came from, when some are not the owner's or ours
    ("stored messages"); "" when none are. A collection that keeps others' words
    (``OTHERS_WORDS``, by name or through a pipeline's ``$lookup``/``$unionWith``) or a
    value marked as outside text anywhere in the answer counts."""
    if not reads_only(op) or op.operation == "listCollections":
        return ""
    read = {op.collection, *_joined(op.pipeline or [])}
    kept = sorted(read & OTHERS_WORDS)
    if kept:
        return f"stored {', '.join(kept)} (words that may not be the owner's)"
    if _marked(result, SCAN_DEPTH):
        return f"stored outside text in {op.collection}"
    return ""


def _joined(value: Any) -> set[str]:
    """Every collection a pipeline names (``from``, ``coll``, ``$unionWith``)."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("from", "coll", "$unionWith") and isinstance(item, str):
                found.add(item)
            found |= _joined(item)
    elif isinstance(value, list):
        for item in value:
            found |= _joined(item)
    return found


def _marked(value: Any, depth: int) -> bool:
    """Whether ``value`` holds a stored marker of outside text: an ``Outside``
    (``outside: true``), an alert's ``outside`` map, the ``untrusted`` sources of a held
    call, a memory or a job; past ``depth`` levels it is taken to (a false alarm holds a
    call, never frees one)."""
    if depth <= 0:
        return True
    if isinstance(value, dict):
        for key, item in value.items():
            if key == OUTSIDE_KEY and (item is True or (isinstance(item, dict) and item)):
                return True
            if key == UNTRUSTED_KEY and isinstance(item, list) and item:
                return True
            if _marked(item, depth - 1):
                return True
    elif isinstance(value, list):
        return any(_marked(item, depth - 1) for item in value)
    return False


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
        "(fields): find, findOne (filter projection sort limit skip), "
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
