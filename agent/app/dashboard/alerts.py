"""Alerts (``GET /alerts``): every alert, open and closed, with each escalation step and
who acknowledged it how; the Ack / Snooze 1h / Resolve buttons, and "Send a test page"
(``POST /alerts/page-test``: the test of ``watchkeeper page-test``, shown as a test).

Ordered for a glance (``by_severity``): the unresolved first, critical before warning
before info, newest first within each; then the resolved, newest first.
``GET /live/alerts`` answers the list as JSON for ``static/live.js`` (see ``overview``);
``GET /live/attention`` the unacknowledged critical alerts for every page (``attention``).

The buttons go through the alert router's ``apply``, the same code as an "ack" reply
or ``manage_alerts``, recorded with ``by: dashboard``. The overview shows the open
alerts the same way (``open_alerts``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from aiohttp import web

from agent.alerts.directives import Ack, Directive, Resolve, Snooze
from agent.alerts.page_test import PageTestError, PageTestTimes
from agent.alerts.router import AlertRouter
from agent.app.dashboard import attention
from agent.app.dashboard.context import BY, LIVE_SECONDS, Dashboard, channel_name, plain
from storage.repos.alert_record import Alert, Step
from storage.repos.alerts import AlertStore

ACTIONS: dict[str, tuple[str, Directive]] = {
    "ack": ("Ack", Ack()),
    "snooze": ("Snooze 1h", Snooze(timedelta(hours=1))),
    "resolve": ("Resolve", Resolve()),
}
"""The buttons, by the path segment they post to: label and directive."""
PAGE_TEST = "/alerts/page-test"
"""Where the alerts page's "Send a test page" button posts (``agent.alerts.page_test``)."""
OPEN_SHOWN = 50
HISTORY_SHOWN = 100
SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


STATUS_RANK = {"open": 0, "acknowledged": 1, "snoozed": 1, "muted": 1, "resolved": 2}
"""Within a severity: waiting for the owner, then acknowledged (or snoozed, muted)."""


def by_severity(alerts: list[Alert]) -> list[Alert]:
    """Unresolved before resolved, then critical, warning, info; within a severity the
    unacknowledged before the acknowledged; then newest first."""
    newest = sorted(alerts, key=lambda a: a.created_at, reverse=True)
    return sorted(
        newest,
        key=lambda a: (
            a.status == "resolved",
            SEVERITY_RANK.get(a.severity, 3),
            STATUS_RANK.get(a.status, 1),
        ),
    )


def how(by: str | None) -> str:
    """Who did it and how, in words: ``SMS reply``, ``Telegram button``, ``dashboard``,
    ``Watchkeeper`` for what the alert router did by itself (sent, escalated, held)."""
    if not by:
        return "unknown"
    if by == "router":
        return "Watchkeeper"
    if by.startswith("watchkeeper"):
        return "Watchkeeper" + by.removeprefix("watchkeeper")
    if by.startswith("owner via "):
        channel, _, kind = by.removeprefix("owner via ").partition(" ")
        return f"{channel_name(channel)} {kind or 'reply'}"
    if by.startswith("agent"):
        return f"the agent {by.removeprefix('agent').strip()}".strip()
    return by


@dataclass(frozen=True)
class ShownStep:
    """One step of an alert's history as the page shows it."""

    at: datetime
    action: str
    detail: str
    how: str


def step_detail(step: Step) -> str:
    """A step's detail in words: the channels a round went to by name (``Telegram, SMS``)."""
    detail = step.detail or ""
    if step.action in ("sent", "escalated"):
        return ", ".join(channel_name(part) for part in detail.split(", ") if part)
    return detail


@dataclass(frozen=True)
class AlertCard:
    """What a template reads of an alert (``_alert.html``): the alert, its history
    (oldest first, each with ``how``), the buttons that still apply, and who
    acknowledged or resolved it, in words."""

    alert: Alert
    steps: tuple[ShownStep, ...]
    buttons: tuple[tuple[str, str], ...]
    acknowledged_how: str | None
    resolved_how: str | None


def shown(alert: Alert) -> AlertCard:
    """``alert`` as the dashboard shows it."""
    status = alert.status
    steps = tuple(
        ShownStep(step.at, step.action, step_detail(step), how(step.by)) for step in alert.history
    )
    buttons = []
    if status in ("open", "snoozed", "muted"):
        buttons.append(("ack", "Ack"))
    if status in ("open", "acknowledged"):
        buttons.append(("snooze", "Snooze 1h"))
    if status != "resolved":
        buttons.append(("resolve", "Resolve"))
    acked, resolved = alert.acknowledged_by, alert.resolved_by
    return AlertCard(
        alert,
        steps,
        tuple(buttons),
        how(acked) if acked else None,
        how(resolved) if resolved else None,
    )


def router_of(dash: Dashboard) -> AlertRouter | None:
    return dash.app.deps.alerts


async def open_alerts(dash: Dashboard) -> list[AlertCard] | None:
    """Unresolved alerts, worst first (``by_severity``); None when alerting is not running."""
    router = router_of(dash)
    if router is None:
        return None
    return [shown(a) for a in by_severity(await router.store.unresolved(OPEN_SHOWN))]


async def all_alerts(dash: Dashboard, limit: int = HISTORY_SHOWN) -> list[AlertCard]:
    """The latest ``limit`` alerts, open and closed, worst first (``by_severity``)."""
    store = AlertStore(dash.app.database.db)
    return [shown(a) for a in by_severity(await store.latest(limit))]


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

    async def page_test(request: web.Request) -> web.StreamResponse:
        """The "Send a test page" button: the same test as ``watchkeeper page-test``."""
        alerts = router_of(dash)
        if alerts is None:
            return plain("alerts are not running", 503)
        try:
            alert = await alerts.page_tests.begin(PageTestTimes())
        except PageTestError as exc:
            return dash.done(request, "/alerts", f"No test page: {exc}.")
        text = (
            f"Test page #{alert.code} started: chat, then SMS, then a call, a minute apart "
            "until you acknowledge it. Its steps show below."
        )
        return dash.done(request, "/alerts", text)

    dash.post(router, PAGE_TEST, page_test)


def register(router: web.UrlDispatcher, dash: Dashboard) -> None:
    async def listed() -> dict[str, object]:
        return {"alerts": await all_alerts(dash), "running": dash.app.deps.alerts is not None}

    async def alerts_page(request: web.Request) -> web.StreamResponse:
        context = {**await listed(), "updated": dash.stamp(), "every": LIVE_SECONDS}
        return dash.render(request, "alerts.html", context)

    async def live(request: web.Request) -> web.StreamResponse:
        return dash.live(request, "_alerts_live.html", await listed())

    dash.get(router, "/alerts", alerts_page)
    dash.get(router, "/live/alerts", live)
    register_actions(router, dash)
    attention.register(router, dash)
