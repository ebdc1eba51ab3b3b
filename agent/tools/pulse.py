"""``manage_pulse``: the model's own heartbeat settings, notes, and a pulse on demand.

Settings are validated as a whole by the scheduler (``PulseStore``), notes over
2,000 characters are refused rather than cut, and ``run_now`` goes through the same
runner as a scheduled pulse (recorded, capped, time-boxed).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from agent.context import RunContext
from agent.tools.base import Tool, ToolError, ToolResult
from scheduler.pulse.grid import PulseConfigError
from scheduler.pulse.store import PulseStore
from scheduler.views import pulse_view

QUIET_MOVED = (
    "quiet_hours is not a manage_pulse field any more: quiet hours are one owner setting "
    "for the pulse and alerts alike; set them with manage_settings (action 'update', "
    "quiet_hours). Nothing was changed."
)


MAX_TIME_CHARS = 40
REACHING = (
    "A pulse's final text is only logged: it messages the owner when it matters or its "
    "notes ask for it. For check-ins the owner asked for, say so with update_notes."
)
"""Said when the pulse is on and the owner did not ask for it (a job turned it on)."""
CHECKING_IN = (
    "Check-ins on: the owner asked, so each pulse's final answer is sent to them (an "
    "empty answer sends nothing). Turning the pulse off ends them."
)
"""Said when the owner's own exchange turned the pulse on, re-rated it or wrote notes."""


class PulseArgs(BaseModel):
    action: Literal["get_config", "update_config", "update_notes", "run_now"]
    notes: str | None = None
    enabled: bool | None = None
    active_days: list[int] | None = Field(default=None, description="0=Sunday..6")
    pulses_per_day: int | None = Field(
        default=None,
        description="1-48, spread evenly over the non-quiet hours of active days",
    )
    paused_until: str | None = Field(
        default=None, description="ISO 8601, owner's time: no pulse before it; '' ends a pause"
    )

    @model_validator(mode="before")
    @classmethod
    def _quiet_hours_moved(cls, data: Any) -> Any:
        # Unknown fields are otherwise ignored: the model must hear that this one moved.
        if isinstance(data, dict) and "quiet_hours" in data:
            raise ValueError(QUIET_MOVED)
        return data


def pause_of(text: str | None, store: PulseStore) -> datetime | Literal["unchanged"] | None:
    """``paused_until`` as given: "unchanged" when absent, None for '' (no pause), else
    the moment (a time without an offset is the owner's)."""
    if text is None:
        return "unchanged"
    if not text.strip():
        return None
    if len(text) > MAX_TIME_CHARS:
        raise ToolError(f"paused_until is at most {MAX_TIME_CHARS} characters")
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ToolError(
            f"paused_until {text!r} is not an ISO 8601 time, like 2026-05-04T07:00"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=store.tz)


def owner_asked(ctx: RunContext) -> bool:
    """Whether the owner's own words, in their chat, are behind this change: not a cron
    job or pulse, not a contact, and nothing outside has been read in this exchange."""
    return (
        ctx.kind == "chat"
        and ctx.tier == "owner"
        and ctx.owner_words is not None
        and not ctx.tally.untrusted
    )


def _store(ctx: RunContext) -> PulseStore:
    store = ctx.deps.pulse
    if store is None:
        raise ToolError("the scheduler is not running, so the pulse is unavailable")
    return store


async def _run_now(ctx: RunContext) -> ToolResult:
    if ctx.kind == "pulse":
        raise ToolError("run_now is not available inside a pulse")
    scheduler = ctx.deps.scheduler
    if scheduler is None:
        raise ToolError("the scheduler is not running")
    run = await scheduler.run_pulse_now("manual")
    view = run.to_json()
    keep = ("id", "status", "duration_ms", "tool_calls", "tokens", "result", "error")
    return {"run": {k: view.get(k) for k in keep}}


def _asks(args: PulseArgs) -> bool:
    """Turning the pulse on or choosing how often: the owner wants to hear from it."""
    return args.enabled is True or args.pulses_per_day is not None


async def _manage(args: PulseArgs, ctx: RunContext) -> ToolResult:
    store = _store(ctx)
    try:
        if args.action == "get_config":
            return pulse_view(await store.get(), store.tz, ctx.now)
        if args.action == "update_notes":
            if args.notes is None:
                raise ToolError("update_notes needs 'notes' (an empty string clears them)")
            asked = owner_asked(ctx) and bool(args.notes.strip())
            state = await store.update_notes(args.notes, check_ins=True if asked else None)
            return {
                "success": True,
                "action": "notes_updated",
                "length": len(state.notes),
                "check_ins": state.check_ins,
            }
        if args.action == "run_now":
            return await _run_now(ctx)
        given = [args.enabled, args.active_days, args.pulses_per_day, args.paused_until]
        if all(value is None for value in given):
            raise ToolError(
                "update_config needs enabled, active_days, pulses_per_day or paused_until "
                "(quiet hours are set with manage_settings)"
            )
        state = await store.update_config(
            enabled=args.enabled,
            active_days=args.active_days,
            pulses_per_day=args.pulses_per_day,
            paused_until=pause_of(args.paused_until, store),
            check_ins=True if owner_asked(ctx) and _asks(args) else None,
        )
        answer: ToolResult = {
            "success": True,
            "action": "config_updated",
            "pulse": pulse_view(state, store.tz, ctx.now),
        }
        if state.enabled:
            answer["note"] = CHECKING_IN if state.check_ins else REACHING
        return answer
    except PulseConfigError as exc:
        raise ToolError(str(exc)) from None


MANAGE_PULSE: Tool[Any] = Tool(
    name="manage_pulse",
    description=(
        "Your periodic check-in (pulse), never in quiet hours. get_config: settings and "
        "today's times; update_notes: notes every pulse reads until changed; update_config: "
        "the other fields."
    ),
    args=PulseArgs,
    handler=_manage,
    acting=lambda args: args.action != "get_config",
)
