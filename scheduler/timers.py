"""The engine's timers: one APScheduler ``DateTrigger`` per key (``cron:<id>``, ``pulse``,
``retry``) plus the periodic resync, and the moment each key is armed for.

A timer firing only calls ``wake`` with its key; what is due is read from the database.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

Clock = Callable[[], datetime]
RESYNC_TIMER = "resync"
RETRY_TIMER = "retry"


class Timers:
    def __init__(self, clock: Clock, wake: Callable[[str], Awaitable[None]]) -> None:
        self.clock = clock
        self._wake = wake
        self._scheduler: AsyncIOScheduler | None = None
        self.armed: dict[str, datetime] = {}
        """Timers this process holds, by key; kept even with APScheduler off (``timer=False``)."""

    def start(
        self, resync: Callable[[], Awaitable[None]], seconds: float, logger: logging.Logger
    ) -> None:
        """Start APScheduler, with ``resync`` every ``seconds``."""
        self._scheduler = AsyncIOScheduler(timezone=UTC, logger=logger)
        self._scheduler.start()
        self._scheduler.add_job(
            resync,
            IntervalTrigger(seconds=seconds),
            id=RESYNC_TIMER,
            coalesce=True,
            max_instances=1,
            misfire_grace_time=None,
        )

    def stop(self) -> None:
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
            self._scheduler = None
        self.armed.clear()

    @property
    def on(self) -> bool:
        return self._scheduler is not None

    def arm_retry(self, at: datetime) -> None:
        """Wake for retries at ``at``, unless already woken earlier."""
        current = self.armed.get(RETRY_TIMER)
        if current is None or at < current:
            self.armed.pop(RETRY_TIMER, None)
            self.arm(RETRY_TIMER, at)

    def arm(self, key: str, at: datetime | None) -> None:
        if at is None:
            self.disarm(key)
            return
        if self.armed.get(key) == at:
            return
        self.armed[key] = at
        if self._scheduler is None:
            return
        # Wait as long as the injectable clock says: the same instant in production.
        delay = max(timedelta(0), at - self.clock())
        self._scheduler.add_job(
            self._wake,
            DateTrigger(run_date=datetime.now(UTC) + delay),
            args=[key],
            id=key,
            replace_existing=True,
            misfire_grace_time=None,
            coalesce=True,
        )

    def disarm(self, key: str) -> None:
        self.armed.pop(key, None)
        if self._scheduler is not None:
            with contextlib.suppress(Exception):
                self._scheduler.remove_job(key)
