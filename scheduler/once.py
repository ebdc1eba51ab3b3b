"""When a one-time job runs: ``run_at`` (ISO 8601) or ``in_minutes``, checked against now.

Pure (no clock, no I/O). A ``run_at`` without an offset is a wall time in the job's
timezone: one that does not exist (spring forward) runs at the end of the gap, one that
occurs twice (fall back) at its first occurrence, like a fixed-time cron job.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from scheduler.cron import gap_end, resolve_wall_time
from scheduler.job_model import JobError

MAX_AHEAD = timedelta(days=366)
"""The furthest ahead a one-time job may be set."""
MAX_MINUTES = int(MAX_AHEAD.total_seconds() // 60)
_HAS_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}")
_EXAMPLE = "'2026-11-27T08:00' (the job's timezone) or '2026-11-27T08:00+01:00'"


def local_text(moment: datetime, tz: ZoneInfo) -> str:
    """ISO 8601 with the offset, to the minute unless seconds matter."""
    local = moment.astimezone(tz)
    return local.isoformat(timespec="minutes" if local.second == 0 else "seconds")


def now_text(now: datetime, tz: ZoneInfo) -> str:
    return f"it is now {local_text(now.replace(second=0, microsecond=0), tz)} ({tz.key})"


def parse_run_at(text: str, tz: ZoneInfo) -> datetime:
    """An ISO 8601 date and time as an aware instant (naive: a wall time in ``tz``)."""
    raw = str(text).strip()
    if not _HAS_TIME.match(raw):
        raise JobError(f"run_at {text!r} needs a date and a time of day, e.g. {_EXAMPLE}")
    try:
        parsed = datetime.fromisoformat(raw.replace("z", "Z"))
    except ValueError:
        raise JobError(f"run_at {text!r} is not an ISO 8601 time; use e.g. {_EXAMPLE}") from None
    parsed = parsed.replace(microsecond=0)
    if parsed.tzinfo is not None:
        return parsed
    instants = resolve_wall_time(parsed, tz)
    return (instants[0] if instants else gap_end(parsed, tz)).astimezone(tz)


def one_time_at(
    run_at: str | None, in_minutes: int | None, tz: ZoneInfo, now: datetime
) -> datetime:
    """The instant a one-time job runs; refused when past or more than a year ahead,
    with the current local time in the message so the model can correct itself."""
    if in_minutes is not None:
        if isinstance(in_minutes, bool) or not isinstance(in_minutes, int):
            raise JobError(f"in_minutes must be a whole number of minutes (got {in_minutes!r})")
        if in_minutes < 1:
            raise JobError(
                f"in_minutes {in_minutes} is in the past; it must be at least 1; "
                f"{now_text(now, tz)}"
            )
        if in_minutes > MAX_MINUTES:
            raise JobError(f"in_minutes {in_minutes} is more than a year; at most {MAX_MINUTES}")
        return (now + timedelta(minutes=in_minutes)).replace(microsecond=0)
    if run_at is None:
        raise JobError(f"run_at or in_minutes is required for a one-time job, e.g. {_EXAMPLE}")
    when = parse_run_at(run_at, tz)
    if when <= now:
        raise JobError(f"run_at {local_text(when, tz)} is in the past; {now_text(now, tz)}")
    if when > now + MAX_AHEAD:
        raise JobError(
            f"run_at {local_text(when, tz)} is more than a year ahead; {now_text(now, tz)}"
        )
    return when
