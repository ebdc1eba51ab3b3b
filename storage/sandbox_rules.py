"""The ``db_query`` sandbox's rules: which names, operators and stages the model may use.

Pure checks over what the model sent, before anything reaches MongoDB: no system
collections or other databases, writes only to model-writable collections, no
server-side JavaScript or administrative stages at any depth.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from storage.collections import PROTECTED, model_may_write
from storage.ejson import walk

Doc = dict[str, Any]

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
