"""A timezone change set for later (``manage_settings`` ``effective_at``), made at its
moment and told to the owner.

The change waits in the owner's settings (``pending_zone``), so it survives a restart;
the scheduler's one timer wakes ``ZoneMove`` for it like any fire (``Timed``), and the
resync picks up one set by another process. ``OwnerSettings.apply_pending`` makes it
once, whichever process comes first, with the message for the owner; the owner's
listeners then move the jobs that follow the owner, as for a change made at once, and
one short message tells the owner the new zone, which jobs moved and when each fires
next, in the chat the change was set from. A stop between the change and the message
is finished at the next start (the same message: the outbox sends it once).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from agent.owner import OwnerPrefs, OwnerSettings
from agent.reach import Reach
from channels.delivery.outbox import Outbox
from channels.types import Channel, OutboundMessage
from scheduler.cron.expression import CronError
from scheduler.cron.job import CronJob
from scheduler.cron.service import CronService
from scheduler.views import OwnerZone, short_time
from storage.repos.owner_settings import ZoneChange

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
        """The pending change's moment; a change made but unfinished is due at once."""
        prefs = await self.owner.fresh()
        moments = [c.at for c in (prefs.pending_zone, prefs.zone_moving) if c is not None]
        return min(moments, default=None)

    async def run(self, now: datetime) -> None:
        """Make the change (what the owner is told is written with it), move the jobs,
        tell the owner, and mark it done; a stop in between is finished next time."""
        prefs = await self.owner.load()
        pending = prefs.pending_zone
        if pending is not None and pending.at <= now:
            jobs = [job for job in await self.jobs.list_jobs() if not job.done]
            await self.owner.apply_pending(now, moved_text(jobs, prefs, pending, now))
        change = await self.owner.finish_move()
        if change is None:
            return  # nothing due, or another process is done with it
        await self.tell(change, change.message)
        await self.owner.moved(change)


def moved_text(jobs: list[CronJob], prefs: OwnerPrefs, change: ZoneChange, now: datetime) -> str:
    """One short message, written as the change is made: the new zone, the recurring
    jobs on the owner's clock that move with it (next fire on the new clock), those
    that keep their own zone, and one-time jobs (same moment, new local time)."""
    owner = OwnerZone(prefs.timezone, (change.timezone, change.at))
    new = ZoneInfo(change.timezone)
    moved: list[str] = []
    kept: list[str] = []
    once: list[str] = []
    for job in jobs:
        if job.once:
            if job.run_at is not None and job.run_at > now:
                once.append(f"{job.name} {short_time(job.run_at, new, now)}")
        elif owner.follows(job):
            try:
                fires = owner.fires(job, now, 1) if job.enabled else []
            except CronError:
                fires = []
            when = f"next {short_time(fires[0], new, now)}" if fires else "paused"
            moved.append(f"{job.name} ({when})")
        else:
            kept.append(f"{job.name} ({job.timezone})")
    text = f"🌍 Your timezone is now {change.timezone} (was {prefs.timezone}), as planned."
    if moved:
        text += f" Moved with you, same local times: {'; '.join(moved)}."
    if kept:
        text += f" Kept their own zone: {'; '.join(kept)}."
    if once:
        text += f" One-time, same moment, now at: {'; '.join(once)}."
    if not (moved or kept or once):
        text += " No jobs to move."
    return text


@dataclass(frozen=True, eq=False)
class ZoneNotice:
    """Tells the owner of a timezone change made: in the chat it was set from, else the
    owner's main chat. Needs only the outbox and the channels, so the engine is built
    with it before the agent exists."""

    outbox: Outbox
    channels: Mapping[str, Channel]
    reach: Reach
    owner: OwnerSettings

    async def __call__(self, pending: ZoneChange, text: str) -> None:
        channel, chat = pending.channel, pending.chat_id
        if channel is None or chat is None or channel not in self.channels:
            target = self.reach.chat(primary=self.owner.current.primary_channel)
            channel, chat = target.channel, target.chat_id
        key = f"zone-change:{pending.timezone}:{pending.at.isoformat()}"
        await self.outbox.enqueue(OutboundMessage(channel, chat, text, key))
        log.info("owner told of the timezone change to %s", pending.timezone)
