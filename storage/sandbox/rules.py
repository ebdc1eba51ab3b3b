"""The ``db_query`` sandbox's rules: its arguments, and which names, operators, stages
and sizes the model may use.

Pure checks over what the model sent, before anything reaches MongoDB: no system
collections or other databases, writes only to model-writable collections, no
server-side JavaScript or administrative stages at any depth; numbers the drivers can
encode (64-bit), documents nested no deeper than MongoDB stores, bounded paging and
stage counts. Each refusal is a ``SandboxError`` whose message names the rule, so the
model can correct its query. The walks are iterative, so an argument nested thousands
deep is refused rather than overflowing the stack.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, NonNegativeInt, WithJsonSchema

from storage.collections import PAIRING, PROTECTED, model_may_write
from storage.ejson import walk

Doc = dict[str, Any]
Direction = Literal[1, -1]

# The arguments of ``db_query`` as the model sends them (names fixed by DESIGN.md).


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
_OBJECT_OR_OBJECTS = WithJsonSchema({"anyOf": [{"type": "object"}, {"type": "array"}]})
"""A document or a list of them (the description names each operation's shape)."""


class DbOperation(BaseModel):
    # Arguments of db_query; the names are fixed by DESIGN.md (no docstring: it would
    # become part of the schema sent with every request).

    operation: str  # the tool's description lists them with the fields each takes
    collection: str = ""
    filter: Annotated[Doc | None, _OBJECT] = None
    data: Annotated[Doc | list[Doc] | None, _OBJECT_OR_OBJECTS] = None
    update: Annotated[Doc | list[Doc] | None, _OBJECT_OR_OBJECTS] = Field(
        None, description="update operators, or a pipeline"
    )
    pipeline: Annotated[list[Doc] | None, _OBJECTS] = None
    sort: Annotated[dict[str, Direction] | None, _OBJECT] = None
    limit: Annotated[NonNegativeInt | None, _INTEGER] = Field(
        None, description="default 50, max 200"
    )
    skip: Annotated[NonNegativeInt | None, _INTEGER] = None
    projection: Annotated[Doc | None, _OBJECT] = None
    upsert: bool | None = None
    index: Annotated[IndexSpec | None, _OBJECT] = Field(
        None,
        description='{"keys": {field: 1 or -1}, "options": {unique, expireAfterSeconds}}',
    )


# Names, operators and stages.

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
        "settings": " Use update_db_schema or manage_pulse instead.",
        "memories": " Use save_memory (replaces corrects a fact) or forget_memory instead.",
    }
)
WRITABLE_HINT = "db_query writes only to master, contacts, schedule and ai_* collections"


class SandboxError(ValueError):
    """A refused or malformed query; the message is shown to the model as is."""


def check_collection_name(name: str) -> None:
    """MongoDB's naming rules and ours: not empty, no ``$``, NUL or other control or
    invisible characters (newlines, zero-width and direction marks), no spaces at the
    ends, no ``.`` (so no other database or system collection), at most
    ``MAX_NAME_LENGTH`` bytes in UTF-8."""
    if not name:
        raise SandboxError("collection is required (for example 'ai_notes')")
    shown = repr(name) if len(name) <= 60 else repr(name[:57] + "...")
    if "\0" in name or "$" in name:
        raise SandboxError(f"invalid collection name {shown}: '$' and NUL are not allowed")
    if any(unicodedata.category(c)[0] == "C" or c in "\u2028\u2029" for c in name):
        raise SandboxError(
            f"invalid collection name {shown}: control and invisible characters such as "
            "newlines and tabs are not allowed; use letters, digits and '_'"
        )
    if name != name.strip():
        raise SandboxError(f"invalid collection name {shown}: no spaces at the start or end")
    if name == "system" or name.startswith("system."):
        raise SandboxError(f"collection {shown} is a system collection and is off limits")
    if "." in name:
        raise SandboxError(
            f"invalid collection name {shown}: '.' is not allowed (no other databases or "
            "sub-namespaces); use '_' instead"
        )
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_LENGTH:
        raise SandboxError(
            f"collection name is longer than {MAX_NAME_LENGTH} bytes (UTF-8); use a shorter one"
        )


SECRET_HOLDERS: dict[str, str] = {PAIRING: "pending pairing codes"}
"""Collections that hold secrets in the clear: never read through ``db_query``, directly
or by a pipeline (DESIGN: secrets are never returned). Ping tokens are kept only as
hashes, so ``monitors`` stays readable."""


def check_readable(name: str) -> None:
    """A read of ``name``: a valid name, and not a collection holding secrets."""
    check_collection_name(name)
    if name in SECRET_HOLDERS:
        raise SandboxError(
            f"collection {name!r} holds {SECRET_HOLDERS[name]}, which are secrets: it cannot "
            "be read; `watchkeeper pair --list` shows owners to the person at the server"
        )


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
    check_readable(source)


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


# Sizes and ranges, checked before anything is converted or sent.

MAX_DEPTH = 100
"""Levels of nested documents and arrays (MongoDB's limit for stored documents)."""
MAX_LIMIT = 10_000
MAX_SKIP = 2**31 - 1
MAX_TTL_SECONDS = 2**31 - 1
MAX_STAGES = 50
"""Stages in one request, sub-pipelines of ``$lookup``/``$unionWith``/``$facet`` included."""
INT64 = (-(2**63), 2**63 - 1)
UPDATE_ARRAY_OPERATORS = frozenset({"$push", "$addToSet"})


def check_paging(limit: int | None, skip: int | None) -> None:
    if limit is not None and not 0 <= limit <= MAX_LIMIT:
        raise SandboxError(
            f"limit must be between 0 and {MAX_LIMIT:,} (an answer holds at most 200 rows; "
            "page with skip)"
        )
    if skip is not None and not 0 <= skip <= MAX_SKIP:
        raise SandboxError(
            f"skip must be between 0 and {MAX_SKIP:,}; to reach the end of a collection "
            "sort the other way instead"
        )


def check_ttl(seconds: int | None) -> None:
    if seconds is not None and seconds > MAX_TTL_SECONDS:
        raise SandboxError(f"expireAfterSeconds must be at most {MAX_TTL_SECONDS:,}")


def check_shape(value: Any, where: str, wrappers: int = 0) -> None:
    """At most ``MAX_DEPTH`` levels (plus ``wrappers``, the levels the argument's own
    shape adds: a list of documents, an update operator), every integer within 64 bits."""
    for depth, node in _nodes(value):
        if depth > MAX_DEPTH + wrappers and isinstance(node, Mapping | list):
            raise SandboxError(
                f"{where} nests more than {MAX_DEPTH} levels of objects and arrays; flatten it"
            )
        if (
            isinstance(node, int)
            and not isinstance(node, bool)
            and not (INT64[0] <= node <= INT64[1])
        ):
            shown = str(node) if node.bit_length() < 200 else f"a {node.bit_length()}-bit number"
            raise SandboxError(
                f"{where}: {shown[:60]} is out of range; MongoDB integers are 64-bit "
                f"(at most {INT64[1]:,})"
            )


def check_document_depth(doc: Any, where: str) -> None:
    """A document to store: the document itself is level 1 (MongoDB counts the same way)."""
    deepest = max((d for d, node in _nodes(doc) if isinstance(node, Mapping | list)), default=0)
    if deepest > MAX_DEPTH:
        raise SandboxError(
            f"{where}: the document nests more than {MAX_DEPTH} levels of objects and arrays, "
            "MongoDB's limit; flatten it"
        )


def check_update_depth(update: Any) -> None:
    """Values set by update operators, placed at the depth their dotted path gives them."""
    if not isinstance(update, Mapping):
        return  # pipeline updates compute their values; check_shape bounds the pipeline
    for operator, fields in update.items():
        if not isinstance(fields, Mapping):
            continue
        for path, value in fields.items():
            base = str(path).count(".") + 1 + (operator in UPDATE_ARRAY_OPERATORS)
            inner = max((d for d, n in _nodes(value) if isinstance(n, Mapping | list)), default=0)
            if base + inner > MAX_DEPTH:
                raise SandboxError(
                    f"update: {operator} {str(path)[:60]!r} would store a value {base + inner} "
                    f"levels deep; MongoDB allows at most {MAX_DEPTH}"
                )


def count_stages(pipeline: list[Any]) -> int:
    """Stages of ``pipeline`` and of every sub-pipeline inside it."""
    total = 0
    pending: list[Any] = [pipeline]
    while pending:
        stages = pending.pop()
        if not isinstance(stages, list):
            continue
        total += len(stages)
        for stage in stages:
            if not isinstance(stage, Mapping):
                continue
            for name, spec in stage.items():
                if name == "$facet" and isinstance(spec, Mapping):
                    pending.extend(spec.values())
                elif isinstance(spec, Mapping):
                    pending.extend(spec.get(key) for key in ("pipeline", "whenMatched"))
    return total


def check_stage_count(pipeline: list[Any] | None, where: str) -> None:
    if pipeline is not None and (count := count_stages(pipeline)) > MAX_STAGES:
        raise SandboxError(
            f"{where} has {count} stages (sub-pipelines included); at most {MAX_STAGES} are "
            "allowed; split the work into several queries"
        )


def _nodes(value: Any) -> Iterator[tuple[int, Any]]:
    """``(depth, node)`` for ``value`` and everything inside it; ``value`` is at depth 1."""
    pending: list[tuple[int, Any]] = [(1, value)]
    while pending:
        depth, node = pending.pop()
        yield depth, node
        if depth > MAX_DEPTH + 3:
            continue  # deep enough to be refused; do not walk a million levels
        if isinstance(node, Mapping):
            pending.extend((depth + 1, v) for v in node.values())
        elif isinstance(node, list):
            pending.extend((depth + 1, v) for v in node)
