"""Shared by the pure timing tests: Berlin, its DST days, and fixed datetimes."""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, timedelta

from tests.fakes.clock import BERLIN

SPRING = date(2026, 3, 29)  # Europe/Berlin: 02:00 CET → 03:00 CEST
AUTUMN = date(2026, 10, 25)  # Europe/Berlin: 03:00 CEST → 02:00 CET
SUNDAY = date(2026, 3, 1)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def berlin(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=BERLIN)


def walls(slots: list[datetime]) -> list[str]:
    return [slot.strftime("%H:%M") for slot in slots]


def steps(slots: list[datetime]) -> set[timedelta]:
    instants = [slot.astimezone(UTC) for slot in slots]
    return {b - a for a, b in itertools.pairwise(instants)}
