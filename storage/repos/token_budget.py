"""The daily token budget's ledger: one document every process on the database shares.

``usage`` document ``_id: "budget"``: the budget day now open (``day``, its label;
``ends``, when it closes), the tokens counted as used (``used``), ``held`` (``used`` plus
every process's block), and per process (a random id per start) what its block holds
(``procs.<id>.n``: its calls in flight, what they used and it has not counted yet, and
its free headroom) and when that stops counting (``procs.<id>.until``).

A block grows by one conditional ``$inc`` (``reserve``): while ``held`` stays within the
limit, or, for the day's last call, while it is below it less the process's free part,
so however many calls and processes ask at once, only that last call may go past the cap
(by at most its own reservation). Counting what calls used and giving free headroom back
is one ``$inc`` (``settle``). The document stays a few hundred bytes whatever is in
flight (no list of calls), so each command costs what a counter does.

A process killed with a block (``kill -9`` during a call) leaves its ``n`` held: once
its ``until`` is past, ``expire`` takes it out (when a block may not grow, so only when
it matters). ``until`` is set by each growth (and renewal) of the block, which lets calls
through only in the first part of that time, so a live process's is never past while its
calls are within their time; a call that outlived it is counted as used without a
reservation (``count``), and so is what its process settled after.

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
        self,
        day: date,
        proc: str,
        more: int,
        limit: int,
        until: datetime,
        *,
        whole: bool = True,
        free: int = 0,
        holds: int = 0,
    ) -> Ledger | None:
        """Hold ``more`` tokens more for ``proc`` on ``day`` (its block, which holds
        ``holds`` now) and keep its hold until at least ``until``. ``whole``: only while
        everything held stays within ``limit`` (0 more: a renewal, always); otherwise
        while what is held, less the ``free`` part of ``proc``'s, is below it (the day's
        last call, which alone may go past). None when refused (spent, held by calls in
        flight, ``proc``'s hold expired, or the day is over: read to tell which)."""
        query: Doc = {"_id": LEDGER_ID, "day": day.isoformat()}
        if holds:
            query[f"procs.{proc}.n"] = {"$gte": holds}
        if not whole:
            query["held"] = {"$lt": limit + free}
        elif more:
            query["held"] = {"$lte": limit - more}
        doc = await self._coll.find_one_and_update(
            query,
            {
                "$inc": {"held": more, f"procs.{proc}.n": more},
                "$max": {f"procs.{proc}.until": until},
            },
            projection=_COUNTS,
            return_document=ReturnDocument.AFTER,
        )
        return Ledger.of(doc) if doc else None

    async def settle(
        self, day: date, proc: str, spent: int, loose: int = 0, free: int = 0
    ) -> Ledger | None:
        """Count what ``proc``'s calls used on ``day`` (``spent`` of what it holds,
        ``loose`` without a hold) and give ``free`` of its hold back, in one command;
        None when refused: the day is over, or ``proc`` holds less than that (its hold
        expired: ``count`` it instead)."""
        query: Doc = {"_id": LEDGER_ID, "day": day.isoformat()}
        inc: Doc = {"used": spent + loose, "held": loose - free}
        if spent or free:
            query[f"procs.{proc}.n"] = {"$gte": spent + free}
            inc[f"procs.{proc}.n"] = -(spent + free)
        doc = await self._coll.find_one_and_update(
            query, {"$inc": inc}, projection=_COUNTS, return_document=ReturnDocument.AFTER
        )
        return Ledger.of(doc) if doc else None

    async def count(self, day: date, used: int) -> Ledger | None:
        """Count ``used`` tokens on ``day`` that no hold covers (a call made without a
        reservation, or whose hold expired); None when that day is over (the call is
        counted in the day's usage counts only)."""
        doc = await self._coll.find_one_and_update(
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
