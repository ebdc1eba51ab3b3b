"""The one fake clock for tests: time moves only when a test says so."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

BERLIN = ZoneInfo("Europe/Berlin")
"""The owner's zone in most tests: it has summer time, so DST edges are real."""


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


class FakeTimers:
    """Monotonic seconds and a ``sleep`` for code that takes them (``clock=timers,
    sleep=timers.sleep``): time moves only on ``advance``, which ends every sleep that
    has come due, earliest first. ``due`` tells when the pending sleeps end, so a test
    sees what the code waits for without letting any time pass.
    """

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self._sleeps: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)  # as asyncio.sleep(0): let others run, no time passes
            return
        ends = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleeps, (self.now + seconds, next(self._order), ends))
        await ends

    @property
    def due(self) -> list[float]:
        """When each pending sleep ends, earliest first (a cancelled one is not pending)."""
        return sorted(at for at, _, ends in self._sleeps if not ends.done())

    def advance(self, seconds: float) -> float:
        """Move time on and end the sleeps now due; their tasks run at the next await."""
        self.now += seconds
        while self._sleeps and self._sleeps[0][0] <= self.now:
            _, _, ends = heapq.heappop(self._sleeps)
            if not ends.done():
                ends.set_result(None)
        return self.now
