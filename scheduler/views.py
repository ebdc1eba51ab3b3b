"""How jobs, the pulse and runs look to the model, the owner and the admin API.

One place for these shapes, so the tool, ``/jobs``, ``/pulse``, the system prompt and
``GET /api/status`` never disagree about what a job or the pulse is doing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from scheduler.cron.expression import CronError, Schedule
from scheduler.cron.job import CronJob
from scheduler.pulse.grid import (
    PulseConfigError,
    PulseSchedule,
    QuietHours,
    active_spans,
    average_spacing,
    grid_slots,
    local_day,
    next_pulse,
    remaining_today,
)
from scheduler.pulse.store import PulseState
from storage.repos.runs.record import Run

DAY_NAMES = ("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat")


@dataclass(frozen=True)
class OwnerZone:
    """The owner's zone as job views need it: the zone now, and a change set for later
    (zone, moment), when the jobs that follow the owner move with it."""

    timezone: str
    pending: tuple[str, datetime] | None = None

    def at(self, when: datetime) -> ZoneInfo:
        """The owner's zone at ``when``."""
        if self.pending is not None and when >= self.pending[1]:
            return ZoneInfo(self.pending[0])
        return ZoneInfo(self.timezone)

    def follows(self, job: CronJob) -> bool:
        """A recurring job on the owner's clock moves when the owner's zone changes
        (``CronService.move_timezone``); one on another zone keeps it."""
        return job.timezone == self.timezone

    def zone_words(self, job: CronJob, now: datetime) -> str:
        """``follows owner (Europe/Berlin)`` or ``keeps America/New_York``."""
        if not self.follows(job):
            return f"keeps {job.timezone}"
        if self.pending is None:
            return f"follows owner ({self.timezone})"
        zone, at = self.pending
        return f"follows owner ({self.timezone}; {zone} from {when_text(at, self.at(now))})"

    def fires(self, job: CronJob, now: datetime, count: int) -> list[datetime]:
        """A recurring job's next ``count`` fires, those after a pending change on the
        owner's new clock when the job follows the owner."""
        fires = job.next_fires(now, count)
        if self.pending is None or not self.follows(job) or not job.cron_expression:
            return fires
        zone, at = self.pending
        before = [fire for fire in fires if fire < at]
        later = Schedule.of(job.cron_expression, zone).next_fires(max(at, now), count)
        return (before + later)[:count]


def when_text(moment: datetime, tz: ZoneInfo) -> str:
    """``Mon 30 Nov 08:30 (Europe/Berlin)``: a moment for the model to repeat as is."""
    local = moment.astimezone(tz)
    return f"{local:%a} {local.day} {local:%b %H:%M} ({tz.key})"


def local_iso(moment: datetime | None, tz: ZoneInfo) -> str | None:
    return None if moment is None else moment.astimezone(tz).isoformat(timespec="minutes")


def short_time(moment: datetime | None, tz: ZoneInfo, now: datetime | None = None) -> str:
    """``14:00`` today, ``Tue 14:00`` within a week, else the date."""
    if moment is None:
        return "never"
    local = moment.astimezone(tz)
    if now is not None:
        days = (local.date() - now.astimezone(tz).date()).days
        if days == 0:
            return local.strftime("%H:%M")
        if -6 <= days <= 6:
            return local.strftime("%a %H:%M")
    return local.strftime("%Y-%m-%d %H:%M")


def schedule_words(job: CronJob, shown_in: ZoneInfo | None = None) -> str:
    """How often a job runs, in words: "repeats: every weekday at 09:00 (Europe/Berlin)",
    "runs once at 2026-11-27T08:00+01:00, then is kept as done" (a one-time job's
    moment in ``shown_in``, default its own timezone)."""
    tz = shown_in or ZoneInfo(job.timezone)
    if not job.once:
        return f"repeats: {job.rule_words()} ({job.timezone})"
    at = local_iso(job.run_at, tz) or "?"
    if job.done:
        return f"ran once (set for {at}); done"
    return f"runs once at {at}, then is kept as done"


def job_view(
    job: CronJob,
    now: datetime,
    shown_in: ZoneInfo | None = None,
    owner: OwnerZone | None = None,
) -> dict[str, Any]:
    """The ``manage_cronjob`` shape: a recurring job's next three fires as ISO times in
    ``shown_in`` (the owner's timezone in a list; default the job's own); a one-time
    job's time is said once, in ``schedule``; ``source`` when the instruction is not
    the owner's words (``CronJob.source``). With ``owner`` (the model's view) a
    recurring job also says whether it follows the owner's zone or keeps its own
    (``zone``) and its next fires in words in the zone the owner is in at each
    (``next``), a pending zone change counted in."""
    tz = shown_in or ZoneInfo(job.timezone)
    view: dict[str, Any] = {
        "job_id": job.id,
        "name": job.name,
        "instruction": job.instruction,
        "kind": "one-time" if job.once else "recurring",
        "schedule": schedule_words(job, tz),
    }
    if job.source is not None:  # written after outside text: its runs' calls are held
        view["source"] = job.source.to_doc()
    if not job.once:
        view["cron_expression"] = job.cron_expression
    view.update(timezone=job.timezone, enabled=job.enabled, on_failure=job.on_failure)
    view["delivers_to"] = f"{job.origin_channel}:{job.origin_chat_id}"
    if (state := job_state(job, now)) is not None:
        view["state"] = state
    if job.done:
        view["done_at"] = local_iso(job.done_at, tz)
        view["last_status"] = job.last_status
    elif not job.once and owner is None:
        view["next_fires"] = upcoming(job, now, 3, tz) if job.enabled else []
    elif not job.once and owner is not None:
        view["zone"] = owner.zone_words(job, now)
        try:
            fires = owner.fires(job, now, 3) if job.enabled else []
        except CronError:
            fires = []
        view["next_fires"] = [local_iso(fire, owner.at(fire)) for fire in fires]
        view["next"] = [when_text(fire, owner.at(fire)) for fire in fires]
    return view


def zone_note(jobs: list[CronJob], owner: OwnerZone, now: datetime) -> str | None:
    """The last line of ``/jobs``: which recurring jobs follow the owner's zone, and a
    zone change set for later (None when no recurring job is listed)."""
    if all(job.once for job in jobs):
        return None
    text = f"Jobs in ({owner.timezone}) follow your timezone; others keep their own."
    if owner.pending is not None:
        zone, at = owner.pending
        text += f" From {when_text(at, owner.at(now))} you are on {zone}: they move then."
    return text


def job_state(job: CronJob, now: datetime) -> str | None:
    """``done``, or a one-time job past its time: ``running`` (claimed) or ``overdue:
    runs now``; None for a job waiting for its next fire."""
    if job.done:
        return "done"
    if job.once and job.enabled and job.run_at is not None and job.run_at <= now:
        return "running" if job.next_fire_at is None else "overdue: runs now"
    return None


def upcoming(
    job: CronJob, now: datetime, count: int, shown_in: ZoneInfo | None = None
) -> list[str]:
    """The job's next ``count`` fires as ISO times (to the minute) in ``shown_in``,
    default its own timezone."""
    tz = shown_in or ZoneInfo(job.timezone)
    try:
        return [t.astimezone(tz).isoformat(timespec="minutes") for t in job.next_fires(now, count)]
    except CronError:
        return []


def job_line(job: CronJob, now: datetime, shown_in: ZoneInfo | None = None) -> str:
    """One line of ``/jobs``: a recurring job's rule in its own timezone, its times in
    ``shown_in`` (the owner's; default the job's own)."""
    tz = shown_in or ZoneInfo(job.timezone)
    if job.done:
        state = f"done {short_time(job.done_at, tz, now)} ({job.last_status})"
    elif not job.enabled:
        state = "paused"
    else:
        state = f"next {short_time(job.next_fire_at or job.run_at, tz, now)}"
    if job.once:
        return f"• {job.name} [{job.id}] — once, {state}"
    return f"• {job.name} [{job.id}] — {job.rule_words()} ({job.timezone}), {state}"


def days_text(days: tuple[int, ...] | list[int]) -> str:
    chosen = sorted(set(days))
    if chosen == list(range(7)):
        return "every day"
    if chosen == [1, 2, 3, 4, 5]:
        return "weekdays"
    return ", ".join(DAY_NAMES[d] for d in chosen) if chosen else "no days"


def quiet_text(quiet: Sequence[QuietHours]) -> str:
    return ", ".join(f"{q.start:%H:%M}–{q.end:%H:%M}" for q in quiet) or "none"


def pulse_view(state: PulseState, tz: ZoneInfo, now: datetime) -> dict[str, Any]:
    """The ``get_config`` shape, with what the settings imply right now: ``today`` holds
    today's grid slot times, ``slots_passed`` (at or before now, whether or not a pulse
    ran then: ``done_today`` counts those that ran) and ``slots_left`` (after now)."""
    done = state.done_on(local_day(now, tz))
    today: dict[str, list[str | None]] = {"slots_passed": [], "slots_left": []}
    view: dict[str, Any] = {
        "enabled": state.enabled,
        "pulses_per_day": state.pulses_per_day,
        "spacing": None,
        "active_days": list(state.active_days),
        "quiet_hours": [q.as_dict() for q in state.quiet_hours],
        "timezone": tz.key,
        "notes": state.notes,
        "check_ins": state.check_ins,
        "done_today": done,
        "last_pulse_at": local_iso(state.last_pulse_at, tz),
        "today": today,
    }
    if state.paused_at(now):
        view["paused_until"] = local_iso(state.paused_until, tz)
    schedule = _schedule(state, tz)
    if schedule is None:
        view["remaining_today"], view["next_pulse_at"] = 0, None
        return view
    view["spacing"] = spacing_text(schedule)
    view["remaining_today"] = remaining_today(schedule, done, now)
    view["next_pulse_at"] = local_iso(next_pulse(schedule, now), tz)
    for slot in grid_slots(schedule, local_day(now, tz)):
        today["slots_left" if slot > now else "slots_passed"].append(local_iso(slot, tz))
    return view


def _schedule(state: PulseState, tz: ZoneInfo) -> PulseSchedule | None:
    """The day's grid the settings make; None when they are invalid."""
    try:
        return state.schedule(tz)
    except PulseConfigError:
        return None


def spacing_text(schedule: PulseSchedule) -> str:
    """``between 07:00 and 22:00, every 1 h 15 min``: how the day's pulses are spread."""
    spacing = average_spacing(schedule)
    if spacing is None:
        return "never: every minute of the day is quiet"
    minutes = round(spacing.total_seconds() / 60)
    exact = spacing.total_seconds() % 60 == 0
    every = f"every {_duration(minutes)}" if exact else f"about every {_duration(minutes)}"
    spans = active_spans(schedule.quiet_hours)
    if spans == [("00:00", "24:00")]:
        return f"round the clock from 00:00, {every}"
    return " and ".join(f"between {a} and {b}" for a, b in spans) + f", {every}"


def pulse_status_text(state: PulseState, tz: ZoneInfo, now: datetime, *, notes: bool) -> str:
    """Two short lines for the system prompt and ``/pulse``: ``pulse_view``'s figures,
    without the day's slot list it does not show (it is in every owner's prompt)."""
    schedule = _schedule(state, tz)
    if not state.enabled:
        head = "off"
    else:
        spread = spacing_text(schedule) if schedule is not None else "(settings invalid)"
        head = f"on, {state.pulses_per_day}/day {spread}, {days_text(state.active_days)}"
        if state.paused_at(now):
            head += f"; paused until {short_time(state.paused_until, tz, now)}"
        if state.check_ins:
            head += "; check-ins: each answer is sent to the owner"
    nxt = next_pulse(schedule, now) if schedule is not None else None
    line = (
        f"done today {state.done_on(local_day(now, tz))}/{state.pulses_per_day}, "
        f"last {short_time(state.last_pulse_at, tz, now)}, "
        f"next {short_time(nxt, tz, now) if nxt else 'none'}"
    )
    text = f"Pulse: {head}.\n{line}."
    if notes and state.notes:
        text += f"\nPulse notes: {len(state.notes)} chars (manage_pulse get_config)."
    return text


def _duration(minutes: int) -> str:
    hours, rest = divmod(minutes, 60)
    if not hours:
        return f"{rest} min"
    return f"{hours} h" if not rest else f"{hours} h {rest} min"


def run_line(run: Run, tz: ZoneInfo) -> str:
    """``pulse success in 2.1 s (3 tool calls): <first words of the result>``."""
    what = run.kind + (f" {run.name}" if run.name else "")
    text = f"{what} {run.status}"
    if run.status != "skipped":
        text += f" in {(run.duration_ms or 0) / 1000:.1f} s"
        calls = len(run.tool_calls)
        text += f" ({calls} tool call{'s' if calls != 1 else ''})" if calls else ""
    detail = run.error if run.status != "success" else run.result
    if detail:
        detail = " ".join(detail.split())
        text += ": " + (detail if len(detail) <= 300 else detail[:299] + "…")
    return text
