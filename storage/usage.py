"""Model tokens per day in ``usage``: one document per owner-local day and kind.

Each exchange (a chat, a cron run, a pulse) adds its tokens with one ``$inc`` upsert to
``<day>:<kind>``, so the dashboard's Spend page reads at most 3 × 30 small documents
for a month. An ``$inc`` is not safe to repeat, so it is sent once and not retried: a
dropped connection loses that exchange's count, never the exchange.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any, Literal

from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c

Doc = dict[str, Any]
UsageKind = Literal["chat", "cron", "pulse"]
KINDS: tuple[UsageKind, ...] = ("chat", "cron", "pulse")


@dataclass(frozen=True)
class DayUsage:
    day: date
    kind: UsageKind
    input: int
    output: int
    exchanges: int


class UsageLog:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._coll = db[c.USAGE]

    async def add(self, day: date, kind: UsageKind, input_tokens: int, output_tokens: int) -> None:
        """Count one exchange's tokens on ``day`` (the owner's local date)."""
        text = day.isoformat()
        await self._coll.update_one(
            {"_id": f"{text}:{kind}"},
            {
                "$inc": {"input": int(input_tokens), "output": int(output_tokens), "exchanges": 1},
                "$setOnInsert": {"day": text, "kind": kind},
            },
            upsert=True,
        )

    async def since(self, first: date) -> list[DayUsage]:
        """Every day-and-kind count from ``first`` on (by ``_id``, which starts with the
        day, so the primary index serves it)."""
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
