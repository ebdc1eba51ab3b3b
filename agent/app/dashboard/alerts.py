"""Alerts (``GET /alerts``): every alert, open and closed, with each escalation step and
who acknowledged it how; the Ack / Snooze 1h / Resolve actions."""

from __future__ import annotations

from aiohttp import web

from agent.app.dashboard.alert_actions import all_alerts, register_actions
from agent.app.dashboard.context import Dashboard


def register(router: web.UrlDispatcher, dash: Dashboard) -> None:
    async def alerts_page(request: web.Request) -> web.StreamResponse:
        running = dash.app.deps.alerts is not None
        return dash.render(
            request, "alerts.html", {"alerts": await all_alerts(dash), "running": running}
        )

    dash.get(router, "/alerts", alerts_page)
    register_actions(router, dash)
