"""The monitors feature: http checks, heartbeats and page changes, without the model.

Runs beside the alert router (it needs it: a monitor that goes down raises an alert
through it, ``source`` ``monitor:<name>``, deduplicated by ``monitor:<id>``, so one
per monitor while it is down; what a ``change`` monitor's page says goes under
``monitor-change:<id>:<what>``, the page's words quoted as outside text, the alert
before it closed). When the monitor comes back the alert is resolved and
the owner is told how long it was down. A monitor that flaps gets one "flapping" alert
instead, and each monitor at most one message per five minutes
(``scheduler.monitors.news``). Contributes ``manage_monitor`` (the owner's chats and
cron runs, not the pulse), ``GET``/``POST /api/monitors``,
``DELETE /api/monitors/{id}`` (admin token, like every ``/api/*``), the pings
``GET``/``POST /ping/<token>`` and ``/ping/<token>/fail`` (no token but their own),
a ``monitors`` section of ``/api/status``, and the running service to the dashboard
(``Services.monitors``: its Monitors page acts through it). Each check is counted in
``monitor_checks`` (``storage.repos.monitor_checks``) for the page's uptime figures.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from aiohttp import web

from agent.alerts.directives import Resolve
from agent.alerts.router import AlertRouter
from agent.app.application import Feature, FeatureContext, Parts, Route, Services
from agent.context import RunContext
from agent.tools.monitors import SETTINGS, manage_monitor, monitor_view, ping_base
from channels.delivery.outbox import Outbox
from channels.types import OutboundMessage
from channels.webhook_body import BodyRefused, read_json_object
from scheduler.monitors.change import PageNews
from scheduler.monitors.check import down_for_text
from scheduler.monitors.monitor import MonitorLimits
from scheduler.monitors.service import Hooks, Monitors
from scheduler.monitors.store import MonitorStore
from storage.outside import Outside
from storage.repos.monitor_checks import CheckHistory
from storage.repos.monitor_record import Monitor, MonitorError, Reason
from storage.repos.monitors import MonitorRepo

log = logging.getLogger(__name__)
MAX_BODY = 16 * 1024
FIELDS = frozenset({"kind", *SETTINGS})


@dataclass(frozen=True)
class MonitoringOptions:
    limits: MonitorLimits = field(default_factory=MonitorLimits)
    """Tests shorten the minimum interval and the timeout here (never the tool or API)."""


def source_of(monitor: Monitor) -> str:
    return f"monitor:{monitor.name}"


def _hooks(router: AlertRouter, outbox: Outbox, ctx: FeatureContext) -> Hooks:
    async def down(monitor: Monitor, reason: Reason) -> str | None:
        where = monitor.url or "heartbeat"
        # The site's words are quoted as its own beside ours, never in place of them.
        said = reason if isinstance(reason, Outside) else None
        why = "its answer could not be accepted" if said is not None else reason
        alert = await router.raise_alert(
            severity=monitor.severity,
            title=f"{monitor.name} is down",
            body=f"{where}: {why}. I will say when it is back up.",
            dedupe_key=f"monitor:{monitor.id}",
            source=source_of(monitor),
            reason=said,
        )
        return alert.code

    async def up(monitor: Monitor, down_for: timedelta) -> None:
        code = monitor.alert_code
        told = True
        if code is not None:
            outcome = await router.apply(code, Resolve(), source_of(monitor))
            # Held by quiet hours and never sent: nothing to take back at night.
            told = outcome.alert is None or outcome.alert.last_sent_at is not None
        if not told:
            return
        closed = f" (alert #{code} resolved)" if code else ""
        again = "steady and up again" if monitor.told == "flapping" else "up again"
        text = f"✅ {monitor.name} is {again} after {down_for_text(down_for)}{closed}."
        since = monitor.down_since.isoformat() if monitor.down_since else "?"
        target = ctx.reach.chat(primary=ctx.owner.current.primary_channel)
        key = f"monitor-up:{monitor.id}:{since}"
        await outbox.enqueue(OutboundMessage(target.channel, target.chat_id, text, key))

    async def cleared(monitor: Monitor, why: str) -> None:
        if monitor.alert_code is not None:
            await router.apply(monitor.alert_code, Resolve(), f"{source_of(monitor)} ({why})")

    async def flapping(monitor: Monitor, how: str) -> str | None:
        where = monitor.url or "heartbeat"
        alert = await router.raise_alert(
            severity=monitor.severity,
            title=f"{monitor.name} is flapping",
            body=f"{where}: {how}. I will say when it is steady again.",
            dedupe_key=f"monitor:{monitor.id}",
            source=source_of(monitor),
        )
        return alert.code

    async def changed(monitor: Monitor, news: PageNews) -> str | None:
        if monitor.change_code is not None:  # what it said before is out of date
            await router.apply(monitor.change_code, Resolve(), f"{source_of(monitor)} (newer)")
        alert = await router.raise_alert(
            severity=monitor.severity,
            title=news.title,
            body=news.body,  # before and after: the page's words, quoted as such
            dedupe_key=f"monitor-change:{monitor.id}:{news.key}",
            source=source_of(monitor),
        )
        return alert.code

    return Hooks(down=down, up=up, cleared=cleared, flapping=flapping, changed=changed)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, default=str))


def _routes(monitors: Monitors, base: str, read_timeout: float) -> tuple[Route, ...]:
    """``base``: ``PUBLIC_BASE_URL`` or nothing, never the request's ``Host``."""

    async def listed(request: web.Request) -> web.Response:
        shown = [monitor_view(m, base) for m in monitors.all()]
        return _json({"monitors": shown, "count": len(shown)})

    async def created(request: web.Request) -> web.Response:
        try:
            data = await read_json_object(request, limit=MAX_BODY, within=read_timeout)
        except BodyRefused as exc:
            return _json({"error": exc.reason}, exc.status)
        unknown = sorted(str(k)[:40] for k in set(data) - FIELDS)
        if unknown:
            return _json({"error": f"unknown field(s): {', '.join(unknown[:5])}"}, 400)
        try:
            monitor = await monitors.create(data.get("kind"), data)
        except MonitorError as exc:
            return _json({"error": str(exc)}, 400)
        return _json(monitor_view(monitor, base), 201)

    async def deleted(request: web.Request) -> web.Response:
        try:
            monitor = await monitors.delete(request.match_info["monitor_id"])
        except MonitorError as exc:
            return _json({"error": str(exc)}, 404)
        return _json({"deleted": monitor.id, "name": monitor.name})

    def ping(fail: bool) -> Any:
        async def handler(request: web.Request) -> web.Response:
            if not await monitors.ping(request.match_info["token"], fail=fail):
                return web.Response(status=404, text="not found")
            return web.Response(text="OK")

        return handler

    return (
        ("GET", "/api/monitors", listed),
        ("POST", "/api/monitors", created),
        ("DELETE", "/api/monitors/{monitor_id}", deleted),
        *(
            (method, path, ping(fail))
            for method in ("GET", "POST")
            for path, fail in (("/ping/{token}", False), ("/ping/{token}/fail", True))
        ),
    )


def not_pulse(ctx: RunContext) -> bool:
    """The owner's chats and cron jobs (the owner's own words); not the pulse, which
    must not add or drop the owner's monitors on its own. Contacts never get it."""
    return ctx.kind != "pulse"


def monitoring(options: MonitoringOptions | None = None) -> Feature:
    """The feature with chosen options (tests: a short minimum interval)."""
    chosen = options or MonitoringOptions()

    async def feature(ctx: FeatureContext) -> AsyncIterator[Parts]:
        router = ctx.services.alerts
        if router is None:
            log.info("monitors: off (they alert through the alert router, which is not running)")
            yield Parts()
            return
        store = MonitorStore(MonitorRepo(ctx.database.db, ctx.clock), chosen.limits)
        # Checks run in the process that owns the transports (watchkeeper run) only.
        watching = ctx.exclusive_transports
        hooks = _hooks(router, ctx.outbox, ctx)
        history = CheckHistory(ctx.database.db)
        monitors = Monitors(store, hooks, ctx.clock, watching=watching, history=history)
        try:
            running = await monitors.start()
            if watching:
                log.info("monitors: %d running", running)
            else:
                log.info("monitors: checked by watchkeeper run, not here")
            base = ping_base(ctx.settings)
            read_timeout = ctx.settings.http_read_timeout_seconds

            async def status_section() -> dict[str, Any]:
                return {"monitors": [monitor_view(m, base) for m in monitors.all()]}

            yield Parts(
                tools=((manage_monitor(monitors, base), not_pulse),),
                routes=_routes(monitors, base, read_timeout),
                status=(status_section,),
                services=Services(monitors=monitors),
            )
        finally:
            await monitors.stop()

    return feature


monitoring_feature: Feature = monitoring()
"""The default monitors feature, as listed in ``agent.app.features.FEATURES``."""
