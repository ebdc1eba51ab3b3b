"""Inbox rows received within a window, read through the (status, received_at) index.

The inbox keeps every message ever received. A question about recent ones ("how many
from this contact in the last minute", "what is new since the last pulse", "the last
20 from my contacts") must read only those: SecantusDB answers a range on
``received_at`` from the index only when the filter names nothing but the index's
fields with an equality on ``status`` (``$in``, or any other field, and it scans the
whole collection). So each status is asked on its own and anything else is checked
here, in Python.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection

Doc = dict[str, Any]
STATUSES = ("pending", "processing", "done", "failed")
"""Every status an inbox row can have (``channels.delivery.pipeline`` writes them)."""
SPANS = (
    timedelta(hours=1),
    timedelta(days=1),
    timedelta(days=7),
    timedelta(days=30),
    timedelta(days=365),
)
"""How far back ``newest_received`` reads, window after window, before reading the rest."""


async def received_since(
    inbox: AsyncCollection[Doc],
    since: datetime | None,
    *,
    until: datetime | None = None,
    statuses: Iterable[str] = STATUSES,
    projection: Mapping[str, Any] | None = None,
) -> AsyncIterator[Doc]:
    """The rows received after ``since`` (ever, if None) and up to ``until`` (now, if
    None) with one of ``statuses``, status by status."""
    window: Doc = {}
    if since is not None:
        window["$gt"] = since
    if until is not None:
        window["$lte"] = until
    for status in statuses:
        query: Doc = {"status": status, **({"received_at": window} if window else {})}
        cursor = inbox.find(query, projection=projection)
        async with cursor:
            async for doc in cursor:
                yield doc


async def newest_received(
    inbox: AsyncCollection[Doc], keep: Callable[[Doc], bool], limit: int, now: datetime
) -> list[Doc]:
    """The ``limit`` newest rows ``keep`` accepts, newest first: read a window at a time
    back from ``now`` (``SPANS``), so a question about recent messages reads recent rows
    only. Exact: once ``limit`` rows are found back to a window's start, nothing older
    can be among the newest."""
    found: list[Doc] = []
    until: datetime | None = None  # the first window is open-ended: rows after ``now`` too
    for since in [now - span for span in SPANS] + [None]:
        found += [doc async for doc in received_since(inbox, since, until=until) if keep(doc)]
        if len(found) >= limit:
            break
        until = since
    found.sort(key=lambda doc: doc["received_at"], reverse=True)
    return found[:limit]
