"""``raise_alert`` and ``manage_alerts``: the model's way to reach the owner urgently.

Both are thin shells over the alert router (``AgentDeps.alerts``), which
validates, dedupes and routes; argument names are fixed by DESIGN.md.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.alerts.directives import (
    NOTE_CHARS,
    Ack,
    Directive,
    Mute,
    Resolve,
    Snooze,
    parse_reply,
)
from agent.alerts.intake import AlertError
from agent.alerts.outcome import describe
from agent.alerts.policy import model_field
from agent.alerts.router import AlertRouter
from agent.context import RunContext
from agent.tools.base import Tool, ToolError, ToolResult
from agent.tools.held import read_sources
from storage.outside import Outside
from storage.repos.alert_record import Alert

Severity = Literal["info", "warning", "critical"]


class RaiseAlertArgs(BaseModel):
    severity: Severity = Field(
        description="info: chat; warning: chat, SMS after 30 min unacknowledged; both held in "
        "quiet hours. critical: SMS and all chats, even in quiet hours, repeated until acked."
    )
    title: str
    body: str = Field(default="", description="Details, what to do")
    dedupe_key: str | None = Field(default=None, description="Same key while open: not re-sent")


class ManageAlertsArgs(BaseModel):
    action: Literal["list", "ack", "resolve", "snooze", "mute"]
    code: str | None = None
    duration: str | None = Field(default=None, description="e.g. 30m, 2h, 1d")
    note: str | None = Field(default=None, max_length=NOTE_CHARS)


def alert_service(ctx: RunContext) -> AlertRouter:
    if ctx.deps.alerts is None:
        raise ToolError("alerts are not available right now")
    return ctx.deps.alerts


def source_of(ctx: RunContext) -> str:
    """Where an alert comes from: a cron job (so schedule replies can reach it), or not."""
    if ctx.kind == "cron" and ctx.job_id:
        return f"cron:{ctx.job_id}"
    return "pulse" if ctx.kind == "pulse" else "agent"


RANKS = ("info", "warning", "critical")
CRITICAL_WORDS = re.compile(
    r"\b(critical|urgent(ly)?|emergency|page me|call me|ring me|wake me)\b", re.IGNORECASE
)
WARNING_WORDS = re.compile(r"\bwarn(ing)?\b", re.IGNORECASE)
INFO_WORDS = re.compile(r"\binfo\b", re.IGNORECASE)


def severity_named(words: str) -> Severity:
    """The highest severity the owner's own words allow an alert raised after outside
    text: ``critical`` when they name it (critical, urgent, emergency, "call me", "page
    me", "wake me"), ``info`` when they name only info, else ``warning``: outside text
    never makes the phone ring unless the owner said it may."""
    if CRITICAL_WORDS.search(words):
        return "critical"
    if INFO_WORDS.search(words) and not WARNING_WORDS.search(words):
        return "info"
    return "warning"


async def _raise(args: RaiseAlertArgs, ctx: RunContext) -> ToolResult:
    """Raise the alert. After outside text (a run the owner's own words started: other
    runs are held before this), the severity is at most what the owner's words name and
    the title and body go out quoted, as written after reading that text."""
    severity: Severity = args.severity
    title: str | Outside = args.title
    body: str | Outside = args.body
    read = read_sources(ctx)
    lowered = ""
    if read:
        allowed = severity_named(ctx.owner_words or "")
        if RANKS.index(severity) > RANKS.index(allowed):
            lowered = (
                f"severity lowered from {severity} to {allowed}: this run read {read}, and "
                f"the owner's own words name no higher severity"
            )
            severity = allowed
        source = f"a run that read {read}"
        title, body = Outside(args.title, source), Outside(args.body, source)
    try:
        raised = await alert_service(ctx).raise_alert(
            severity=severity,
            title=title,
            body=body,
            dedupe_key=args.dedupe_key,
            source=source_of(ctx),
        )
    except AlertError as exc:
        raise ToolError(str(exc)) from None
    reply = describe(raised, ctx.now, ctx.tz)
    if lowered:
        reply["severity"] = lowered
    return reply


def _listed(alert: Alert) -> dict[str, Any]:
    """An open alert as ``list`` shows it: no internal counters to misread; outside
    words (a posted alert's title or source) in their block."""
    fields = {
        "code": alert.code,
        "severity": alert.severity,
        "title": model_field(alert, "title"),
        "status": alert.status,
        "source": model_field(alert, "source"),
        "count": alert.count,
        "created_at": alert.created_at,
        "last_sent_at": alert.last_sent_at,
        "snoozed_until": alert.snoozed_until,
        "muted_until": alert.muted_until,
        "note": alert.note,
    }
    shown = {k: v for k, v in fields.items() if v is not None}
    if alert.held:
        shown["held_until"] = alert.next_escalation_at
    return shown


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
        alerts = [_listed(alert) for alert in await service.open_alerts()]
        return {"alerts": alerts, "count": len(alerts)}
    code = (args.code or "").strip().lstrip("#")
    if not code:
        raise ToolError(f"code is required for {args.action}; use action 'list' to see codes")
    note = " ".join((args.note or "").split()) or None
    directive: Directive
    if args.action == "ack":
        directive = Ack(note=note)
    elif args.action == "resolve":
        directive = Resolve(note=note)
    elif note is not None:
        raise ToolError(f"a note is kept only with ack and resolve, not {args.action}")
    else:
        directive = _hold(args.action, args.duration)
    outcome = await service.apply(code, directive, f"agent ({ctx.kind})")
    if outcome.alert is None:
        raise ToolError(outcome.text)
    answer = {"result": outcome.text, "changed": outcome.changed, "status": outcome.alert.status}
    if outcome.changed and note is not None:
        answer["note"] = note
    return answer


def _alert_guidance(ctx: RunContext) -> str:
    """Says whether SMS can page at all, so no promise of an SMS is made without it."""
    if ctx.deps.reach.can_page():
        return "raise_alert: pick severity honestly (critical pages by SMS)."
    return "raise_alert: pick severity honestly (SMS is not set up: chats only)."


RAISE_ALERT: Tool[Any] = Tool(
    name="raise_alert",
    guidance_for=_alert_guidance,
    description="Alert the owner. The reply says where it went, what SMS did, held_until "
    "(quiet hours) and what comes next: relay that, promise nothing more.",
    args=RaiseAlertArgs,
    handler=_raise,
    owner_may=True,
)
MANAGE_ALERTS: Tool[Any] = Tool(
    name="manage_alerts",
    description="Open alerts. list: no fields; ack, resolve: code, optional note (the owner's "
    "words on its cause or fix); snooze, mute: code, optional duration (default 1h / "
    "1d; muted repeats are counted, not sent).",
    args=ManageAlertsArgs,
    handler=_manage,
    acting=lambda args: args.action != "list",
)
