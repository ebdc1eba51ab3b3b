"""Monitors: ``GET /monitors`` lists every monitor with its state (up, down, paused,
flapping), its uptime over 24 hours and 30 days, a response-time sparkline, its last
and next check (a heartbeat: its last ping and when it is late); ``POST /monitors``
creates one, ``GET``/``POST /monitors/<id>/edit`` changes one, ``POST
/monitors/<id>/pause``, ``/resume`` and ``/delete`` (asked once more first) act on one.
The list is live (``GET /live/monitors``, swapped in by ``static/live.js``).

The actions go through the running ``Monitors`` service (``App.monitors``), the calls
``manage_monitor`` makes, so a monitor is validated the same way and re-armed at once;
refused input is shown again beside the reason, nothing stored. A heartbeat's ping URL
holds its secret token: it is on the answer to its creation only (only a hash is
kept), masked afterwards. Flapping is the alert damping's own notion
(``scheduler.monitors.news.truth``). Uptime comes from ``monitor_checks``
(``storage.repos.monitor_checks``). A kind this page does not know is shown by the
fields it has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from aiohttp import web
from markupsafe import Markup

from agent.app.dashboard.context import LIVE_SECONDS, Dashboard
from agent.tools.monitors import SETTINGS, ping_base, ping_url
from scheduler.monitors.change import looked_for, missing_words
from scheduler.monitors.check import down_for_text
from scheduler.monitors.history import expected_pings, uptime
from scheduler.monitors.monitor import SEVERITIES, MonitorLimits
from scheduler.monitors.news import flap_text, truth
from scheduler.monitors.service import Monitors
from storage.repos.monitor_checks import CheckHistory, History
from storage.repos.monitor_record import HEARTBEAT_FIELDS, HTTP_FIELDS, KINDS, Monitor, MonitorError
from storage.repos.monitors import MonitorRepo

INTEGERS = frozenset(
    {
        "interval_seconds",
        "expect_status",
        "failures_before_alert",
        "period_seconds",
        "grace_seconds",
    }
)
LABELS: Mapping[str, str] = {
    "name": "Name",
    "url": "URL (http, change)",
    "interval_seconds": "Check every, seconds (http; change: at least 300)",
    "expect_status": "Expected status (http; empty: any 2xx or 3xx)",
    "keyword": "Text the page must hold (http); the text around it is compared (change)",
    "selector": "Part of the page compared (change): tag, .class, #id, descendants",
    "failures_before_alert": "Failed checks before an alert (http, change)",
    "period_seconds": "Pinged every, seconds (heartbeat)",
    "grace_seconds": "Grace, seconds (heartbeat)",
}
"""Form labels; a setting not named here (a newer kind's) gets its own name."""
CLEARED: Mapping[str, Any] = {"keyword": "", "expect_status": 0}
"""What an emptied field is sent as to clear it (``settle``: no keyword, any 2xx/3xx)."""
MASK = "••••••••"
NOT_RUNNING = "Monitors are not running (they need the alert router); nothing changed."
SPARK_W, SPARK_H = 120, 28


def percent(share: float | None) -> str:
    """``95.8%``; ``100%`` only when every check was good; ``–`` before any check."""
    if share is None:
        return "–"
    if share >= 1:
        return "100%"
    return f"{min(share * 100, 99.9):.1f}%"


def sparkline(times: Sequence[int | None]) -> Markup | None:
    """The latest response times as an inline SVG line (a failed check: a red tick at
    the bottom); None with no timed check."""
    timed = [t for t in times if t is not None]
    if not timed:
        return None
    top = max(max(timed), 1)
    step = SPARK_W / max(len(times) - 1, 1)
    points, ticks = [], []
    for i, t in enumerate(times):
        x = round(i * step, 1)
        if t is None:
            ticks.append(f'<line x1="{x}" y1="{SPARK_H}" x2="{x}" y2="{SPARK_H - 8}"/>')
        else:
            points.append(f"{x},{round(SPARK_H - 2 - (SPARK_H - 4) * t / top, 1)}")
    if len(points) == 1:
        points.append(points[0].replace(points[0].split(",")[0], str(SPARK_W), 1))
    ordered = sorted(timed)
    label = (
        f"response times of the last {len(times)} checks: median {ordered[len(ordered) // 2]} ms,"
        f" slowest {ordered[-1]} ms" + (f", {len(ticks)} failed" if ticks else "")
    )
    return Markup(
        f'<svg class="spark" viewBox="0 0 {SPARK_W} {SPARK_H}" width="{SPARK_W}" '
        f'height="{SPARK_H}" role="img" aria-label="{label}" '
        'xmlns="http://www.w3.org/2000/svg">'
        f"<title>{label}</title>"
        f'<polyline points="{" ".join(points)}" fill="none" stroke="currentColor" '
        'stroke-width="1.5"/>'
        f'<g stroke="#c62828" stroke-width="2">{"".join(ticks)}</g></svg>'
    )


def state_of(m: Monitor, now: datetime, limits: MonitorLimits) -> tuple[str, str, str | None]:
    """The state in a word, its badge class, and a detail (why down, how it flaps)."""
    if m.paused:
        return "paused", "muted", None
    word = truth(m.state, m.told, m.changes, now, limits.damping)
    if word == "flapping":
        return "flapping", "warn", flap_text(m.changes, now, limits.damping)
    if m.state == "down":
        since = f"down for {down_for_text(now - m.down_since)}" if m.down_since else "down"
        return "down", "bad", since + (f": {m.last_error}" if m.last_error else "")
    if m.state == "new":
        return ("no ping yet" if m.kind == "heartbeat" else "not checked yet"), "muted", None
    if m.failures:
        return "failing", "warn", f"{m.failures} failed check(s) in a row: {m.last_error}"
    if m.kind == "change" and not m.page_found:
        which, verb = missing_words(m)
        detail = f"{looked_for(m)} {verb} on the page (its layout may have changed)"
        return f"{which} {verb}", "warn", detail
    return "up", "ok", None


def seconds_text(seconds: int | None) -> str:
    return down_for_text(timedelta(seconds=seconds or 0))


def watches(m: Monitor) -> str:
    """What it watches, in words; a kind unknown here by its URL and interval."""
    if m.kind == "heartbeat":
        period, grace = seconds_text(m.period_seconds), seconds_text(m.grace_seconds)
        return f"expects a ping every {period} (grace {grace})"
    every = f"every {seconds_text(m.interval_seconds)}" if m.interval_seconds else ""
    what = f"{m.kind} check of {m.url}" if m.url else f"{m.kind} check"
    if m.kind == "change":
        part = looked_for(m) if m.selector or m.keyword else "the readable text"
        what = f"compares {part} of {m.url}"
    return " ".join(part for part in (what, every) if part)


def monitor_card(
    m: Monitor, history: History, now: datetime, limits: MonitorLimits, base: str
) -> dict[str, Any]:
    state, badge, detail = state_of(m, now, limits)
    heartbeat = m.kind == "heartbeat"
    day, month = history.day, history.month
    expect_day = expect_month = None
    if heartbeat and not m.paused:
        since = m.watch_from or m.created_at
        period = m.period_seconds or 0
        expect_day = expected_pings(period, since, now - timedelta(hours=24), now)
        expect_month = expected_pings(period, since, now - timedelta(days=30), now)
    if m.paused:
        next_check = None
    elif heartbeat:
        next_check = m.deadline()
    elif m.interval_seconds and m.last_check_at:
        next_check = m.last_check_at + timedelta(seconds=m.interval_seconds)
    else:
        next_check = now
    return {
        "id": m.id,
        "name": m.name,
        "kind": m.kind,
        "state": state,
        "badge": badge,
        "detail": detail,
        "watches": watches(m),
        "severity": m.severity,
        "paused": m.paused,
        "uptime_day": percent(uptime(day, expected=expect_day)),
        "uptime_month": percent(uptime(month, expected=expect_month)),
        "checks_day": max(day.checks, expect_day or 0),
        "checks_month": max(month.checks, expect_month or 0),
        "spark": None if heartbeat else sparkline(history.recent),
        "last_check": m.last_check_at,
        "next_check": next_check,
        "heartbeat": heartbeat,
        "last_ping": m.last_ping_at,
        "ping_url": ping_url(base, MASK) if heartbeat else None,
        "change": m.kind == "change",
        "last_change": m.changed_at,
        "baseline": m.page_hash is not None,
    }


def form_values(form: Mapping[str, Any]) -> dict[str, str]:
    """The form as typed (shown again beside an error: nothing typed is lost)."""
    return {k: v for k in ("kind", *SETTINGS) if isinstance(v := form.get(k), str)}


def settings_of(
    values: Mapping[str, str], current: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The settings a form gives. Editing (``current``: the stored values as the form
    showed them), only the fields changed: a keyword or an expected status emptied is
    cleared, any other field emptied is kept. A number that is not one is a
    ``MonitorError`` naming the field."""
    given: dict[str, Any] = {}
    for name in SETTINGS:
        raw = values.get(name, "").strip()
        if current is not None and raw == current.get(name, "").strip():
            continue
        if not raw:
            if current is not None and name in CLEARED:
                given[name] = CLEARED[name]
            continue
        if name in INTEGERS:
            if not raw.isdigit():
                raise MonitorError(f"{name} must be a whole number; got {raw[:20]!r}")
            given[name] = int(raw)
        else:
            given[name] = raw
    return given


def edit_values(m: Monitor) -> dict[str, str]:
    values: dict[str, str] = {"kind": m.kind}
    for name in SETTINGS:
        value = getattr(m, name, None)
        values[name] = "" if value is None else str(value)
    return values


def fields_for(kind: str | None) -> list[tuple[str, str, bool]]:
    """(name, label, numeric) of each setting a form shows: all of them to create,
    the ones that apply to ``kind`` to edit."""
    elsewhere = {None: (), "heartbeat": HTTP_FIELDS}.get(kind, HEARTBEAT_FIELDS)
    return [
        (name, LABELS.get(name, name.replace("_", " ").capitalize()), name in INTEGERS)
        for name in SETTINGS
        if name != "severity" and name not in elsewhere  # severity: a list of its own
    ]


def register(router: web.UrlDispatcher, dash: Dashboard) -> None:
    def service() -> Monitors | None:
        return dash.app.monitors

    def limits() -> MonitorLimits:
        running = service()
        return running.limits if running is not None else MonitorLimits()

    async def cards() -> dict[str, Any]:
        """What the live part shows: every monitor as stored, with its figures."""
        now = dash.now()
        monitors = await MonitorRepo(dash.app.deps.db, dash.now).all()
        figures = await CheckHistory(dash.app.deps.db).read((m.id for m in monitors), now)
        base = ping_base(dash.app.settings)
        shown = [monitor_card(m, figures[m.id], now, limits(), base) for m in monitors]
        return {"monitors": shown, "running": service() is not None}

    async def listing(
        request: web.Request,
        *,
        error: str | None = None,
        values: Mapping[str, str] | None = None,
        created: dict[str, Any] | None = None,
        status: int = 200,
    ) -> web.StreamResponse:
        context = {
            **await cards(),
            "updated": dash.stamp(),
            "every": LIVE_SECONDS,
            "error": error,
            "values": values or {"kind": "http", "severity": "warning"},
            "fields": fields_for(None),
            "kinds": KINDS,
            "severities": SEVERITIES,
            "created": created,
        }
        return dash.render(request, "monitors.html", context, status=status)

    async def page(request: web.Request) -> web.StreamResponse:
        return await listing(request)

    async def live(request: web.Request) -> web.StreamResponse:
        return dash.live(request, "_monitors_live.html", await cards())

    async def create(request: web.Request) -> web.StreamResponse:
        running = service()
        if running is None:
            return dash.done(request, "/monitors", NOT_RUNNING)
        values = form_values(await request.post())
        try:
            monitor = await running.create(values.get("kind"), settings_of(values))
        except MonitorError as exc:
            return await listing(request, error=str(exc), values=values, status=400)
        if monitor.token is None:
            return dash.done(request, "/monitors", f"Created “{monitor.name}”.")
        base = ping_base(dash.app.settings)
        created = {"name": monitor.name, "ping_url": ping_url(base, monitor.token), "base": base}
        return await listing(request, created=created)

    async def edit_page(request: web.Request) -> web.StreamResponse:
        running = service()
        try:
            monitor = await MonitorRepo(dash.app.deps.db, dash.now).find(
                request.match_info["monitor_id"]
            )
        except MonitorError as exc:
            return dash.done(request, "/monitors", f"Nothing to edit: {exc}")
        return edit_form(request, monitor, edit_values(monitor), None, running is not None)

    def edit_form(
        request: web.Request,
        monitor: Monitor,
        values: Mapping[str, str],
        error: str | None,
        running: bool,
    ) -> web.StreamResponse:
        context = {
            "monitor": monitor,
            "values": values,
            "error": error,
            "fields": fields_for(monitor.kind),
            "severities": SEVERITIES,
            "running": running,
        }
        return dash.render(request, "monitor_edit.html", context, status=400 if error else 200)

    async def edit(request: web.Request) -> web.StreamResponse:
        running = service()
        if running is None:
            return dash.done(request, "/monitors", NOT_RUNNING)
        monitor_id = request.match_info["monitor_id"]
        values = form_values(await request.post())
        try:
            monitor = await running.repo.find(monitor_id)
        except MonitorError as exc:
            return dash.done(request, "/monitors", f"Nothing changed: {exc}")
        try:
            given = settings_of(values, edit_values(monitor))
            changed = await running.update(monitor.id, given)
        except MonitorError as exc:
            return edit_form(request, monitor, {**values, "kind": monitor.kind}, str(exc), True)
        return dash.done(request, "/monitors", f"Saved “{changed.name}”.")

    async def act(request: web.Request, action: str) -> web.StreamResponse:
        running = service()
        if running is None:
            return dash.done(request, "/monitors", NOT_RUNNING)
        monitor_id = request.match_info["monitor_id"]
        try:
            if action == "pause":
                monitor = await running.pause(monitor_id)
                text = f"Paused “{monitor.name}”: no checks and no alerts until resumed."
            elif action == "resume":
                monitor = await running.resume(monitor_id)
                text = f"Resumed “{monitor.name}”."
            else:
                form = await request.post()
                if form.get("confirm") != "yes":
                    monitor = await running.repo.find(monitor_id)
                    return dash.render(request, "monitor_delete.html", {"monitor": monitor})
                monitor = await running.delete(monitor_id)
                text = f"Deleted “{monitor.name}” and its history."
        except MonitorError as exc:
            text = f"Nothing changed: {exc}"
        return dash.done(request, "/monitors", text)

    async def pause(request: web.Request) -> web.StreamResponse:
        return await act(request, "pause")

    async def resume(request: web.Request) -> web.StreamResponse:
        return await act(request, "resume")

    async def delete(request: web.Request) -> web.StreamResponse:
        return await act(request, "delete")

    dash.get(router, "/monitors", page)
    dash.get(router, "/live/monitors", live)
    dash.post(router, "/monitors", create)
    dash.get(router, "/monitors/{monitor_id}/edit", edit_page)
    dash.post(router, "/monitors/{monitor_id}/edit", edit)
    dash.post(router, "/monitors/{monitor_id}/pause", pause)
    dash.post(router, "/monitors/{monitor_id}/resume", resume)
    dash.post(router, "/monitors/{monitor_id}/delete", delete)
