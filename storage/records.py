"""Reading stored documents into typed records, once, at their store.

Each store turns what MongoDB returns into its record with a ``from_doc`` of its own,
using the field readers here: a field of the wrong type is a ``BadRecord`` naming the
field, not a crash somewhere above. A list read by a store goes through ``each``: a
document that does not parse is logged and skipped, so one damaged record (written by
hand, or by an older version) never stops the scheduler's loop or a page.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

Doc = dict[str, Any]
R = TypeVar("R")
log = logging.getLogger(__name__)


class BadRecord(ValueError):
    """A stored document that cannot be read as its record; the message names why."""


def moment(doc: Mapping[str, Any], name: str) -> datetime | None:
    """A stored date as an aware UTC datetime; absent or null is None."""
    value = doc.get(name)
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise BadRecord(f"{name} is {type(value).__name__}, not a date")
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def text(doc: Mapping[str, Any], name: str, default: str = "") -> str:
    value = doc.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise BadRecord(f"{name} is {type(value).__name__}, not text")
    return value


def maybe_text(doc: Mapping[str, Any], name: str) -> str | None:
    return text(doc, name) if doc.get(name) is not None else None


def whole(doc: Mapping[str, Any], name: str, default: int = 0) -> int:
    value = doc.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise BadRecord(f"{name} is {value!r}, not a whole number")
    return int(value)


def number(doc: Mapping[str, Any], name: str) -> float | None:
    value = doc.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRecord(f"{name} is {value!r}, not a number")
    return float(value)


def texts(doc: Mapping[str, Any], name: str) -> tuple[str, ...]:
    value = doc.get(name)
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise BadRecord(f"{name} is not a list of text")
    return tuple(value)


def mapping(doc: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    value = doc.get(name)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise BadRecord(f"{name} is {type(value).__name__}, not a document")
    return value


def parsed(doc: Doc, read: Callable[[Doc], R], what: str) -> R | None:
    """``read(doc)``, or None (logged) when the stored document does not parse."""
    try:
        return read(doc)
    except (BadRecord, KeyError, TypeError, ValueError) as exc:
        log.warning("%s %r skipped: it does not parse: %s", what, doc.get("_id"), exc)
        return None


def each(docs: Iterable[Doc], read: Callable[[Doc], R], what: str) -> list[R]:
    """The records of ``docs`` that parse; the others are logged and skipped."""
    return [record for doc in docs if (record := parsed(doc, read, what)) is not None]
