"""Size and range limits of ``db_query`` arguments, checked before anything is converted or sent.

Numbers the drivers cannot encode (above 2^63) used to surface as a traceback, and
documents nested 200 deep were stored though MongoDB allows 100; both are refused here
with a message that names the limit. The walks are iterative, so an argument nested
thousands deep is refused rather than overflowing the stack.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from storage.sandbox_rules import SandboxError

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
