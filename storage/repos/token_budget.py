"""The daily token budget's ledger: one document every process on the database shares.

``usage`` document ``_id: "budget"``: the budget day now open (``day``, the label; ``ends``,
when it closes), the tokens its settled calls used (``used``), ``held`` (``used`` plus
every open reservation) and the open reservations (``holds``: ``{id, n, until}``).

A reservation is one conditional update: ``held`` grows by the call's bound only while
it is below the limit, so however many calls and processes ask at once, the last one let
through is the only one that may go past the cap (by at most its own reservation).
Settling takes the hold out and counts what the call really used, in one update. A hold
whose process died (``kill -9`` between the two) stops counting at its ``until``:
``expire`` takes it out when a reservation is refused, so a crash never keeps the cap
closed for longer than a model call may take.

What the day is and when it closes, and what the numbers mean: ``agent.llm.budget``.
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


@dataclass(frozen=True)
class Ledger:
    """The budget day as stored."""

    day: date
    ends: datetime
    used: int
    """Tokens the day's settled calls used."""
    held: int
    """``used`` and every open reservation."""
    holds: tuple[tuple[str, int, datetime], ...] = ()
    """Open reservations: id, tokens, when they stop counting."""

    @classmethod
    def of(cls, doc: Doc) -> Ledger:
        holds = tuple((str(h["id"]), int(h["n"]), _utc(h["until"])) for h in doc.get("holds") or ())
        return cls(
            day=date.fromisoformat(str(doc["day"])),
            ends=_utc(doc["ends"]),
            used=int(doc.get("used") or 0),
            held=int(doc.get("held") or 0),
            holds=holds,
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
                await self._coll.insert_one({"_id": LEDGER_ID, **fields, "holds": []})
            except DuplicateKeyError:
                return None
            return Ledger(day, ends, used, used)
        doc = await self._coll.find_one_and_update(
            {"_id": LEDGER_ID, "day": after.day.isoformat()},
            {"$set": {**fields, "holds": []}},
            return_document=ReturnDocument.AFTER,
        )
        return Ledger.of(doc) if doc else None

    async def reserve(
        self, day: date, hold: str, tokens: int, limit: int, until: datetime
    ) -> Ledger | None:
        """Hold ``tokens`` on ``day`` while ``held`` is below ``limit``; None when refused
        (spent, held by calls in flight, or the day is over: read to tell which)."""
        doc = await self._coll.find_one_and_update(
            {"_id": LEDGER_ID, "day": day.isoformat(), "held": {"$lt": limit}},
            {
                "$inc": {"held": tokens},
                "$push": {"holds": {"id": hold, "n": tokens, "until": until}},
            },
            return_document=ReturnDocument.AFTER,
        )
        return Ledger.of(doc) if doc else None

    async def settle(self, day: date, hold: str | None, reserved: int, used: int) -> Ledger | None:
        """Count ``used`` tokens on ``day`` in place of the hold (None: nothing was held,
        or it expired); None when that day is over (the call is counted in the day's
        usage counts only)."""
        if hold is not None:
            doc = await self._coll.find_one_and_update(
                {"_id": LEDGER_ID, "day": day.isoformat(), "holds.id": hold},
                {"$inc": {"used": used, "held": used - reserved}, "$pull": {"holds": {"id": hold}}},
                return_document=ReturnDocument.AFTER,
            )
            if doc:
                return Ledger.of(doc)
        doc = await self._coll.find_one_and_update(  # expired meanwhile: its n is gone
            {"_id": LEDGER_ID, "day": day.isoformat()},
            {"$inc": {"used": used, "held": used}},
            return_document=ReturnDocument.AFTER,
        )
        return Ledger.of(doc) if doc else None

    async def expire(self, ledger: Ledger, now: datetime) -> bool:
        """Take out the holds of ``ledger`` that stopped counting (their process died
        before settling); whether any was."""
        freed = False
        for hold, tokens, until in ledger.holds:
            if until > now:
                continue
            result = await self._coll.update_one(
                {"_id": LEDGER_ID, "day": ledger.day.isoformat(), "holds.id": hold},
                {"$inc": {"held": -tokens}, "$pull": {"holds": {"id": hold}}},
            )
            freed = freed or result.modified_count == 1
        return freed


def _utc(moment: datetime) -> datetime:
    """A stored time, aware (a client without ``tz_aware`` reads it naive, in UTC)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
