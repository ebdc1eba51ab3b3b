"""``raise_alert`` and ``manage_alerts``: the model's way to reach the owner urgently.

Both are thin shells over the alert router (``AgentDeps.alerts``), which
validates, dedupes and routes; argument names are fixed by DESIGN.md.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.alerts.directives import Ack, Directive, Mute, Resolve, Snooze, parse_reply
from agent.alerts.fields import AlertError
from agent.alerts.router import AlertRouter
from agent.context import RunContext
from agent.tools.base import Tool, ToolError, ToolResult


class RaiseAlertArgs(BaseModel):
    severity: Literal["info", "warning", "critical"] = Field(
        description="info: chat only, held in quiet hours; warning: chat, SMS if not "
        "acknowledged in 30 min; critical: SMS and every chat now, repeated until acknowledged."
    )
    title: str = Field(description="One line the owner reads first (max 200 characters).")
    body: str = Field(default="", description="Details and what to do (max 4000 characters).")
    dedupe_key: str | None = Field(
        default=None,
        description="Same key while the alert is open: counted, not sent again.",
    )


class ManageAlertsArgs(BaseModel):
    action: Literal["list", "ack", "resolve", "snooze", "mute"]
    code: str | None = Field(default=None, description="The alert's code, e.g. '12' or '#12'.")
    duration: str | None = Field(
        default=None, description="For snooze/mute: e.g. '30m', '2h', '1d' (default 1h / 1d)."
    )


def alert_service(ctx: RunContext) -> AlertRouter:
    if ctx.deps.alerts is None:
        raise ToolError("alerts are not available right now")
    return ctx.deps.alerts


def source_of(ctx: RunContext) -> str:
    """Where an alert comes from: a cron job (so schedule replies can reach it), or not."""
    if ctx.kind == "cron" and ctx.job_id:
        return f"cron:{ctx.job_id}"
    return "pulse" if ctx.kind == "pulse" else "agent"


async def _raise(args: RaiseAlertArgs, ctx: RunContext) -> ToolResult:
    try:
        alert = await alert_service(ctx).raise_alert(
            severity=args.severity,
            title=args.title,
            body=args.body,
            dedupe_key=args.dedupe_key,
            source=source_of(ctx),
        )
    except AlertError as exc:
        raise ToolError(str(exc)) from None
    alert.pop("history", None)
    return {"alert": alert}


def _hold(action: str, duration: str | None) -> Directive:
    """Reuse the reply grammar, so "2h", "90 min" and "1d" mean what they mean in a reply."""
    parsed = parse_reply(f"{action} {duration}" if duration else action)
    if parsed.error:
        raise ToolError(parsed.error)
    if not isinstance(parsed.directive, Snooze | Mute):
        raise ToolError(f"duration {duration!r} is not a duration such as '30m', '2h' or '1d'")
    return parsed.directive


async def _manage(args: ManageAlertsArgs, ctx: RunContext) -> ToolResult:
    service = alert_service(ctx)
    if args.action == "list":
        alerts = await service.open_alerts()
        for alert in alerts:
            alert.pop("history", None)
        return {"alerts": alerts, "count": len(alerts)}
    code = (args.code or "").strip().lstrip("#")
    if not code:
        raise ToolError(f"code is required for {args.action}; use action 'list' to see codes")
    directive: Directive
    if args.action == "ack":
        directive = Ack()
    elif args.action == "resolve":
        directive = Resolve()
    else:
        directive = _hold(args.action, args.duration)
    outcome = await service.apply(code, directive, f"agent ({ctx.kind})")
    if outcome.alert is None:
        raise ToolError(outcome.text)
    return {"result": outcome.text, "changed": outcome.changed, "status": outcome.alert["status"]}


RAISE_ALERT: Tool[Any] = Tool(
    name="raise_alert",
    guidance=(
        "raise_alert when something needs the owner's attention; pick severity "
        "honestly (critical pages by SMS)."
    ),
    description="Alert the owner about something that needs their attention; routed by "
    "severity (critical pages by SMS until acknowledged).",
    args=RaiseAlertArgs,
    handler=_raise,
)
MANAGE_ALERTS: Tool[Any] = Tool(
    name="manage_alerts",
    description="List open alerts, or ack/resolve/snooze/mute one by its code.",
    args=ManageAlertsArgs,
    handler=_manage,
)
