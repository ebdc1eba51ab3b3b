"""A timezone change set for later (``manage_settings`` ``effective_at``), made at its
moment and told to the owner.

The change waits in the owner's settings (``pending_zone``), so it survives a restart;
the scheduler's one timer wakes ``ZoneMove`` for it like any fire (``Timed``), and the
resync picks up one set by another process. ``OwnerSettings.apply_pending`` makes it
once, whichever process comes first; its listeners move the jobs that follow the
owner, as for a change made at once. Then one short message tells the owner the new
zone, which jobs moved and when each fires next, in the chat the change was set from.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from agent.context import AgentDeps
from agent.owner import OwnerPrefs, OwnerSettings, ZoneChange
from channels.types import OutboundMessage
from scheduler.cron.expression import CronError
from scheduler.cron.job import CronJob
from scheduler.cron.service import CronService
from scheduler.views import short_time

log = logging.getLogger(__name__)
ZONE_TIMER = "zone"
"""The key of the pending change in ``Engine.armed``."""
Tell = Callable[[ZoneChange, str], Awaitable[None]]


class ZoneMove:
    """The engine's ``Timed`` work for the owner's pending timezone change."""

    key = ZONE_TIMER

    def __init__(self, owner: OwnerSettings, jobs: CronService, tell: Tell) -> None:
        self.owner = owner
        self.jobs = jobs
        self.tell = tell

    async def due_at(self) -> datetime | None:
        pending = (await self.owner.fresh()).pending_zone
        return pending.at if pending is not None else None

    async def run(self, now: datetime) -> None:
        before = await self._pending_jobs()
        made = await self.owner.apply_pending(now)
        if made is None:
            return  # not due, dropped meanwhile, or made by another process
        old, new = made
        assert old.pending_zone is not None  # apply_pending made it
        text = moved_text(before, await self._pending_jobs(), old, new, now)
        await self.tell(old.pending_zone, text)

    async def _pending_jobs(self) -> dict[str, CronJob]:
        return {job.id: job for job in await self.jobs.list_jobs() if not job.done}


def _next(job: CronJob, now: datetime, new: OwnerPrefs) -> str:
    try:
        fires = job.next_fires(now, 1) if job.enabled else []
    except CronError:
        fires = []
    return f"next {short_time(fires[0], new.tz, now)}" if fires else "paused"


def moved_text(
    before: dict[str, CronJob],
    after: dict[str, CronJob],
    old: OwnerPrefs,
    new: OwnerPrefs,
    now: datetime,
) -> str:
    """One short message: the new zone, the jobs that moved with the owner (next fire
    on the new clock), those that kept their own zone, and one-time jobs (same moment,
    new local time)."""
    moved: list[str] = []
    kept: list[str] = []
    once: list[str] = []
    for job in after.values():
        was = before.get(job.id)
        if job.once:
            if job.run_at is not None and job.run_at > now:
                once.append(f"{job.name} {short_time(job.run_at, new.tz, now)}")
        elif was is not None and was.timezone == old.timezone != job.timezone:
            moved.append(f"{job.name} ({_next(job, now, new)})")
        else:
            kept.append(f"{job.name} ({job.timezone})")
    text = f"🌍 Your timezone is now {new.timezone} (was {old.timezone}), as planned."
    if moved:
        text += f" Moved with you, same local times: {'; '.join(moved)}."
    if kept:
        text += f" Kept their own zone: {'; '.join(kept)}."
    if once:
        text += f" One-time, same moment, now at: {'; '.join(once)}."
    if not (moved or kept or once):
        text += " No jobs to move."
    return text


async def tell_owner(deps: AgentDeps, pending: ZoneChange, text: str) -> None:
    """Send ``text`` to the chat the change was set from, else the owner's main chat."""
    channel, chat = pending.channel, pending.chat_id
    if channel is None or chat is None or channel not in deps.channels:
        target = deps.reach.chat(primary=deps.primary_channel)
        channel, chat = target.channel, target.chat_id
    key = f"zone-change:{pending.timezone}:{pending.at.isoformat()}"
    await deps.outbox.enqueue(OutboundMessage(channel, chat, text, key))
    log.info("owner told of the timezone change to %s", pending.timezone)
