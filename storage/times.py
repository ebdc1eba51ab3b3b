"""Datetimes read back from MongoDB: BSON dates come back naive, and they are UTC."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def utcnow() -> datetime:
    """The system clock, aware and in UTC."""
    return datetime.now(UTC)


def aware(value: Any) -> datetime | None:
    """A stored date as an aware UTC datetime; anything that is not a date is None."""
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)
