"""``manage_settings``: the owner's quiet hours, timezone, primary channel, and how long
an unacknowledged warning waits before it goes by SMS (``warning_sms_after_minutes``;
0 = never by SMS; the alert router reads it for every warning it routes).

A primary channel is accepted only when the owner can be reached on it here (running,
with the owner's address); a refusal names the ones that can. A new timezone is
reported job by job: recurring jobs on the old clock move to the new one
(``cron_jobs_moved``), others keep their own; one-time jobs keep their moment and are
told with their new local time and whether it falls in quiet hours.

With ``effective_at`` ("from tomorrow 10:00, New York") the new timezone is kept as a
pending change (``pending_timezone`` in every view) and made at that moment by the
scheduler (``agent.runs.zone_change``), which tells the owner which jobs moved. A
timezone given without it, or the current one, drops the pending change.

A thin shell over ``OwnerSettings`` (``AgentDeps.owner``), which validates, stores and
tells the pulse and the cron jobs. Owner tier only (``writes=True``), and not offered
to a pulse: the owner's own settings change when the owner asks (in a chat, or in a
cron job the owner set up), never on the pulse's initiative.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel, Field

from agent.alerts.policy import RoutingPolicy, load_policy
from agent.context import RunContext
from agent.owner import (
    MAX_QUIET_WINDOWS,
    OwnerPrefs,
    OwnerSettings,
    SettingsError,
    check_reachable,
)
from agent.reach import PRIMARY_CHOICES
from agent.spend.report import spend_report
from agent.tools.base import Tool, ToolError, ToolResult
from scheduler.cron.job import CronJob
from scheduler.pulse.grid import in_quiet_hours
from scheduler.views import local_iso, short_time, when_text
from storage.repos.owner_settings import ZoneChange

DURING_QUIET = (
    "info and warning alerts are held and delivered when quiet hours end, and the pulse "
    "waits; critical alerts, cron jobs and one-time reminders are delivered at their time"
)


class QuietWindow(BaseModel):
    start: str
    end: str


class SettingsArgs(BaseModel):
    action: Literal["get", "update"]
    quiet_hours: list[QuietWindow] | None = Field(
        default=None, json_schema_extra={"maxItems": MAX_QUIET_WINDOWS}
    )
    """At most ``MAX_QUIET_WINDOWS``: more are refused by ``OwnerSettings`` with a message
    the model can act on (the schema says so up front)."""
    timezone: str | None = None
    primary_channel: str | None = Field(
        default=None, json_schema_extra={"enum": [str(name) for name in PRIMARY_CHOICES]}
    )
    warning_sms_after_minutes: int | None = None
    """0 to ``MAX_WARNING_SMS_AFTER_MINUTES``, checked by ``OwnerSettings`` like the others
    (a bad one is named the same way); not in the schema, which every turn pays for."""
    effective_at: str | None = None
    """When the ``timezone`` change happens (ISO 8601; the owner's current zone unless
    it has an offset); checked by ``OwnerSettings`` (after now, within a year)."""


FIELDS = ("quiet_hours", "timezone", "primary_channel", "warning_sms_after_minutes")


def pending_view(pending: ZoneChange, tz: ZoneInfo, jobs: dict[str, CronJob]) -> ToolResult:
    """A timezone change set for later: when (in the current zone), and the recurring
    jobs that will move with it."""
    moving = [j.name for j in jobs.values() if not j.once and j.timezone == tz.key]
    return {
        "timezone": pending.timezone,
        "effective_at": when_text(pending.at, tz),
        "then": (
            f"the timezone becomes {pending.timezone}; recurring jobs that follow the "
            f"owner ({', '.join(moving) or 'none now'}) move to it, keeping their local "
            "times; the owner is told in chat. Nothing else to schedule."
        ),
    }


def owner_settings(ctx: RunContext) -> OwnerSettings:
    return ctx.deps.owner


def sms_wait(prefs: OwnerPrefs, policy: RoutingPolicy) -> int:
    """The minutes a warning waits for its SMS: the owner's, else the alert routing's."""
    return int(policy.for_owner(prefs).warning_sms_after.total_seconds() // 60)


def warning_sms(minutes: int, ctx: RunContext) -> str:
    if minutes == 0:
        return "off: warnings never go by SMS, only to the primary chat"
    if ctx.deps.reach.can_page():
        how = "by SMS"
    else:
        how = "as a reminder on every chat (SMS is not set up)"
    return f"a warning not acknowledged within {minutes} min is sent again {how}"


def settings_view(
    prefs: OwnerPrefs, owner: OwnerSettings, policy: RoutingPolicy, ctx: RunContext
) -> ToolResult:
    """The settings, times in the owner's timezone, and what quiet hours and the
    warning SMS mean right now."""
    tz, now = prefs.tz, ctx.now
    minutes = sms_wait(prefs, policy)
    view: ToolResult = {
        "timezone": prefs.timezone,
        "local_time": local_iso(now, tz),
        "quiet_hours": prefs.quiet_dicts(),
        "primary_channel": prefs.primary_channel,
        "configured_channels": ctx.deps.reach.primary_choices(),
        "warning_sms_after_minutes": minutes,
        "warning_sms": warning_sms(minutes, ctx),
    }
    primary = prefs.primary_channel
    why = ctx.deps.reach.unreachable(primary) if primary else None
    if why is not None:  # set when it worked, e.g. before a restart without it
        instead = ctx.deps.reach.chat(primary=primary).channel
        view["primary_channel_problem"] = f"{why}; messages go to {instead} meanwhile"
    if not prefs.quiet_hours:
        view["quiet"] = "off: alerts and the pulse go out at any hour"
        return view
    until = owner.quiet_end(now)
    if until is not None:
        view["quiet_now"] = True
        view["quiet_until"] = local_iso(until, tz)
        view["quiet"] = f"quiet now until {until.astimezone(tz):%H:%M}: {DURING_QUIET}"
    else:
        view["quiet_now"] = False
        view["quiet"] = f"during quiet hours {DURING_QUIET}"
    return view


async def _jobs(ctx: RunContext) -> dict[str, CronJob]:
    """Every job not yet done, by id."""
    if ctx.deps.cron is None:
        return {}
    return {job.id: job for job in await ctx.deps.cron.list_jobs() if not job.done}


def travel_report(
    before: dict[str, CronJob],
    after: dict[str, CronJob],
    old: OwnerPrefs,
    new: OwnerPrefs,
    now: datetime,
) -> ToolResult:
    """What a new timezone did to each job not yet done: recurring ones on the old clock
    moved (same local times, new clock), others kept their own timezone; one-time ones
    kept their moment, told with their new local time and whether it falls in quiet
    hours (a job is delivered at its time even then, so the owner may want it moved)."""
    moved: list[str] = []
    kept: list[str] = []
    once: list[ToolResult] = []
    told: list[str] = []
    for job in after.values():
        was = before.get(job.id)
        if not job.once:
            if was is not None and was.timezone == old.timezone != job.timezone:
                moved.append(job.name)
            else:
                kept.append(f"{job.name} ({job.timezone})")
            continue
        if job.run_at is None or job.run_at <= now:
            continue  # running now: nothing left to move
        quiet = in_quiet_hours(new.quiet_hours, job.run_at, new.tz)
        item: ToolResult = {"job_id": job.id, "name": job.name}
        item.update(runs_at=local_iso(job.run_at, new.tz), was=local_iso(job.run_at, old.tz))
        item["in_quiet_hours"] = quiet
        if not job.enabled:
            item["paused"] = True
        once.append(item)
        here, there = short_time(job.run_at, new.tz, now), short_time(job.run_at, old.tz, now)
        told.append(
            f'"{job.name}" now at {here} {new.timezone} (was {there} {old.timezone})'
            + (", inside quiet hours" if quiet else "")
        )
    report: ToolResult = {"cron_jobs_moved": moved}
    if kept:
        report["cron_jobs_kept"] = kept
    if once:
        report["one_time_jobs"] = once
        note = f"One-time jobs keep their moment: {'; '.join(told)}. Tell the owner."
        if any(item["in_quiet_hours"] for item in once):
            note += (
                " A job runs at its time even in quiet hours: offer to move it "
                "(manage_cronjob update with run_at, read on the new clock)."
            )
        report["one_time_note"] = note
    return report


def _value(prefs: OwnerPrefs, field: str, policy: RoutingPolicy) -> Any:
    """The value in force (a default the owner repeats counts as unchanged)."""
    if field == "quiet_hours":
        return prefs.quiet_dicts()
    if field == "warning_sms_after_minutes":
        return sms_wait(prefs, policy)
    return getattr(prefs, field)


async def _manage(args: SettingsArgs, ctx: RunContext) -> ToolResult:
    owner = owner_settings(ctx)
    policy = await load_policy(ctx.deps.db)  # the routing default under the owner's wait
    if args.action == "get":
        prefs = await owner.load()
        view = settings_view(prefs, owner, policy, ctx)
        if prefs.pending_zone is not None:
            view["pending_timezone"] = pending_view(prefs.pending_zone, prefs.tz, await _jobs(ctx))
        deps = ctx.deps
        view["spend"] = (await spend_report(deps.budget, deps.usage, deps.db)).as_result()
        return view
    asked = {field: getattr(args, field) is not None for field in FIELDS}
    if args.effective_at is not None and args.timezone is None:
        raise ToolError(
            "effective_at says when a timezone change happens: give timezone too. "
            "Nothing was changed."
        )
    if not any(asked.values()):
        raise ToolError(f"update needs one or more of {', '.join(FIELDS)}")
    old = await owner.load()
    try:
        if args.primary_channel is not None:  # only a channel the owner can be reached on
            check_reachable(args.primary_channel, ctx.deps.reach)
        before = await _jobs(ctx) if args.timezone is not None else {}
        prefs = await owner.update(
            quiet_hours=(
                None if args.quiet_hours is None else [q.model_dump() for q in args.quiet_hours]
            ),
            timezone=args.timezone,
            primary_channel=args.primary_channel,
            warning_sms_after_minutes=args.warning_sms_after_minutes,
            effective_at=args.effective_at,
            origin=(ctx.channel, ctx.chat_id),
        )
    except SettingsError as exc:
        raise ToolError(f"{exc}. Nothing was changed.") from None
    result: ToolResult = {"success": True, **settings_view(prefs, owner, policy, ctx)}
    pending = prefs.pending_zone
    same = [
        field
        for field, given in asked.items()
        if given
        and _value(old, field, policy) == _value(prefs, field, policy)
        and not (field == "timezone" and pending is not None and pending != old.pending_zone)
    ]
    if same:
        result["unchanged"] = same  # already so: the model need not tell the owner it changed
    if pending is not None:
        jobs = before if args.timezone is not None else await _jobs(ctx)
        result["pending_timezone"] = pending_view(pending, prefs.tz, jobs)
    if pending is not None and args.effective_at is not None:
        read = "its offset" if _has_offset(args.effective_at) else f"{old.timezone}, no offset"
        result["note"] = (
            f"Not changed yet: set for {when_text(pending.at, prefs.tz)} "
            f"(effective_at read in {read}). To cancel: timezone {prefs.timezone}."
        )
        if (was := old.pending_zone) is not None and was != pending:
            result["note"] += f" Replaces {was.timezone} from {when_text(was.at, old.tz)}."
    elif old.pending_zone is not None and args.timezone is not None:
        dropped = old.pending_zone
        result["pending_timezone_dropped"] = (
            f"{dropped.timezone} from {when_text(dropped.at, old.tz)}"
        )
    if prefs.timezone != old.timezone:
        result.update(travel_report(before, await _jobs(ctx), old, prefs, ctx.now))
    return result


def _has_offset(text: str | None) -> bool:
    """Whether an ISO time names its offset (else it was read in the owner's zone)."""
    if text is None:
        return False
    try:
        return datetime.fromisoformat(text.strip().replace("z", "Z")).tzinfo is not None
    except ValueError:
        return False


MANAGE_SETTINGS: Tool[Any] = Tool(
    name="manage_settings",
    description=(  # what each setting does is in the replies: every turn pays for this
        "The owner's settings; replies explain them (get: also today's spend). update: any "
        f"of quiet_hours (HH:MM, at most {MAX_QUIET_WINDOWS}; [] = off; holding info and "
        "warning alerts and the pulse, not critical ones or jobs), timezone (IANA; "
        "effective_at: ISO time it takes effect, default now), "
        "primary_channel, warning_sms_after_minutes (0 = warnings never by SMS)."
    ),
    args=SettingsArgs,
    handler=_manage,
    acting=lambda args: args.action != "get",
)
