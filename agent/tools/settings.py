"""``manage_settings``: the owner's quiet hours, timezone, primary channel, and how long
an unacknowledged warning waits before it goes by SMS (``warning_sms_after_minutes``;
0 = never by SMS; the alert router reads it for every warning it routes).

A thin shell over ``OwnerSettings`` (``AgentDeps.owner``), which validates, stores and
tells the pulse and the cron jobs. Owner tier only (``writes=True``), and not offered
to a pulse: the owner's own settings change when the owner asks (in a chat, or in a
cron job the owner set up), never on the pulse's initiative.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.alerts.policy import RoutingPolicy, load_policy
from agent.context import RunContext
from agent.owner import (
    CHANNELS,
    MAX_QUIET_WINDOWS,
    OwnerPrefs,
    OwnerSettings,
    SettingsError,
    can_page,
)
from agent.tools.base import Tool, ToolError, ToolResult
from scheduler.views import local_iso

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
    primary_channel: str | None = Field(default=None, json_schema_extra={"enum": list(CHANNELS)})
    warning_sms_after_minutes: int | None = None
    """0 to ``MAX_WARNING_SMS_AFTER_MINUTES``, checked by ``OwnerSettings`` like the others
    (a bad one is named the same way); not in the schema, which every turn pays for."""


FIELDS = ("quiet_hours", "timezone", "primary_channel", "warning_sms_after_minutes")


def owner_settings(ctx: RunContext) -> OwnerSettings:
    return ctx.deps.owner


def sms_wait(prefs: OwnerPrefs, policy: RoutingPolicy) -> int:
    """The minutes a warning waits for its SMS: the owner's, else the alert routing's."""
    return int(policy.for_owner(prefs).warning_sms_after.total_seconds() // 60)


def warning_sms(minutes: int, ctx: RunContext) -> str:
    if minutes == 0:
        return "off: warnings never go by SMS, only to the primary chat"
    if can_page(ctx.deps.settings, ctx.deps.channels):
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
        "warning_sms_after_minutes": minutes,
        "warning_sms": warning_sms(minutes, ctx),
    }
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


async def _jobs_in(ctx: RunContext, timezone: str) -> dict[str, str]:
    """Cron jobs on ``timezone``: id to name."""
    if ctx.deps.cron is None:
        return {}
    return {job.id: job.name for job in await ctx.deps.cron.list_jobs() if job.timezone == timezone}


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
        return settings_view(await owner.load(), owner, policy, ctx)
    asked = {field: getattr(args, field) is not None for field in FIELDS}
    if not any(asked.values()):
        raise ToolError(f"update needs one or more of {', '.join(FIELDS)}")
    old = await owner.load()
    before = await _jobs_in(ctx, old.timezone) if args.timezone is not None else {}
    try:
        prefs = await owner.update(
            quiet_hours=(
                None if args.quiet_hours is None else [q.model_dump() for q in args.quiet_hours]
            ),
            timezone=args.timezone,
            primary_channel=args.primary_channel,
            warning_sms_after_minutes=args.warning_sms_after_minutes,
        )
    except SettingsError as exc:
        raise ToolError(f"{exc}. Nothing was changed.") from None
    result: ToolResult = {"success": True, **settings_view(prefs, owner, policy, ctx)}
    same = [
        field
        for field, given in asked.items()
        if given and _value(old, field, policy) == _value(prefs, field, policy)
    ]
    if same:
        result["unchanged"] = same  # already so: the model need not tell the owner it changed
    if prefs.timezone != old.timezone:
        after = await _jobs_in(ctx, prefs.timezone)
        result["cron_jobs_moved"] = [name for job_id, name in before.items() if job_id in after]
    return result


MANAGE_SETTINGS: Tool[Any] = Tool(
    name="manage_settings",
    description=(  # what each setting does is in the replies: every turn pays for this
        "The owner's settings; replies explain them. update: any of quiet_hours (HH:MM, at "
        f"most {MAX_QUIET_WINDOWS}; [] = off), timezone (IANA), primary_channel, "
        "warning_sms_after_minutes (0 = warnings never by SMS)."
    ),
    args=SettingsArgs,
    handler=_manage,
)
