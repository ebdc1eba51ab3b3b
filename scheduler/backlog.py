"""What to do with the fires that came due: pure planning, no clock and no I/O.

From a job's stored next fire (its cursor) up to now, every fire is either run or
recorded as skipped: the newest one missed by at most the grace window runs (once),
every older one and any superseded one inside the window is skipped with a reason.
The engine asks here for a ``Plan`` per job with a passed cursor (``plan_cron``) and
one for the pulse (``plan_pulse``), then claims and runs them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from scheduler.cron.job import CronJob
from scheduler.fires.claims import cron_key, pulse_key
from scheduler.pulse.grid import PulseConfigError, next_pulse
from scheduler.pulse.store import PulseState

log = logging.getLogger(__name__)
NextAfter = Callable[[datetime, int], list[datetime]]
"""The next ``count`` fires strictly after an instant, ascending."""
Kind = Literal["cron", "pulse"]
RECENT_LIMIT = 5_000
_TICK = timedelta(microseconds=1)


def window(next_after: NextAfter, start: datetime, end: datetime, limit: int) -> list[datetime]:
    """The first ``limit`` fires in ``(start, end]``, asking for growing batches so a
    short window costs one small call and a long one a few."""
    out: list[datetime] = []
    cursor, batch = start, 4
    while len(out) < limit:
        got = next_after(cursor, min(batch, limit - len(out)))
        inside = [moment for moment in got if moment <= end]
        out.extend(inside)
        if len(inside) < len(got) or not got:
            break
        cursor, batch = got[-1], min(batch * 2, 256)
    return out


@dataclass(frozen=True)
class Due:
    """The fires from a cursor to now, split; the same for every job sharing a schedule."""

    upcoming: datetime | None
    to_run: datetime | None
    skipped: tuple[tuple[datetime, str], ...] = ()


def split_due(
    cursor: datetime,
    now: datetime,
    next_after: NextAfter,
    *,
    grace: timedelta,
    skip_records: int,
) -> Due:
    """Split the fires from ``cursor`` (itself a fire) to ``now`` into the one to run,
    those skipped, and the next one after now.

    At most ``skip_records`` too-old fires are listed (a week of downtime of a
    minutely job must not write 10,000 records); the last listed one says so.
    """
    following = next_after(cursor, 2)
    if following and following[0] > now:  # the usual case: woken on time, no backlog
        on_time = now - cursor <= grace
        reason = f"missed by {_minutes(now - cursor)} min (grace {_minutes(grace)} min)"
        return Due(
            following[0], cursor if on_time else None, () if on_time else ((cursor, reason),)
        )
    edge = now - grace - _TICK
    old = window(next_after, cursor - _TICK, edge, skip_records + 1) if cursor <= edge else []
    recent = window(next_after, max(cursor - _TICK, edge), now, RECENT_LIMIT)
    skipped = [
        (moment, f"missed by {_minutes(now - moment)} min (grace {_minutes(grace)} min)")
        for moment in old[:skip_records]
    ]
    if len(old) > skip_records and skipped:
        moment, reason = skipped[-1]
        skipped[-1] = (moment, reason + "; later missed fires were not recorded one by one")
    skipped += [(m, "superseded by a later fire inside the grace window") for m in recent[:-1]]
    upcoming = next_after(now, 1)
    return Due(upcoming[0] if upcoming else None, recent[-1] if recent else None, tuple(skipped))


def _minutes(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 60:.0f}"


@dataclass
class Plan:
    """One job's (or the pulse's) due fires, ready to be claimed."""

    kind: Kind
    job_id: str | None
    cursor: datetime
    """The stored next fire the plan starts from (the compare-and-set value)."""
    due: Due
    keys: dict[datetime, str] = field(default_factory=dict)

    def key(self, moment: datetime) -> str:
        if moment not in self.keys:
            self.keys[moment] = cron_key(self.job_id, moment) if self.job_id else pulse_key(moment)
        return self.keys[moment]


# --- plans per job and for the pulse --------------------------------------------------

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
    schedule = job.schedule  # checked once, when the job was read
    if schedule is None:
        log.warning("cron job %s has an unusable schedule; not run", job.id)
        return None
    memo = (schedule.expanded, schedule.tz.key, cursor)
    if memo not in shared:
        following = schedule.next_fires(cursor, 1)
        if following and following[0] > now and now - cursor <= grace:
            shared[memo] = Due(following[0], cursor)  # on time, no backlog: the usual case
        else:
            after = schedule.next_fires
            shared[memo] = split_due(cursor, now, after, grace=grace, skip_records=skip_records)
    due = shared[memo]
    return None if due is None else Plan("cron", job.id, cursor, due)


def plan_pulse(
    state: PulseState, tz: ZoneInfo, now: datetime, grace: timedelta, skip_records: int
) -> Plan | None:
    """The pulse's plan from its stored state, on the owner's clock ``tz``."""
    cursor = state.next_pulse_at
    if cursor is None or cursor > now:
        return None
    try:
        schedule = state.schedule(tz)
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
