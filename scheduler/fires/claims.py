"""Fire claims: the key each fire is claimed under (``storage.repos.leases``), one per
fire, identical in every process, so a fire runs once.

``cron:<job_id>:<scheduled iso>``, ``pulse:<scheduled iso>`` (or ``pulse:<trigger>:``
for a pulse asked for otherwise), and ``run-now:...`` for a run asked for by hand while
it lasts.
"""

from __future__ import annotations

from datetime import UTC, datetime


def iso(moment: datetime) -> str:
    """The canonical UTC form used in lease keys (identical in every process)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def cron_key(job_id: str, scheduled_for: datetime) -> str:
    return f"cron:{job_id}:{iso(scheduled_for)}"


def pulse_key(scheduled_for: datetime, trigger: str = "schedule") -> str:
    prefix = "pulse" if trigger == "schedule" else f"pulse:{trigger}"
    return f"{prefix}:{iso(scheduled_for)}"


def run_now_key(job_id: str | None) -> str:
    """The claim of a run asked for by hand (``Engine.start_now``) while it lasts: one per
    job (``job_id``) or for the pulse (None)."""
    return f"run-now:cron:{job_id}" if job_id is not None else "run-now:pulse"
