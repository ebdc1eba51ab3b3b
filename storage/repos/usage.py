"""Model tokens per day in ``usage``: one document per owner-local day and kind.

Each exchange (a chat, a cron run, a pulse) adds its tokens in memory; the counts are
written together as ``$inc`` upserts to ``<day>:<kind>`` at most every
``FLUSH_SECONDS`` (one bulk write for any number of exchanges, not one more command per
message on the hot path), before the Spend page reads, and when the app stops. The Spend
page reads at most 3 × 30 small documents for a month. An ``$inc`` is not safe to
repeat, so a flush is sent once and not retried: a crash or a dropped connection loses
at most those few seconds of counts, never an exchange.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import date
from typing import Any, Literal

from pymongo import UpdateOne
from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c

Doc = dict[str, Any]
UsageKind = Literal["chat", "cron", "pulse"]
KINDS: tuple[UsageKind, ...] = ("chat", "cron", "pulse")
FLUSH_SECONDS = 2.0
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DayUsage:
    day: date
    kind: UsageKind
    input: int
    output: int
    exchanges: int


class UsageLog:
    def __init__(self, db: AsyncDatabase[Doc], flush_seconds: float = FLUSH_SECONDS) -> None:
        self._coll = db[c.USAGE]
        self._flush_seconds = flush_seconds
        self._pending: dict[tuple[str, UsageKind], Counter[str]] = {}
        self._timer: asyncio.Task[None] | None = None

    async def add(self, day: date, kind: UsageKind, input_tokens: int, output_tokens: int) -> None:
        """Count one exchange's tokens on ``day`` (the owner's local date); written within
        ``flush_seconds``."""
        counts = self._pending.setdefault((day.isoformat(), kind), Counter())
        counts.update(input=int(input_tokens), output=int(output_tokens), exchanges=1)
        if self._flush_seconds <= 0:
            await self.flush()
        elif self._timer is None or self._timer.done():
            self._timer = asyncio.get_running_loop().create_task(self._later())

    async def _later(self) -> None:
        await asyncio.sleep(self._flush_seconds)
        try:
            await self.flush()
        except Exception as exc:  # counts only; the exchanges themselves are stored
            log.warning("token counts for the dashboard were not saved: %s", exc)

    async def flush(self) -> None:
        """Write what was counted since the last flush (one round trip)."""
        pending, self._pending = self._pending, {}
        if not pending:
            return
        await self._coll.bulk_write(
            [
                UpdateOne(
                    {"_id": f"{day}:{kind}"},
                    {"$inc": dict(counts), "$setOnInsert": {"day": day, "kind": kind}},
                    upsert=True,
                )
                for (day, kind), counts in pending.items()
            ],
            ordered=False,
        )

    async def close(self) -> None:
        """Stop the timer and write what is left (the app stopping)."""
        if self._timer is not None and not self._timer.done():
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
        await self.flush()

    async def since(self, first: date) -> list[DayUsage]:
        """Every day-and-kind count from ``first`` on (by ``_id``, which starts with the
        day, so the primary index serves it), this process's unwritten counts included."""
        await self.flush()
        cursor = self._coll.find({"_id": {"$gte": first.isoformat()}})
        found: list[DayUsage] = []
        async for doc in cursor:
            kind = doc.get("kind")
            if kind not in KINDS:
                continue
            found.append(
                DayUsage(
                    day=date.fromisoformat(str(doc["day"])),
                    kind=kind,
                    input=int(doc.get("input") or 0),
                    output=int(doc.get("output") or 0),
                    exchanges=int(doc.get("exchanges") or 0),
                )
            )
        return found
