"""``manage_pulse``: the model's own heartbeat settings, notes, and a pulse on demand.

Settings are validated as a whole by the scheduler (``PulseStore``), notes over
2,000 characters are refused rather than cut, and ``run_now`` goes through the same
runner as a scheduled pulse (recorded, capped, time-boxed).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.context import RunContext
from agent.tools.base import Tool, ToolError, ToolResult
from scheduler.pulse_grid import PulseConfigError
from scheduler.pulse_state import PulseStore
from scheduler.views import pulse_view, run_view


class QuietRange(BaseModel):
    start: str = Field(description="HH:MM")
    end: str = Field(description="HH:MM; before start spans midnight")


class PulseArgs(BaseModel):
    action: Literal["get_config", "update_config", "update_notes", "run_now"]
    notes: str | None = Field(default=None, description="Notes for your next pulse, <=2000 chars.")
    enabled: bool | None = None
    active_days: list[int] | None = Field(default=None, description="0=Sunday..6")
    pulses_per_day: int | None = Field(default=None, description="48, 24, 12, 6 or 2")
    quiet_hours: list[QuietRange] | None = None


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
    view = run_view(run)
    keep = ("id", "status", "duration_ms", "tool_calls", "tokens", "result", "error")
    return {"run": {k: view.get(k) for k in keep}}


async def _manage(args: PulseArgs, ctx: RunContext) -> ToolResult:
    store = _store(ctx)
    try:
        if args.action == "get_config":
            return pulse_view(await store.get(), store.tz, ctx.now)
        if args.action == "update_notes":
            if args.notes is None:
                raise ToolError("update_notes needs 'notes' (an empty string clears them)")
            state = await store.update_notes(args.notes)
            return {"success": True, "action": "notes_updated", "length": len(state.notes)}
        if args.action == "run_now":
            return await _run_now(ctx)
        given = [args.enabled, args.active_days, args.pulses_per_day, args.quiet_hours]
        if all(value is None for value in given):
            raise ToolError(
                "update_config needs enabled, active_days, pulses_per_day or quiet_hours"
            )
        state = await store.update_config(
            enabled=args.enabled,
            active_days=args.active_days,
            pulses_per_day=args.pulses_per_day,
            quiet_hours=(
                None if args.quiet_hours is None else [q.model_dump() for q in args.quiet_hours]
            ),
        )
        return {
            "success": True,
            "action": "config_updated",
            "pulse": pulse_view(state, store.tz, ctx.now),
        }
    except PulseConfigError as exc:
        raise ToolError(str(exc)) from None


MANAGE_PULSE: Tool[Any] = Tool(
    name="manage_pulse",
    guidance=("manage_pulse: your periodic check-in; keep notes for the next pulse."),
    description=(
        "Your periodic check-in (pulse): read or change its settings, save notes for the "
        "next pulse, or run one now."
    ),
    args=PulseArgs,
    handler=_manage,
)
