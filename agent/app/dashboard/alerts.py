"""Alerts (``GET /alerts``): every alert, open and closed, with each escalation step and
who acknowledged it how; the Ack / Snooze 1h / Resolve buttons.

Ordered for a glance (``by_severity``): the unresolved first, critical before warning
before info, newest first within each; then the resolved, newest first.
``GET /live/alerts`` answers the list as JSON for ``static/live.js`` (see ``overview``).

The buttons go through the alert router's ``apply``, the same code as an "ack" reply
or ``manage_alerts``, recorded with ``by: dashboard``. The overview shows the open
alerts the same way (``open_alerts``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from aiohttp import web
from pymongo import DESCENDING

from agent.alerts.directives import Ack, Directive, Resolve, Snooze
from agent.alerts.router import AlertRouter
from agent.app.dashboard.context import BY, LIVE_SECONDS, Dashboard, channel_name, plain
from storage import collections as c

Doc = dict[str, Any]
ACTIONS: dict[str, tuple[str, Directive]] = {
    "ack": ("Ack", Ack()),
    "snooze": ("Snooze 1h", Snooze(timedelta(hours=1))),
    "resolve": ("Resolve", Resolve()),
}
"""The buttons, by the path segment they post to: label and directive."""
OPEN_SHOWN = 50
HISTORY_SHOWN = 100
SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


def by_severity(alerts: list[Doc]) -> list[Doc]:
    """Unresolved before resolved, then critical, warning, info, then newest first."""
    newest = sorted(alerts, key=lambda a: (a.get("created_at") is None, a.get("created_at")))
    newest.reverse()
    return sorted(
        newest,
        key=lambda a: (a.get("status") == "resolved", SEVERITY_RANK.get(str(a.get("severity")), 3)),
    )


def how(by: str | None) -> str:
    """Who did it and how, in words: ``SMS reply``, ``Telegram button``, ``dashboard``."""
    if not by:
        return "unknown"
    if by.startswith("owner via "):
        channel, _, kind = by.removeprefix("owner via ").partition(" ")
        return f"{channel_name(channel)} {kind or 'reply'}"
    if by.startswith("agent"):
        return f"the agent {by.removeprefix('agent').strip()}".strip()
    return by


def step_detail(step: Doc) -> str:
    """A step's detail in words: the channels a round went to by name (``Telegram, SMS``)."""
    detail = str(step.get("detail") or "")
    if step.get("action") in ("sent", "escalated"):
        return ", ".join(channel_name(part) for part in detail.split(", ") if part)
    return detail


def shown(alert: Doc) -> Doc:
    """What a template reads of an alert: fields plus ``steps`` (its history, oldest first,
    each with ``how``) and ``buttons`` (the actions that still apply)."""
    status = alert.get("status")
    steps = [
        {**step, "how": how(step.get("by")), "detail": step_detail(step)}
        for step in alert.get("history", [])
    ]
    buttons = []
    if status in ("open", "snoozed", "muted"):
        buttons.append(("ack", "Ack"))
    if status in ("open", "acknowledged"):
        buttons.append(("snooze", "Snooze 1h"))
    if status != "resolved":
        buttons.append(("resolve", "Resolve"))
    acked = alert.get("acknowledged_by")
    return {
        **{k: v for k, v in alert.items() if k != "_id"},
        "steps": steps,
        "buttons": buttons,
        "acknowledged_how": how(acked) if acked else None,
        "resolved_how": how(alert.get("resolved_by")) if alert.get("resolved_by") else None,
    }


def router_of(dash: Dashboard) -> AlertRouter | None:
    return dash.app.deps.alerts


async def open_alerts(dash: Dashboard) -> list[Doc] | None:
    """Unresolved alerts, worst first (``by_severity``); None when alerting is not running."""
    router = router_of(dash)
    if router is None:
        return None
    return [shown(a) for a in by_severity(await router.store.unresolved(OPEN_SHOWN))]


async def all_alerts(dash: Dashboard, limit: int = HISTORY_SHOWN) -> list[Doc]:
    """The latest ``limit`` alerts, open and closed, worst first (``by_severity``)."""
    cursor = dash.app.database.db[c.ALERTS].find({}, sort=[("created_at", DESCENDING)], limit=limit)
    return [shown(a) for a in by_severity(await cursor.to_list())]


def register_actions(router: web.UrlDispatcher, dash: Dashboard) -> None:
    async def act(request: web.Request) -> web.StreamResponse:
        alerts = router_of(dash)
        if alerts is None:
            return plain("alerts are not running", 503)
        code = request.match_info["code"]
        chosen = ACTIONS.get(request.match_info["action"])
        if chosen is None or not code.isdigit():
            return plain("unknown alert action", 404)
        form = await request.post()
        back = str(form.get("next") or "/")
        outcome = await alerts.apply(code, chosen[1], BY)
        return dash.done(request, back, outcome.text)

    dash.post(router, "/alerts/{code}/{action}", act)


def register(router: web.UrlDispatcher, dash: Dashboard) -> None:
    async def listed() -> Doc:
        return {"alerts": await all_alerts(dash), "running": dash.app.deps.alerts is not None}

    async def alerts_page(request: web.Request) -> web.StreamResponse:
        context = {**await listed(), "updated": dash.stamp(), "every": LIVE_SECONDS}
        return dash.render(request, "alerts.html", context)

    async def live(request: web.Request) -> web.StreamResponse:
        return dash.live(request, "_alerts_live.html", await listed())

    dash.get(router, "/alerts", alerts_page)
    dash.get(router, "/live/alerts", live)
    register_actions(router, dash)
