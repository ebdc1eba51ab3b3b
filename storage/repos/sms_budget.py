"""One hourly SMS budget for every SMS, whatever sends it (alerts, ``send_message``,
replies): a sliding hour of send times in one ``settings`` document.

Reserving is one conditional ``$push``: it succeeds only while fewer than
``per_hour`` sends are in the window, so two processes never overspend it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c

BUDGET_DOC = "sms_budget"
WINDOW = timedelta(hours=1)


async def take_sms(db: AsyncDatabase[dict[str, Any]], now: datetime, per_hour: int) -> bool:
    """Reserve one SMS in a sliding hour; False once ``per_hour`` were sent in it."""
    if per_hour <= 0:
        return False
    settings = db[c.SETTINGS]
    pruned = await settings.update_one(
        {"_id": BUDGET_DOC}, {"$pull": {"sent": {"$lte": now - WINDOW}}}
    )
    if pruned.matched_count == 0:
        await settings.update_one({"_id": BUDGET_DOC}, {"$setOnInsert": {"sent": []}}, upsert=True)
    taken = await settings.update_one(
        {"_id": BUDGET_DOC, f"sent.{per_hour - 1}": {"$exists": False}},
        {"$push": {"sent": now}},
    )
    return taken.modified_count == 1


async def frees_at(db: AsyncDatabase[dict[str, Any]]) -> datetime | None:
    """When the oldest send in the window leaves it."""
    doc = await db[c.SETTINGS].find_one({"_id": BUDGET_DOC})
    sent = sorted((doc or {}).get("sent") or [])
    return sent[0] + WINDOW if sent else None
