"""``watchkeeper schedule``: the next pulses and cron fires, in the owner's timezone.

Reads the database only (with the embedded database it attaches to a running
``watchkeeper run``), so it shows exactly what the engine will do.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from typing import TextIO
from zoneinfo import ZoneInfo

from agent.config import Settings
from agent.owner import OwnerSettings
from runtime.clock import Clock, utcnow
from scheduler.cron.expression import CronError, describe
from scheduler.cron.job import CronJob, JobReader
from scheduler.cron.service import CronService, fires_window
from scheduler.pulse.grid import PulseConfigError, upcoming_pulses
from scheduler.pulse.store import PulseState, PulseStore
from scheduler.views import days_text, quiet_text
from storage.repos.cron_jobs import CronJobStore
from storage.repos.pulse import PulseRepo

PER_JOB_LIMIT = 200


def schedule_lines(
    state: PulseState, jobs: list[CronJob], tz: ZoneInfo, now: datetime, hours: float
) -> list[str]:
    """The report as lines: a header, then one line per fire, soonest first."""
    until = now + timedelta(hours=hours)
    fires: list[tuple[datetime, str]] = []
    try:
        pulses = upcoming_pulses(state.schedule(tz), now, until)
    except PulseConfigError:
        pulses = []
    fires.extend((moment, "pulse") for moment in pulses)
    for job in jobs:
        if not job.enabled:
            continue
        try:
            moments = fires_window(job, now, until, limit=PER_JOB_LIMIT)
        except CronError:
            continue
        label = f"{'once' if job.once else 'cron'}   {job.name} [{job.id}]"
        fires.extend((moment, label) for moment in moments)
        if job.once and job.next_fire_at is not None and job.next_fire_at <= now:
            fires.append((now, f"{label} (overdue: runs now)"))
    fires.sort(key=lambda item: item[0])
    pulse_head = (
        f"pulse: {state.pulses_per_day}/day, {days_text(state.active_days)}, "
        f"quiet {quiet_text(state.quiet_hours)}"
        if state.enabled
        else "pulse: off"
    )
    lines = [
        f"Next {hours:g} h from {now.astimezone(tz):%Y-%m-%d %H:%M} ({tz.key})",
        pulse_head,
        f"cron jobs: {sum(1 for j in jobs if j.enabled)} enabled, "
        f"{sum(1 for j in jobs if not j.enabled and not j.done)} paused, "
        f"{sum(1 for j in jobs if j.done)} one-time done",
        "",
    ]
    for job in jobs:
        if job.enabled and not job.once and job.timezone != tz.key:
            lines.insert(-1, f"  {job.name}: {describe(job.cron_expression)} in {job.timezone}")
    if not fires:
        lines.append("(nothing scheduled)")
    for moment, what in fires:
        lines.append(f"{moment.astimezone(tz):%a %Y-%m-%d %H:%M %Z}  {what}")
    return lines


async def print_schedule(
    settings: Settings,
    hours: float = 24.0,
    *,
    out: TextIO | None = None,
    clock: Clock = utcnow,
) -> int:
    """Print upcoming fires; returns the process exit code."""
    stream = out or sys.stdout
    if hours <= 0:
        print("watchkeeper: --hours must be positive", file=sys.stderr)
        return 2
    from storage.db import open_configured  # pymongo: loaded when a database opens

    async with open_configured(settings) as db:
        owner = OwnerSettings(db.db, clock, settings.timezone)
        await owner.load()  # the owner's timezone and quiet hours (manage_settings)
        tz = owner.tz
        state = await PulseStore(PulseRepo(db.db), clock, owner).get()
        jobs = await CronService(CronJobStore(db.db, JobReader()), clock, tz.key).list_jobs()
    for line in schedule_lines(state, jobs, tz, clock(), hours):
        print(line, file=stream)
    stream.flush()
    return 0
