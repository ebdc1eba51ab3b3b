"""``manage_settings``: the owner's quiet hours, timezone and primary channel.

A thin shell over ``OwnerSettings`` (``AgentDeps.owner``), which validates, stores and
tells the pulse and the cron jobs. Owner tier only (``writes=True``), and not offered
to a pulse: the owner's own settings change when the owner asks (in a chat, or in a
cron job the owner set up), never on the pulse's initiative.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.context import RunContext
from agent.tools.base import Tool, ToolError, ToolResult
from scheduler.owner_settings import (
    CHANNELS,
    MAX_QUIET_WINDOWS,
    OwnerPrefs,
    OwnerSettings,
    SettingsError,
)
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


def owner_settings(ctx: RunContext) -> OwnerSettings:
    owner = ctx.deps.owner
    if owner is None:
        raise ToolError("the owner's settings are not available in this process")
    return owner


def settings_view(prefs: OwnerPrefs, owner: OwnerSettings, ctx: RunContext) -> ToolResult:
    """The settings, times in the owner's timezone, and what quiet hours mean right now."""
    tz, now = prefs.tz, ctx.now
    view: ToolResult = {
        "timezone": prefs.timezone,
        "local_time": local_iso(now, tz),
        "quiet_hours": prefs.quiet_dicts(),
        "primary_channel": prefs.primary_channel,
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


def _value(prefs: OwnerPrefs, field: str) -> Any:
    return prefs.quiet_dicts() if field == "quiet_hours" else getattr(prefs, field)


async def _manage(args: SettingsArgs, ctx: RunContext) -> ToolResult:
    owner = owner_settings(ctx)
    if args.action == "get":
        return settings_view(await owner.load(), owner, ctx)
    if args.quiet_hours is None and args.timezone is None and args.primary_channel is None:
        raise ToolError("update needs quiet_hours, timezone and/or primary_channel")
    old = await owner.load()
    before = await _jobs_in(ctx, old.timezone) if args.timezone is not None else {}
    try:
        prefs = await owner.update(
            quiet_hours=(
                None if args.quiet_hours is None else [q.model_dump() for q in args.quiet_hours]
            ),
            timezone=args.timezone,
            primary_channel=args.primary_channel,
        )
    except SettingsError as exc:
        raise ToolError(f"{exc}. Nothing was changed.") from None
    result: ToolResult = {"success": True, **settings_view(prefs, owner, ctx)}
    asked = {
        "quiet_hours": args.quiet_hours is not None,
        "timezone": args.timezone is not None,
        "primary_channel": args.primary_channel is not None,
    }
    same = [
        field
        for field, given in asked.items()
        if given and _value(old, field) == _value(prefs, field)
    ]
    if same:
        result["unchanged"] = same  # already so: the model need not tell the owner it changed
    if prefs.timezone != old.timezone:
        after = await _jobs_in(ctx, prefs.timezone)
        result["cron_jobs_moved"] = [name for job_id, name in before.items() if job_id in after]
    return result


MANAGE_SETTINGS: Tool[Any] = Tool(
    name="manage_settings",
    description=(
        "The owner's settings. Quiet hours hold info/warning alerts (sent when they end) "
        "and the pulse; critical alerts, cron jobs and reminders go out. get: no fields. "
        f"update: any of quiet_hours (HH:MM, at most {MAX_QUIET_WINDOWS} windows; [] = off), "
        "timezone (IANA), primary_channel."
    ),
    args=SettingsArgs,
    handler=_manage,
)
