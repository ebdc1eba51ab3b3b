"""The rules a cron job's fields must follow: each refusal says how to fix it.

``CronService`` applies them on every write; the messages are shown to the model.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from scheduler.cron import CronError, next_fires, validate_cron, validate_timezone
from scheduler.job_model import CronJob, JobError
from scheduler.once import local_text

Doc = dict[str, Any]

NAME_LIMIT = 100
INSTRUCTION_LIMIT = 2_000


def text_field(value: str | None, what: str, limit: int) -> str:
    text = (value or "").strip()
    if not text:
        raise JobError(f"{what} is required")
    if len(text) > limit:
        raise JobError(f"{what} is {len(text)} characters; the limit is {limit}")
    return text


def checked_schedule(expression: str, timezone: str) -> tuple[str, str]:
    try:
        return validate_cron(expression), validate_timezone(timezone).key
    except CronError as exc:
        raise JobError(str(exc)) from None


@dataclass(frozen=True)
class JobLimits:
    """What the model may set up (DESIGN.md, limits); ``None`` fields are unlimited."""

    max_jobs: int | None = 50
    min_interval: timedelta = timedelta(minutes=5)


NO_LIMITS = JobLimits(max_jobs=None, min_interval=timedelta(0))


def check_interval(expression: str, timezone: str, now: datetime, least: timedelta) -> None:
    """A recurring job fires at most every ``least`` (any two fires in the next week)."""
    if least <= timedelta(0):
        return
    fires = next_fires(expression, validate_timezone(timezone), now, 64)
    gaps = [b - a for a, b in itertools.pairwise(fires)]
    if gaps and min(gaps) < least:
        shortest = int(min(gaps).total_seconds() // 60)
        most = int(least.total_seconds() // 60)
        raise JobError(
            f"{expression!r} fires {shortest} minute(s) apart; a recurring job may fire at "
            f"most every {most} minutes, e.g. '*/{most} * * * *'"
        )


CHOICES = (
    "give exactly one of cron_expression (recurring, e.g. '0 9 * * 1-5'), run_at (one-time, "
    "ISO 8601 such as '2026-11-27T08:00', the owner's timezone when it has no offset) or "
    "in_minutes (one-time, minutes from now)"
)
UPDATABLE = (
    "name, instruction, cron_expression, run_at, in_minutes, timezone, enabled or on_failure"
)
PENDING: Doc = {"done_at": {"$exists": False}}
"""Jobs that count toward the limit: done one-time jobs do not."""


def which_schedule(
    cron_expression: str | None, run_at: str | None, in_minutes: int | None
) -> str | None:
    """Which schedule argument was given: at most one of the three."""
    given = [
        label
        for label, value in (
            ("cron_expression", cron_expression),
            ("run_at", run_at),
            ("in_minutes", in_minutes),
        )
        if value is not None and value != ""
    ]
    if len(given) > 1:
        raise JobError(f"{' and '.join(given)} were given together; {CHOICES}")
    return given[0] if given else None


def zone_of(timezone: str) -> ZoneInfo:
    try:
        return validate_timezone(timezone)
    except CronError as exc:
        raise JobError(str(exc)) from None


def done_text(job: CronJob) -> str:
    done = local_text(job.done_at, zone_of(job.timezone)) if job.done_at else "?"
    return (
        f"job {job.id!r} is a one-time job that already ran (done {done}, {job.last_status}); "
        "it cannot be changed or toggled: create a new job instead (or delete this one)"
    )
