"""Schedule directives from alert replies: "weekly", "at 07:30", "pause pulse"...

They go through the same validated services as ``manage_cronjob`` and
``manage_pulse`` (``CronService``, ``PulseStore``); when the scheduler is not
running (``None``), the owner is told so instead.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from agent.alerts.directives import (
    Directive,
    PauseJob,
    PausePulse,
    ResumeJob,
    ResumePulse,
    SetCadence,
    SetInterval,
    SetPulseRate,
    SetTime,
)
from scheduler.cron.expression import CronError, describe, reschedule
from scheduler.cron.job import JobError
from scheduler.cron.service import CronService
from scheduler.pulse.grid import PulseConfigError
from scheduler.pulse.store import PulseStore
from storage.repos.alert_record import Alert

log = logging.getLogger(__name__)
CRON_PREFIX = "cron:"
NO_SCHEDULER = "Schedule changes are unavailable right now: the scheduler is not running."


def job_id_of(alert: Alert) -> str | None:
    """The cron job that raised the alert (``source`` ``cron:<job_id>``), if any."""
    source = alert.own_source
    job = source[len(CRON_PREFIX) :] if source.startswith(CRON_PREFIX) else ""
    return job or None


def rewrite_words(directive: Directive) -> str | None:
    """The directive in the words ``scheduler.cron.expression.reschedule`` understands."""
    if isinstance(directive, SetCadence):
        return directive.cadence
    if isinstance(directive, SetInterval):
        return f"every {directive.count} {directive.unit[0]}"
    if isinstance(directive, SetTime):
        return f"at {directive.at:%H:%M}"
    return None


def _next_run(job: Any, now: datetime) -> str:
    try:
        fires = job.next_fires(now, 1)
    except (CronError, ValueError):
        return ""
    if not fires or not job.enabled:
        return ""
    return f"; next run {fires[0]:%a %d %b %H:%M} ({job.timezone})"


async def apply_cron(
    service: CronService | None, alert: Alert, directive: Directive, now: datetime
) -> str:
    """Change the job behind a cron-raised alert; the reply says what it is now."""
    code = alert.code
    job_id = job_id_of(alert)
    if job_id is None:
        return f"#{code} was not raised by a cron job, so it has no schedule to change."
    if service is None:
        return NO_SCHEDULER
    try:
        job = await service.get(job_id)
        if isinstance(directive, PauseJob | ResumeJob):
            enabled = isinstance(directive, ResumeJob)
            job = await service.update(job.id, enabled=enabled)
            state = "resumed" if enabled else "paused"
            return f"#{code}: job “{job.name}” {state}{_next_run(job, now)}."
        words = rewrite_words(directive)
        if words is None:
            return f"'{directive.kind}' is not a schedule change."
        if job.once:
            return (
                f"#{code}: “{job.name}” is a one-time job, so it has no repeating schedule "
                "to change; ask me to set up a recurring job instead."
            )
        expression = reschedule(job.cron_expression, words)
        job = await service.update(job.id, cron_expression=expression)
    except (JobError, CronError) as exc:
        return f"#{code}: the schedule was not changed: {exc}"
    log.info("alert #%s: job %s rescheduled to %s", code, job.id, job.cron_expression)
    return (
        f"#{code}: job “{job.name}” now runs {describe(job.cron_expression)}{_next_run(job, now)}."
    )


async def apply_pulse(store: PulseStore | None, directive: Directive) -> str:
    """Pause, resume or re-rate the pulse through its validated store."""
    if store is None:
        return "Pulse changes are unavailable right now: the scheduler is not running."
    try:
        if isinstance(directive, PausePulse):
            await store.update_config(enabled=False)
            return "Pulse paused. Reply 'resume pulse' to start it again."
        if isinstance(directive, ResumePulse):
            state = await store.update_config(enabled=True)
            return f"Pulse resumed ({state.pulses_per_day} per day)."
        if isinstance(directive, SetPulseRate):
            state = await store.update_config(pulses_per_day=directive.per_day)
            return f"Pulse now runs {state.pulses_per_day} times per day."
    except PulseConfigError as exc:
        return f"The pulse was not changed: {exc}"
    return f"'{directive.kind}' is not a pulse change."
