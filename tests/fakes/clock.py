"""The one fake clock for tests: time moves only when a test says so."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"a clock needs an aware datetime, not {moment!r}")
    return moment.astimezone(UTC)


class FakeClock:
    """Called like ``datetime.now(UTC)``: returns the current fake time, aware and in UTC.

    ``set()`` jumps to a moment (any timezone, stored as UTC), ``advance()`` moves on.
    """

    def __init__(self, start: datetime) -> None:
        self._now = _utc(start)

    def __call__(self) -> datetime:
        return self._now

    def __repr__(self) -> str:
        return f"FakeClock({self._now.isoformat()})"

    @property
    def now(self) -> datetime:
        return self._now

    def set(self, moment: datetime) -> datetime:
        self._now = _utc(moment)
        return self._now

    def advance(self, delta: timedelta | None = None, /, **parts: float) -> datetime:
        """``advance(minutes=5)`` or ``advance(timedelta(minutes=5))``."""
        self._now += (delta or timedelta()) + timedelta(**parts)
        return self._now


class FakeMonotonic:
    """Called like ``time.monotonic_ns``: integer nanoseconds that move only on ``advance``.

    Integers, so a test compares durations exactly whatever the machine's uptime.
    """

    def __init__(self, start_ns: int = 1_000_000_000_000) -> None:
        self.ns = start_ns

    def __call__(self) -> int:
        return self.ns

    def advance(self, *, seconds: float = 0, ms: int = 0) -> int:
        self.ns += round(seconds * 1_000_000_000) + ms * 1_000_000
        return self.ns
