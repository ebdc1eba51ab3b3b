"""Wrong tokens at ``POST /login`` slow guessing down: after ``LOGIN_FAILURES`` of them
within ``LOGIN_WINDOW``, every login attempt is answered 429 (with ``Retry-After``)
until the oldest of them leaves the window.

Counted for the whole dashboard, not per address: behind a reverse proxy every
client has the proxy's address, and the owner waits at most ``LOGIN_WINDOW`` while
someone guesses. A session already logged in is not affected.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta

LOGIN_FAILURES = 10
LOGIN_WINDOW = timedelta(minutes=1)


@dataclass
class LoginThrottle:
    failures: int = LOGIN_FAILURES
    window: timedelta = LOGIN_WINDOW
    _recent: deque[datetime] = field(default_factory=deque)

    def _expire(self, now: datetime) -> None:
        while self._recent and now - self._recent[0] >= self.window:
            self._recent.popleft()

    def retry_after(self, now: datetime) -> int | None:
        """Seconds until an attempt is taken again; None when it is taken now."""
        self._expire(now)
        if len(self._recent) < self.failures:
            return None
        wait = (self._recent[0] + self.window - now).total_seconds()
        return max(1, math.ceil(wait))

    def failed(self, now: datetime) -> None:
        self._expire(now)
        self._recent.append(now)
