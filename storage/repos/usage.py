"""Model tokens per day in ``usage``.

Counts: one document per owner-local day, kind and model. Each model call of an
exchange (a chat, a cron run, a pulse) adds its tokens in memory; the counts are written
together as ``$inc`` upserts to ``<day>:<kind>:<model>`` at most every
``FLUSH_SECONDS`` (one bulk write for any number of exchanges, not one more command per
message on the hot path), before the Spend page reads, and when the app stops. The Spend
page reads at most 3 × 30 small documents for a month. An ``$inc`` is not safe to
repeat, so a flush is sent once and not retried: a crash or a dropped connection loses
at most those few seconds of counts, never an exchange.

Counts with no model named (and those written before models were recorded) stay in
``<day>:<kind>`` and read as model ``""`` (priced as an unknown model). Other
``<day>:...`` documents without a known ``kind`` (the budget's notices, ``agent.spend.budget``) are
not counts and are skipped.

The daily cap on them and what they cost: ``agent.spend.budget``.
"""

from __future__ import annotations

import asyncio
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
    model: str = ""
    """The model that spent them; ``""`` for counts kept before models were recorded."""
    cached_input: int = 0
    """Of ``input``, what the provider read from its prompt cache (billed for less)."""

    @property
    def total(self) -> int:
        return self.input + self.output


class UsageLog:
    def __init__(self, db: AsyncDatabase[Doc], flush_seconds: float = FLUSH_SECONDS) -> None:
        self._coll = db[c.USAGE]
        self._flush_seconds = flush_seconds
        self._pending: dict[tuple[str, UsageKind, str], Counter[str]] = {}
        self._timer: asyncio.TimerHandle | None = None
        """Armed by the first count after a flush; its flush runs in ``_flushing``."""
        self._flushing: asyncio.Task[None] | None = None

    def add(
        self,
        day: date,
        kind: UsageKind,
        input_tokens: int,
        output_tokens: int,
        *,
        model: str = "",
        exchanges: int = 1,
        cached_input_tokens: int = 0,
    ) -> None:
        """Count tokens ``model`` spent on ``day`` (the owner's local date); written within
        ``flush_seconds`` by a timer (at once when 0), so the exchange that spent them
        waits for no write. ``exchanges``: 1 for an exchange's first model
        call, 0 for the calls after it. ``cached_input_tokens``: of the input, read from
        the cache."""
        counts = self._pending.setdefault((day.isoformat(), kind, model), Counter())
        counts.update(input=int(input_tokens), output=int(output_tokens), exchanges=exchanges)
        if cached_input_tokens:
            counts.update(cached_input=int(cached_input_tokens))
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(max(self._flush_seconds, 0.0), self._due)

    def _due(self) -> None:
        self._timer = None
        self._flushing = asyncio.get_running_loop().create_task(self._later())

    async def _later(self) -> None:
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
                    {"_id": f"{day}:{kind}:{model}" if model else f"{day}:{kind}"},
                    {
                        "$inc": dict(counts),
                        "$setOnInsert": {"day": day, "kind": kind, "model": model},
                    },
                    upsert=True,
                )
                for (day, kind, model), counts in pending.items()
            ],
            ordered=False,
        )

    async def close(self) -> None:
        """Stop the timer and write what is left (the app stopping)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flushing is not None and not self._flushing.done():
            await asyncio.wait([self._flushing])  # its counts are no longer pending
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
                    model=str(doc.get("model") or ""),
                    cached_input=int(doc.get("cached_input") or 0),
                )
            )
        return found
