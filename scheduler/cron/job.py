"""A cron job as a value, and the rules its fields follow: recurring (a cron expression)
or one-time (``run_at``).

A one-time job keeps ``next_fire_at = run_at`` while pending. Once its run is over
(success or failure, after its retries) it is kept as done: ``done_at``,
``last_status``, ``enabled`` false, no next fire, and ``prune_at`` 30 days later.

When a one-time job runs (``run_at`` in ISO 8601, or ``in_minutes``) is checked against
now here, purely (no clock, no I/O). A ``run_at`` without an offset is a wall time in the
job's timezone: one that does not exist (spring forward) runs at the end of the gap, one
that occurs twice (fall back) at its first occurrence, like a fixed-time cron job.

``CronService`` applies the rules on every write; each refusal says how to fix it, as
the messages are shown to the model.
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import cast
from zoneinfo import ZoneInfo

from scheduler.cron.expression import (
    CronError,
    Schedule,
    describe,
    gap_end,
    next_fires,
    resolve_wall_time,
    validate_cron,
    validate_timezone,
)
from storage.repos.cron_jobs import ON_FAILURE, OnFailure, StoredJob

log = logging.getLogger(__name__)


class JobError(ValueError):
    """A job request that cannot be done; the message says why (shown to the model)."""


def on_failure_of(value: str | None, default: OnFailure = "warning") -> OnFailure:
    """A failure policy, or a JobError naming the choices."""
    if value is None:
        return default
    word = str(value).strip().lower()
    if word not in ON_FAILURE:
        raise JobError(
            f"on_failure {value!r} is not known; use 'warning' (alert after two failures in "
            "a row), 'critical' (a critical alert at the first failure) or 'none' (record only)"
        )
    return cast(OnFailure, word)


@dataclass(frozen=True)
class CronJob(StoredJob):
    """A stored job with its schedule checked, ready for the engine's fires."""

    schedule: Schedule | None = field(default=None, compare=False, repr=False)
    """A recurring job's expression and zone, checked once when the job was read; None
    for a one-time job, or a stored expression that cannot be used (never fires)."""

    @classmethod
    def of(
        cls, stored: StoredJob, schedule_of: Callable[[str, str], Schedule] = Schedule.of
    ) -> CronJob:
        """The job ``stored`` with its schedule, checked by ``schedule_of`` (the
        service remembers the ones it checked): the engine's fires only compute."""
        schedule: Schedule | None = None
        if not stored.once:
            try:
                schedule = schedule_of(stored.cron_expression, stored.timezone)
            except CronError as exc:
                log.warning("cron job %s has an unusable schedule: %s", stored.id, exc)
        return cls(**stored.stored(), schedule=schedule)

    def rule_words(self) -> str:
        """A recurring job's rule in words (``describe``)."""
        return (
            self.schedule.words() if self.schedule is not None else describe(self.cron_expression)
        )

    def next_fires(self, after: datetime, count: int = 3) -> list[datetime]:
        """The next ``count`` fires in the job's own timezone (a one-time job: its
        ``run_at`` while it is pending and later than ``after``); a CronError when its
        stored schedule cannot be used."""
        if self.once:
            at = self.run_at
            if at is None or self.done or at <= after or count <= 0:
                return []
            return [at.astimezone(validate_timezone(self.timezone))]
        if self.schedule is None:  # said when it was read; said again to the caller
            return next_fires(self.cron_expression, validate_timezone(self.timezone), after, 0)
        return self.schedule.next_fires(after, count)


class JobReader:
    """Makes each stored job a ``CronJob`` (``CronJobStore``'s ``read``), each schedule
    checked once per process, not at every read of its jobs (a stored expression was
    checked when it was written)."""

    def __init__(self) -> None:
        self._schedule_of = functools.lru_cache(maxsize=1024)(Schedule.of)

    def __call__(self, stored: StoredJob) -> CronJob:
        return CronJob.of(stored, self._schedule_of)


# --- one-time jobs: when they run ------------------------------------------------

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


def parse_run_at(text: str, tz: ZoneInfo, name: str = "run_at") -> datetime:
    """An ISO 8601 date and time as an aware instant (naive: a wall time in ``tz``);
    ``name``: the argument named in a refusal."""
    raw = str(text).strip()
    if not _HAS_TIME.match(raw):
        raise JobError(f"{name} {text!r} needs a date and a time of day, e.g. {_EXAMPLE}")
    try:
        parsed = datetime.fromisoformat(raw.replace("z", "Z"))
    except ValueError:
        raise JobError(f"{name} {text!r} is not an ISO 8601 time; use e.g. {_EXAMPLE}") from None
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


# --- the rules of a job's fields -------------------------------------------------

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
