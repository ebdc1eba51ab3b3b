"""A monitor's uptime figures from its counted checks (``storage.repos.monitor_checks``):
a heartbeat's periods in which no ping came at all count as failures too."""

from __future__ import annotations

from datetime import datetime

from storage.repos.monitor_checks import Counts


def uptime(counts: Counts, *, expected: int | None = None) -> float | None:
    """Good checks as a share of all, or None with none yet. ``expected``: how many
    checks there should have been (a heartbeat's periods); those that never came
    count as failures."""
    total = max(counts.checks, expected or 0)
    if total == 0:
        return None
    return min(counts.ups, total) / total


def expected_pings(period_seconds: int, since: datetime, start: datetime, now: datetime) -> int:
    """How many pings a heartbeat that pings every ``period_seconds`` owed between the
    later of ``since`` (its creation or resume) and ``start`` (the window's), and now."""
    begun = max(since, start)
    if period_seconds <= 0 or now <= begun:
        return 0
    return int((now - begun).total_seconds() // period_seconds)
