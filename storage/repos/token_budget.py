"""The daily token budget's ledger: one document every process on the database shares.

``usage`` document ``_id: "budget"``: the budget day now open (``day``, its label;
``ends``, when it closes), the tokens its settled calls used (``used``), ``held``
(``used`` plus every open reservation), and per process (a random id per start) the
tokens its calls in flight hold (``procs.<id>.n``) and when the latest of them stops
counting (``procs.<id>.until``).

A reservation is one conditional ``$inc``: ``held`` grows by the call's bound only while
it is below the limit, so however many calls and processes ask at once, the last one let
through is the only one that may go past the cap (by at most its own reservation).
Settling replaces the reservation with what the call used, in one ``$inc``. The document
stays a few hundred bytes whatever is in flight (no list of calls), so each of the two
commands costs what a counter does.

A process killed between the two (``kill -9`` during a call) leaves its ``n`` held: once
its ``until`` is past, ``expire`` takes it out (when a reservation is refused, so only
when it matters). ``until`` is the latest of its process's reservations, so a live
process's is never past while its calls are within their time; a call that outlived it
settles as a call without a reservation.

What the day is and when it closes, and what the numbers mean: ``agent.spend.budget``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from storage import collections as c

Doc = dict[str, Any]
LEDGER_ID = "budget"
_COUNTS = {"day": 1, "ends": 1, "used": 1, "held": 1}
"""What a reservation or a settlement reads back: not the processes' entries."""


@dataclass(frozen=True)
class Held:
    """What one process's calls in flight hold."""

    proc: str
    tokens: int
    until: datetime


@dataclass(frozen=True)
class Ledger:
    """The budget day as stored."""

    day: date
    ends: datetime
    used: int
    """Tokens the day's settled calls used."""
    held: int
    """``used`` and every open reservation."""
    procs: tuple[Held, ...] = ()
    """Per process, its open reservations (read in full by ``read`` only)."""

    @classmethod
    def of(cls, doc: Doc) -> Ledger:
        procs = tuple(
            Held(proc, int(entry.get("n") or 0), _utc(entry["until"]))
            for proc, entry in (doc.get("procs") or {}).items()
            if isinstance(entry, dict) and entry.get("until") is not None
        )
        return cls(
            day=date.fromisoformat(str(doc["day"])),
            ends=_utc(doc["ends"]),
            used=int(doc.get("used") or 0),
            held=int(doc.get("held") or 0),
            procs=procs,
        )


class TokenLedger:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._coll = db[c.USAGE]

    async def read(self) -> Ledger | None:
        doc = await self._coll.find_one({"_id": LEDGER_ID})
        return Ledger.of(doc) if doc else None

    async def open(
        self, day: date, ends: datetime, used: int, after: Ledger | None
    ) -> Ledger | None:
        """Open ``day`` (until ``ends``, ``used`` already spent) in place of ``after``
        (None: no day was ever opened); None when another process changed the day first
        (read it again)."""
        fields: Doc = {"day": day.isoformat(), "ends": ends, "used": used, "held": used}
        if after is None:
            try:
                await self._coll.insert_one({"_id": LEDGER_ID, **fields, "procs": {}})
            except DuplicateKeyError:
                return None
            return Ledger(day, ends, used, used)
        doc = await self._coll.find_one_and_update(
            {"_id": LEDGER_ID, "day": after.day.isoformat()},
            {"$set": {**fields, "procs": {}}},
            projection=_COUNTS,
            return_document=ReturnDocument.AFTER,
        )
        return Ledger.of(doc) if doc else None

    async def reserve(
        self, day: date, proc: str, tokens: int, limit: int, until: datetime
    ) -> Ledger | None:
        """Hold ``tokens`` for a call of ``proc`` on ``day`` while ``held`` is below
        ``limit``; None when refused (spent, held by calls in flight, or the day is over:
        read to tell which)."""
        doc = await self._coll.find_one_and_update(
            {"_id": LEDGER_ID, "day": day.isoformat(), "held": {"$lt": limit}},
            {
                "$inc": {"held": tokens, f"procs.{proc}.n": tokens},
                "$max": {f"procs.{proc}.until": until},
            },
            projection=_COUNTS,
            return_document=ReturnDocument.AFTER,
        )
        return Ledger.of(doc) if doc else None

    async def settle(self, day: date, proc: str, reserved: int, used: int) -> Ledger | None:
        """Count ``used`` tokens on ``day`` in place of ``reserved`` held by ``proc``
        (0: nothing was held); None when that day is over (the call is counted in the
        day's usage counts only)."""
        if reserved:
            doc = await self._coll.find_one_and_update(
                {"_id": LEDGER_ID, "day": day.isoformat(), f"procs.{proc}.n": {"$gte": reserved}},
                {"$inc": {"used": used, "held": used - reserved, f"procs.{proc}.n": -reserved}},
                projection=_COUNTS,
                return_document=ReturnDocument.AFTER,
            )
            if doc:
                return Ledger.of(doc)
        doc = await self._coll.find_one_and_update(  # expired meanwhile: it holds nothing
            {"_id": LEDGER_ID, "day": day.isoformat()},
            {"$inc": {"used": used, "held": used}},
            projection=_COUNTS,
            return_document=ReturnDocument.AFTER,
        )
        return Ledger.of(doc) if doc else None

    async def expire(self, ledger: Ledger, now: datetime) -> bool:
        """Take out what the processes of ``ledger`` (as ``read``) hold past their
        ``until`` (they died before settling); whether any was."""
        freed = False
        for held in ledger.procs:
            if held.until > now or held.tokens <= 0:
                continue
            entry = f"procs.{held.proc}"
            result = await self._coll.update_one(
                {
                    "_id": LEDGER_ID,
                    "day": ledger.day.isoformat(),
                    f"{entry}.n": held.tokens,
                    f"{entry}.until": held.until,
                },
                {"$inc": {"held": -held.tokens}, "$unset": {entry: ""}},
            )
            freed = freed or result.modified_count == 1
        return freed


def _utc(moment: datetime) -> datetime:
    """A stored time, aware (a client without ``tz_aware`` reads it naive, in UTC)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
