"""What is due for one job or the pulse: its fires from the stored cursor to now.

The engine asks here for a ``Plan`` per job with a passed cursor (and one for the
pulse), then claims and runs them; the split itself is ``backlog.split_due``.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from scheduler.backlog import Due, Plan, split_due
from scheduler.cron.expression import CronError, next_fires, validate_timezone
from scheduler.cron.job import CronJob
from scheduler.pulse.grid import PulseConfigError, next_pulse
from scheduler.pulse.store import PulseStore

log = logging.getLogger(__name__)
Shared = dict[tuple[str, str, datetime], Due | None]


def plan_cron(
    job: CronJob, now: datetime, shared: Shared, grace: timedelta, skip_records: int
) -> Plan | None:
    """Jobs with the same schedule and cursor share one computation (200 jobs at
    09:00 cost one). A one-time job's fire runs even when it was missed by more than
    the grace window (say, Watchkeeper was down): late, and the run says so."""
    cursor = job.next_fire_at
    if cursor is None or cursor > now:
        return None
    if job.once:  # runs once, however late: a reminder that never arrives is the worst
        return Plan("cron", job.id, cursor, Due(None, cursor))
    memo = (job.cron_expression, job.timezone, cursor)
    if memo not in shared:
        try:
            tz = validate_timezone(job.timezone)
            shared[memo] = split_due(
                cursor,
                now,
                lambda after, count: next_fires(job.cron_expression, tz, after, count),
                grace=grace,
                skip_records=skip_records,
            )
        except CronError:
            log.warning("cron job %s has an unusable schedule; not run", job.id)
            shared[memo] = None
    due = shared[memo]
    return None if due is None else Plan("cron", job.id, cursor, due)


async def plan_pulse(
    pulse: PulseStore, now: datetime, grace: timedelta, skip_records: int
) -> Plan | None:
    state = await pulse.get()
    cursor = state.next_pulse_at
    if cursor is None or cursor > now:
        return None
    try:
        schedule = state.schedule(pulse.tz)
    except PulseConfigError:
        log.warning("stored pulse settings are invalid; pulse not run")
        return None

    def next_after(after: datetime, count: int) -> list[datetime]:
        slots: list[datetime] = []
        while len(slots) < count and (slot := next_pulse(schedule, after)) is not None:
            slots.append(slot)
            after = slot
        return slots

    due = split_due(cursor, now, next_after, grace=grace, skip_records=skip_records)
    return Plan("pulse", None, cursor, due)
