"""Each monitor's check history, kept compact: the ``monitor_checks`` collection.

A check is not stored as a row of its own (50 monitors checked every 30 s would be
4.3 million rows a month). It is counted into two buckets, each a document under a
key that names it, by one upsert each:

* an **hour** (``<monitor id>:h:<YYYYMMDDHH>``, UTC): checks, good checks, and the
  response time of each check in that hour (None for a failure), at most
  ``PER_HOUR``; kept two days (``expires_at``, a TTL index): the last 24 hours'
  uptime and the response-time sparkline;
* a **day** (``<monitor id>:d:<YYYYMMDD>``, UTC): checks and good checks; kept 31
  days: the 30 days' uptime.

So a monitor holds at most 48 hour and 31 day documents, whatever its interval, and
the monitors page reads about 3,900 small documents for 50 monitors. A heartbeat's
"checks" are its pings (a ``/fail`` ping and a missed deadline count as failures);
the periods in which no ping came at all count as failures too (``uptime``).

Counting is not retried (``$inc``: a retry after a lost answer could count twice);
a count lost with the database away is one check less in the figures, never a
wrong state: the state lives in ``monitors``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from pymongo import UpdateOne
from pymongo.asynchronous.database import AsyncDatabase

from storage.records import Doc

log = logging.getLogger(__name__)
COLLECTION = "monitor_checks"
PER_HOUR = 120
"""Response times kept per hour bucket: one per check at the 30 s minimum interval."""
HOUR_KEPT = timedelta(days=2)
DAY_KEPT = timedelta(days=31)
SPARK_POINTS = 60
"""Response times a sparkline shows: the latest checks'."""


@dataclass(frozen=True)
class Counts:
    checks: int = 0
    ups: int = 0


@dataclass(frozen=True)
class History:
    """One monitor's figures: the last 24 hours, the last 30 days (UTC days, today's
    part included), and the latest response times in milliseconds (None: failed)."""

    day: Counts = field(default_factory=Counts)
    month: Counts = field(default_factory=Counts)
    recent: tuple[int | None, ...] = ()


def hour_of(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def day_of(at: datetime) -> datetime:
    return hour_of(at).replace(hour=0)


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


class CheckHistory:
    """Counts each check into its hour and its day (module docstring), and reads the
    figures back for the monitors page."""

    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._coll = db[COLLECTION]

    async def record(self, monitor_id: str, at: datetime, ok: bool, ms: int | None) -> None:
        """One check of ``monitor_id`` at ``at``; ``ms``: how long it took (None for a
        ping). Logged, not raised, when the database is away: a check goes on."""
        hour, day = hour_of(at), day_of(at)
        counted = {"checks": 1, "ups": int(ok)}
        writes = [
            UpdateOne(
                {"_id": f"{monitor_id}:h:{hour:%Y%m%d%H}"},
                {
                    "$inc": counted,
                    "$push": {"ms": {"$each": [ms if ok else None], "$slice": -PER_HOUR}},
                    "$setOnInsert": {
                        "monitor_id": monitor_id, "span": "hour", "start": hour,
                        "expires_at": hour + HOUR_KEPT,
                    },
                },
                upsert=True,
            ),
            UpdateOne(
                {"_id": f"{monitor_id}:d:{day:%Y%m%d}"},
                {
                    "$inc": counted,
                    "$setOnInsert": {
                        "monitor_id": monitor_id, "span": "day", "start": day,
                        "expires_at": day + DAY_KEPT,
                    },
                },
                upsert=True,
            ),
        ]  # fmt: skip
        try:
            await self._coll.bulk_write(writes, ordered=False)
        except Exception:
            log.warning("monitor %s: its check was not counted", monitor_id, exc_info=True)

    async def forget(self, monitor_id: str) -> None:
        """A deleted monitor's history goes with it."""
        await self._coll.delete_many({"monitor_id": monitor_id})

    async def read(self, monitor_ids: Iterable[str], now: datetime) -> dict[str, History]:
        """Every monitor's figures (one entry per id, empty without checks)."""
        ids = list(monitor_ids)
        hours = self._coll.find(
            {"span": "hour", "start": {"$gt": hour_of(now) - timedelta(hours=24)}},
            {"monitor_id": 1, "start": 1, "checks": 1, "ups": 1, "ms": 1},
        ).sort("start", 1)
        days = self._coll.find(
            {"span": "day", "start": {"$gt": day_of(now) - timedelta(days=30)}},
            {"monitor_id": 1, "checks": 1, "ups": 1},
        )
        by_hour: dict[str, list[Doc]] = {i: [] for i in ids}
        async for doc in hours:
            by_hour.get(str(doc.get("monitor_id")), []).append(doc)
        by_day: dict[str, list[Doc]] = {i: [] for i in ids}
        async for doc in days:
            by_day.get(str(doc.get("monitor_id")), []).append(doc)
        return {i: _history(by_hour[i], by_day[i]) for i in ids}


def _counts(docs: Sequence[Doc]) -> Counts:
    def total(name: str) -> int:
        return sum(v for d in docs if isinstance(v := d.get(name), int))

    return Counts(total("checks"), total("ups"))


def _history(hours: Sequence[Doc], days: Sequence[Doc]) -> History:
    times: list[int | None] = []
    for doc in hours:
        got = doc.get("ms")
        if isinstance(got, list):
            times.extend(v if isinstance(v, int) else None for v in got)
    return History(_counts(hours), _counts(days), tuple(times[-SPARK_POINTS:]))
