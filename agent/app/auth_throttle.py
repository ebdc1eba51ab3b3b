"""Wrong admin tokens slow guessing down, per client: after ``FAILURES`` of them within
``WINDOW`` from one client, that client's attempts with a token are held (429 with
``Retry-After``) until the oldest of those failures leaves the window.

Per client (``agent.app.client_address``), so someone guessing elsewhere never holds
the owner back. The table is bounded: at most ``MAX_CLIENTS`` clients are remembered,
and when a new one comes the one whose last failure is oldest is forgotten, so a flood
of addresses costs a bounded amount of memory (and can only make the throttle forget).
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta

FAILURES = 10
WINDOW = timedelta(minutes=1)
MAX_CLIENTS = 4096


@dataclass
class AuthThrottle:
    failures: int = FAILURES
    window: timedelta = WINDOW
    max_clients: int = MAX_CLIENTS
    _recent: OrderedDict[str, deque[datetime]] = field(default_factory=OrderedDict)
    """Per client, its last ``failures`` wrong tokens; the least recently failing first."""

    def __len__(self) -> int:
        return len(self._recent)

    def _current(self, client: str, now: datetime) -> deque[datetime] | None:
        recent = self._recent.get(client)
        if recent is None:
            return None
        while recent and now - recent[0] >= self.window:
            recent.popleft()
        if not recent:
            del self._recent[client]
            return None
        return recent

    def retry_after(self, client: str, now: datetime) -> int | None:
        """Seconds until ``client`` may try a token again; None when it may now."""
        recent = self._current(client, now)
        if recent is None or len(recent) < self.failures:
            return None
        wait = (recent[0] + self.window - now).total_seconds()
        return max(1, math.ceil(wait))

    def failed(self, client: str, now: datetime) -> None:
        """Count one wrong token from ``client``."""
        recent = self._current(client, now) or deque(maxlen=self.failures)
        recent.append(now)
        self._recent[client] = recent
        self._recent.move_to_end(client)
        while len(self._recent) > self.max_clients:
            self._recent.popitem(last=False)
