"""Memory's daily upkeep: once a day, in the owner's quiet hours, the saved facts are
consolidated by rules (``storage.consolidate``: duplicates merged, past dates marked),
no model call; the change is logged and can be undone on the dashboard (``/memory``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from agent.app.application import FeatureContext, Parts
from runtime.tasks import stop_task, wait_event
from scheduler.pulse.grid import in_quiet_hours
from storage.consolidate import consolidate_if_due

log = logging.getLogger(__name__)
LOOK_EVERY = 600.0
"""Seconds between looks at the clock: quiet hours are at least this long in practice."""


async def memory_feature(ctx: FeatureContext) -> AsyncIterator[Parts]:
    stop = asyncio.Event()
    task = asyncio.create_task(_upkeep(ctx, stop), name="memory-upkeep")
    yield Parts()
    stop.set()
    await stop_task(task)


async def upkeep_once(ctx: FeatureContext) -> int | None:
    """Consolidate if it is due now; how many facts changed, None when not due."""
    now, owner = ctx.clock(), ctx.owner
    quiet = in_quiet_hours(owner.current.quiet_hours, now, owner.tz)
    changes = await consolidate_if_due(ctx.database.db, now, owner.tz, quiet)
    if changes is None:
        return None
    for change in changes:
        log.info("memory: %s %s", change.fact.id, change.note)
    log.info("memory: consolidated, %d fact(s) changed (undo on /memory)", len(changes))
    return len(changes)


async def _upkeep(ctx: FeatureContext, stop: asyncio.Event) -> None:
    while not await wait_event(stop, LOOK_EVERY):
        try:
            await upkeep_once(ctx)
        except Exception:  # the database is away for a moment: next time
            log.exception("memory: consolidation failed; trying again later")
