"""BSON values as the project and the model see them.

Dates: BSON dates come back from MongoDB naive, and they are UTC; ``aware`` reads one
back as an aware UTC datetime, as the rest of the project uses them (``utcnow``).

Extended JSON at the ``db_query`` boundary: the model only speaks JSON, so ObjectIds
and dates travel as relaxed Extended JSON (``{"$oid": ...}``, ``{"$date": ...}``).
Values coming in are turned into BSON types before they reach MongoDB, and documents
going out are turned back, so that an ``_id`` the model has read can be pasted straight
into its next filter.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from bson import json_util
from bson.json_util import RELAXED_JSON_OPTIONS, JSONOptions

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
JSON_OPTIONS: JSONOptions = RELAXED_JSON_OPTIONS.with_options(tz_aware=True, tzinfo=UTC)
"""Relaxed mode, dates as timezone-aware UTC like the rest of the project."""

EJSON_KEYS: frozenset[str] = frozenset(
    {
        "$oid",
        "$date",
        "$numberLong",
        "$numberInt",
        "$numberDouble",
        "$numberDecimal",
        "$binary",
        "$uuid",
        "$timestamp",
        "$regularExpression",
        "$minKey",
        "$maxKey",
    }
)
"""Wrappers converted on input. ``$regex`` is left alone because it is also the query
operator, and ``$code``/``$symbol``/``$dbPointer`` because the model has no use for them."""


def aware(value: Any) -> datetime | None:
    """A stored date as an aware UTC datetime; anything that is not a date is None."""
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def from_ejson(value: Any) -> Any:
    """Return ``value`` with every Extended JSON wrapper replaced by its BSON type.

    Raises ``ValueError`` with a readable message when a wrapper is malformed.
    """
    if isinstance(value, list):
        return [from_ejson(v) for v in value]
    if not isinstance(value, Mapping):
        return value
    converted = {k: from_ejson(v) for k, v in value.items()}
    if "$binary" in converted and set(converted) <= {"$binary", "$type"}:
        return _parse_wrapper("$binary", converted)
    if len(converted) == 1:
        key = next(iter(converted))
        if key in EJSON_KEYS:
            return _parse_wrapper(key, converted)
    return converted


def _parse_wrapper(key: str, doc: dict[str, Any]) -> Any:
    if key == "$date" and isinstance(doc[key], str):
        return _parse_date(doc[key])
    try:
        return json_util.object_hook(doc, JSON_OPTIONS)
    except Exception as exc:  # bson raises TypeError, ValueError, InvalidId, ...
        raise ValueError(f"invalid Extended JSON {json.dumps(doc, default=str)}: {exc}") from exc


def _parse_date(text: str) -> datetime:
    """ISO-8601 as json_util reads it, plus date-only and minute precision forms."""
    try:
        parsed = json_util.object_hook({"$date": text}, JSON_OPTIONS)
    except (ValueError, TypeError, IndexError):
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(
                f'invalid {{"$date": {json.dumps(text)}}}: '
                'use ISO-8601 such as "2026-01-31T09:00:00Z"'
            ) from None
    if not isinstance(parsed, datetime):  # pragma: no cover - DatetimeMS is not configured
        raise ValueError(f"invalid date {text!r}")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def from_ejson_document(value: Mapping[str, Any]) -> dict[str, Any]:
    """A document to store: converted, and refused if a field name still starts with ``$``.

    Such a name is either an operator used by mistake or a misspelt wrapper, and
    MongoDB-compatible servers differ on whether they accept it.
    """
    doc: dict[str, Any] = from_ejson(value)
    for key, _ in walk(doc):
        if key.startswith("$") or "\0" in key:
            raise ValueError(
                f"field name {key!r} is not allowed (no leading '$'); values may use "
                'Extended JSON such as {"$oid": ...} or {"$date": ...}'
            )
    return doc


def walk(node: Any) -> Iterator[tuple[str, Any]]:
    """Every ``(key, value)`` pair of nested documents and lists, outermost first."""
    if isinstance(node, list):
        for item in node:
            yield from walk(item)
    elif isinstance(node, Mapping):
        for key, value in node.items():
            yield key, value
            yield from walk(value)


def to_ejson(value: Any) -> Any:
    """Return ``value`` (a document read from MongoDB) as plain relaxed Extended JSON.

    A date keeps the offset it was decoded with (``db_query`` reads in the owner's
    timezone): ``{"$date": "2026-11-26T19:30:00+01:00"}``, RFC 3339 as relaxed Extended
    JSON allows, so the model sees local time and can paste the value back as it is.
    """
    return json.loads(json_util.dumps(_dates(value), json_options=JSON_OPTIONS))


def _dates(value: Any) -> Any:
    if isinstance(value, datetime):
        return date_wrapper(value)
    if isinstance(value, Mapping):
        return {k: _dates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_dates(v) for v in value]
    return value


def date_wrapper(moment: datetime) -> Any:
    """``{"$date": ISO}`` with ``moment``'s own offset (``Z`` for UTC; naive is UTC);
    before 1970 it is left to json_util (``$numberLong``, as relaxed mode says)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    if moment < EPOCH:
        return moment
    spec = "milliseconds" if moment.microsecond // 1000 else "seconds"
    text = moment.replace(microsecond=moment.microsecond // 1000 * 1000).isoformat(timespec=spec)
    return {"$date": text[:-6] + "Z" if text.endswith("+00:00") else text}


INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
"""The integers BSON can store (int64); Python's and JSON's integers have no bound."""


_Crumbs = tuple[Any, "_Crumbs"] | None
"""A path of keys, innermost first, as nested pairs (shared by siblings)."""


def oversized_int(value: Any, path: str = "") -> str | None:
    """The dotted path of the first integer in ``value`` that BSON cannot store (outside
    int64), ``"arguments"`` when ``value`` itself is one; None when there is none.

    Walks with its own stack: a hostile value may nest deeper than Python's recursion
    limit, and that must come back as the tool's own error, not a RecursionError."""
    # The path rides along as a linked list of keys, joined only for the one found.
    stack: list[tuple[Any, _Crumbs]] = [(value, None)]
    while stack:
        item, crumbs = stack.pop()
        if isinstance(item, int) and not INT64_MIN <= item <= INT64_MAX:
            keys: list[str] = []
            while crumbs is not None:
                keys.append(str(crumbs[0]))
                crumbs = crumbs[1]
            return ".".join([path] * bool(path) + keys[::-1]) or "arguments"
        if isinstance(item, Mapping):
            children: list[tuple[Any, Any]] = list(item.items())
        elif isinstance(item, (list, tuple)):
            children = list(enumerate(item))
        else:
            continue
        # Reversed, so the first child is looked at first and the path found is the first.
        stack.extend((child, (key, crumbs)) for key, child in reversed(children))
    return None


def storable_ints(value: Any) -> Any:
    """``value`` with every integer BSON cannot store written as its decimal text, so a
    document holding it can always be stored; anything else is kept as it is.

    ``value`` itself comes back when it holds no such integer (the usual case); otherwise
    a copy is built without recursion, however deep ``value`` nests (tuples become lists,
    as BSON stores them anyway)."""
    if oversized_int(value) is None:
        return value
    if isinstance(value, int):
        return str(value)
    root: list[Any] = [None]
    # Each entry: (source, the container that receives the copy, its key there).
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        item, into, key = stack.pop()
        if isinstance(item, int) and not INT64_MIN <= item <= INT64_MAX:
            into[key] = str(item)
        elif isinstance(item, Mapping):
            copy: dict[Any, Any] = {}
            into[key] = copy
            for k, v in item.items():
                copy[k] = None
                stack.append((v, copy, k))
        elif isinstance(item, (list, tuple)):
            items: list[Any] = [None] * len(item)
            into[key] = items
            stack.extend((v, items, i) for i, v in enumerate(item))
        else:
            into[key] = item
    return root[0]


def rows_within(docs: Iterable[Any], max_chars: int) -> list[Any]:
    """Leading ``docs`` as Extended JSON rows whose JSON list fits in ``max_chars``.

    Whole rows are dropped from the end, so the answer is always valid JSON.
    """
    used = len("[]")
    rows: list[Any] = []
    for doc in docs:
        row = to_ejson(doc)
        used += len(json.dumps(row, ensure_ascii=False)) + len(", ")
        if used > max_chars:
            break
        rows.append(row)
    return rows
