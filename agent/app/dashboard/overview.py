"""Overview (``GET /``): channels, the pulse today, the next cron fires, open alerts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aiohttp import web

from agent.app.dashboard.alerts import open_alerts
from agent.app.dashboard.context import Dashboard
from scheduler.monitors import MonitorLimits, MonitorStore
from scheduler.views import pulse_view, quiet_text

Doc = dict[str, Any]
NEXT_FIRES = 8


def channel_rows(dash: Dashboard) -> list[Doc]:
    """Each running channel with its state (``up``/``down`` or what it reports)."""
    rows = []
    for name, status in sorted(dash.app.status().items()):
        connected = bool(status.get("connected", True))
        state = str(status.get("state") or ("up" if connected else "down"))
        detail = ", ".join(
            f"{k}: {v}" for k, v in status.items() if k in ("mode", "bot", "session") and v
        )
        rows.append({"name": name, "state": state, "ok": connected, "detail": detail})
    return rows


async def pulse_summary(dash: Dashboard, now: datetime) -> Doc | None:
    pulse = dash.app.deps.pulse
    if pulse is None:
        return None
    view = pulse_view(await pulse.get(), dash.tz, now)
    quiet = dash.app.deps.owner.current.quiet_dicts()
    return {
        "enabled": view["enabled"],
        "per_day": view["pulses_per_day"],
        "spacing": view["spacing"],
        "done_today": view["done_today"],
        "past": [t[11:16] for t in view["today"]["slots_passed"]],
        "left": [t[11:16] for t in view["today"]["slots_left"]],
        "next": view["next_pulse_at"],
        "quiet": quiet_text(quiet),
    }


async def next_fires(dash: Dashboard, now: datetime) -> list[Doc] | None:
    """The soonest fires of enabled jobs, soonest first."""
    cron = dash.app.deps.cron
    if cron is None:
        return None
    fires: list[Doc] = []
    for job in await cron.list_jobs():
        if not job.enabled or job.done:
            continue
        when = job.next_fire_at or job.run_at
        if when is not None:
            fires.append({"job_id": job.id, "name": job.name, "at": when, "once": job.once})
    fires.sort(key=lambda f: f["at"].timestamp())
    return fires[:NEXT_FIRES]


async def monitor_rows(dash: Dashboard) -> list[Doc]:
    """Each monitor with its state, as stored (a small list; issue 30)."""
    store = MonitorStore(dash.app.deps.db, dash.now, MonitorLimits())
    return [
        {
            "name": m.name,
            "state": "paused" if m.paused else m.state,
            "ok": m.paused or m.state != "down",
            "detail": m.url if m.kind == "http" else "heartbeat",
            "since": m.down_since if m.state == "down" and not m.paused else None,
        }
        for m in await store.all()
    ]


def register(router: web.UrlDispatcher, dash: Dashboard) -> None:
    async def overview(request: web.Request) -> web.StreamResponse:
        now = dash.now()
        context = {
            "channels": channel_rows(dash),
            "pulse": await pulse_summary(dash, now),
            "fires": await next_fires(dash, now),
            "alerts": await open_alerts(dash),
            "monitors": await monitor_rows(dash),
        }
        return dash.render(request, "overview.html", context)

    dash.get(router, "/", overview)
