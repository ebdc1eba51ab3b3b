"""Inbox rows received within a window, read through the (status, received_at) index.

The inbox keeps every message ever received. A question about recent ones ("how many
from this contact in the last minute", "what is new since the last pulse") must read
only those: SecantusDB answers a range on ``received_at`` from the index only when the
filter names nothing but the index's fields with an equality on ``status`` (``$in``, or
any other field, and it scans the whole collection). So each status is asked on its own
and anything else is checked here, in Python.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from datetime import datetime
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection

Doc = dict[str, Any]
STATUSES = ("pending", "processing", "done", "failed")
"""Every status an inbox row can have (``channels.pipeline`` writes them)."""


async def received_since(
    inbox: AsyncCollection[Doc],
    since: datetime,
    *,
    statuses: Iterable[str] = STATUSES,
    projection: Mapping[str, Any] | None = None,
) -> AsyncIterator[Doc]:
    """The rows received after ``since`` with one of ``statuses``, status by status."""
    for status in statuses:
        cursor = inbox.find(
            {"status": status, "received_at": {"$gt": since}}, projection=projection
        )
        async with cursor:
            async for doc in cursor:
                yield doc
