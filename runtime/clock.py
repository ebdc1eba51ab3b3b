"""The one clock: what time it is, aware and in UTC.

Code that needs the time takes a ``Clock`` (a function returning an aware datetime) so
a test can fix it; ``utcnow`` is the system's. Monotonic time for timeouts and pacing
stays ``time.monotonic``: this is the wall clock, for what is stored and shown."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    """The system clock, aware and in UTC."""
    return datetime.now(UTC)
