"""Each monitor's check history, kept compact: the ``monitor_checks`` collection.

A check is not stored as a row of its own (50 monitors checked every 30 s would be
4.3 million rows a month), nor as a row per hour (SecantusDB reads documents by the
piece, and the page would read thousands). Each monitor has one document, under its
own id, that counts its checks:

* ``hc``/``hu``: checks and good checks per UTC hour (keys ``h<YYYYMMDDHH>``), the
  last 24 hours' uptime;
* ``dc``/``du``: the same per UTC day (keys ``d<YYYYMMDD>``), the 30 days' uptime;
* ``ms``: the response times of the latest ``SPARK_POINTS`` checks (None for a
  failure), for the sparkline.

A check is one upsert (``$inc`` four counters, ``$push`` a time with ``$slice``).
Counters older than the windows are dropped once an hour per monitor (``CheckHistory._prune``),
so a document holds at most about 25 hours, 31 days and its ring (a few KB), and
the whole document expires 31 days after its last check (a TTL index). The page
reads one document per monitor.

A heartbeat's "checks" are its pings (a ``/fail`` ping and a missed deadline count
as failures); the periods in which no ping came at all count as failures too
(``uptime``).

Counting is not retried (``$inc``: a retry after a lost answer could count twice);
a count lost with the database away is one check less in the figures, never a
wrong state: the state lives in ``monitors``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c
from storage.records import Doc

log = logging.getLogger(__name__)
KEPT = timedelta(days=31)
"""A monitor's counts expire this long after its last check (a deleted one's too)."""
SPARK_POINTS = 60
"""Response times a monitor's ring keeps, and its sparkline shows: the latest checks'."""


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


def hour_key(at: datetime) -> str:
    return f"h{hour_of(at):%Y%m%d%H}"


def day_key(at: datetime) -> str:
    return f"d{day_of(at):%Y%m%d}"


class CheckHistory:
    """Counts each check into its monitor's document (module docstring), and reads
    the figures back for the monitors page."""

    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._coll = db[c.MONITOR_CHECKS]
        self._pruned: dict[str, str] = {}
        """Monitor id -> the hour key its old counters were last dropped in."""

    async def record(self, monitor_id: str, at: datetime, ok: bool, ms: int | None) -> None:
        """One check of ``monitor_id`` at ``at``; ``ms``: how long it took (None for a
        ping). Logged, not raised, when the database is away: a check goes on."""
        hour, day = hour_key(at), day_key(at)
        update: Doc = {
            "$inc": {f"hc.{hour}": 1, f"hu.{hour}": int(ok), f"dc.{day}": 1, f"du.{day}": int(ok)},
            "$set": {"expires_at": at + KEPT},
        }
        if ms is not None or not ok:  # a good ping has no time to show
            update["$push"] = {"ms": {"$each": [ms if ok else None], "$slice": -SPARK_POINTS}}
        try:
            await self._coll.update_one({"_id": monitor_id}, update, upsert=True)
            if self._pruned.get(monitor_id) != hour:
                await self._prune(monitor_id, at)
                self._pruned[monitor_id] = hour
        except Exception:
            log.warning("monitor %s: its check was not counted", monitor_id, exc_info=True)

    async def _prune(self, monitor_id: str, at: datetime) -> None:
        """Drop the counters older than the windows (repeatable: ``$unset``)."""
        doc = await self._coll.find_one({"_id": monitor_id}, {"hc": 1, "dc": 1})
        if doc is None:
            return
        first_hour, first_day = hour_key(at - timedelta(hours=24)), day_key(at - KEPT)
        stale = [
            f"{group}.{key}"
            for held, groups, first in ((doc.get("hc"), ("hc", "hu"), first_hour),
                                        (doc.get("dc"), ("dc", "du"), first_day))
            if isinstance(held, Mapping)
            for key in held if str(key) <= first
            for group in groups
        ]  # fmt: skip
        if stale:
            await self._coll.update_one({"_id": monitor_id}, {"$unset": dict.fromkeys(stale, "")})

    async def forget(self, monitor_id: str) -> None:
        """A deleted monitor's history goes with it."""
        self._pruned.pop(monitor_id, None)
        await self._coll.delete_one({"_id": monitor_id})

    async def read(self, monitor_ids: Iterable[str], now: datetime) -> dict[str, History]:
        """Every monitor's figures (one entry per id, empty without checks): the last 24
        hours (this one's part included) and the last 30 days."""
        ids = list(monitor_ids)
        found = {str(d["_id"]): d async for d in self._coll.find({"_id": {"$in": ids}})}
        after_hour, after_day = hour_key(now - timedelta(hours=24)), day_key(now - timedelta(30))
        shown: dict[str, History] = {}
        for monitor_id in ids:
            doc = found.get(monitor_id, {})
            shown[monitor_id] = History(
                _counts(doc, "hc", "hu", after_hour),
                _counts(doc, "dc", "du", after_day),
                _times(doc.get("ms")),
            )
        return shown


def _counts(doc: Doc, checks: str, ups: str, after: str) -> Counts:
    """The sums of the counters ``checks`` and ``ups`` under keys after ``after``."""

    def total(name: str) -> int:
        held = doc.get(name)
        if not isinstance(held, Mapping):
            return 0
        return sum(int(v) for k, v in held.items() if str(k) > after and _number(v))

    return Counts(total(checks), total(ups))


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _times(value: object) -> tuple[int | None, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(int(v) if _number(v) else None for v in value)
