"""What a cron run is told about itself, and the head line of what it delivers.

The run's message carries its job id and whether the job is one-time, so the model
can refer to the job (``manage_cronjob``) and knows a one-time run will not come
again. A one-time fire that runs late (missed while Watchkeeper was down) says so.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from scheduler.cron.expression import describe
from scheduler.cron.job import CronJob, local_text
from scheduler.fires.recorder import RunTicket

LATE = timedelta(minutes=10)
"""A fire that starts this long after its time is called late."""


def is_late(ticket: RunTicket, now: datetime) -> bool:
    return now - ticket.scheduled_for > LATE


def cron_prompt(job: CronJob, ticket: RunTicket, now: datetime) -> str:
    """The run's message: who it is, then the task."""
    tz = ZoneInfo(job.timezone)
    if job.once:
        due = local_text(ticket.scheduled_for, tz)
        what = f"one-time (set for {due}; this is its only run)"
    else:
        what = f"recurring ({describe(job.cron_expression)}, {job.timezone})"
    head = f"Scheduled job {job.id} “{job.name}”, {what}."
    if is_late(ticket, now):
        head += (
            f" It runs late: it was due at {local_text(ticket.scheduled_for, tz)} and "
            "Watchkeeper could not run it then; say so in your answer."
        )
    return f"{head}\nTask: {job.instruction}"


def delivery_head(job: CronJob, ticket: RunTicket, now: datetime) -> str:
    """The first line of a delivered result: the job's name, and lateness if any."""
    if not is_late(ticket, now):
        return job.name
    due = ticket.scheduled_for.astimezone(ZoneInfo(job.timezone))
    return f"{job.name} (late: due {due:%a %H:%M})"
