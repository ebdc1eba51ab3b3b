"""Overview (``GET /``): the status line first, then the open alerts (worst first), every
part's health in one panel, the pulse today, the next cron fires and the monitors.

The status line names the worst thing first (``problems``): an unreachable database,
what stops a page (no chat reaching the owner, the model unreachable, SMS failing or not
set up: a critical alert cannot page the owner), a critical alert open, a channel down,
a monitor down, the scheduler late, an MCP server failing, then warnings and the rest
(a test page running among them, never counted as an alert); "All clear" when nothing
is open and every part is well.

The health is ``agent.app.healthcheck``'s (the same collection ``/healthz`` and the
dead man's switch read), with what only the dashboard may show beside it: whether SMS
can page the owner and ring (``agent.reach.Reach.can_page``, the calls' status) and the
monitors by name.

``GET /live/overview`` answers JSON for ``static/live.js``: ``html`` (the page's live
part, rendered by the same template) and ``updated`` (the stamp), so the page follows
without a reload.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypedDict

from aiohttp import web

from agent.alerts.calls import CallsStatus
from agent.app.dashboard.alerts import AlertCard, open_alerts
from agent.app.dashboard.context import LIVE_SECONDS, Dashboard, channel_name, human_time
from agent.app.healthcheck import Component, Health
from scheduler.views import pulse_view, quiet_text
from storage.outside import Outside
from storage.repos.alert_record import Alert
from storage.repos.monitor_record import Monitor
from storage.repos.monitors import MonitorRepo

Shown = Callable[[datetime | None], str]
"""A moment in words (``human_time`` in the owner's timezone, from now)."""
Level = Literal["critical", "bad", "warn", "info", "ok", "muted"]
LEVELS: tuple[Level, ...] = ("critical", "bad", "warn", "info", "ok", "muted")
"""Worst first."""
NEXT_FIRES = 8
NO_SMS = "SMS not set up: critical alerts cannot page you"
NO_WAY = "no chat or SMS reaches you: alerts reach nobody"
NO_CHAT = "no chat reaches you: only SMS pages get to you"
SMS_FAILING = "SMS failing: critical alerts cannot page you"
MCP_WORDS = {"connected": "connected", "starting": "starting", "restarting": "restarting"}


@dataclass(frozen=True)
class Problem:
    """One thing not well; the lowest ``rank`` leads the status line."""

    rank: int
    level: Level
    text: str


@dataclass(frozen=True)
class Part:
    """One row of the health panel."""

    name: str
    state: str
    level: Level
    detail: str = ""


@dataclass(frozen=True)
class SmsPaging:
    """Whether a page can go by SMS, and whether critical alerts ring the owner."""

    ready: bool
    calls: CallsStatus | None
    """None: alerting is not running."""
    failing: str | None = None
    """Why the last SMS or call Twilio was asked for failed (None: it went, or none yet)."""


class StatusLine(TypedDict):
    """The status line: the worst thing first, its colour, and the rest in order."""

    text: str
    level: Level
    more: list[str]


class PulseSummary(TypedDict):
    """The pulse today, as the overview shows it."""

    enabled: bool
    per_day: int
    spacing: str | None
    done_today: int
    past: list[str]
    """Today's slot times so far (``HH:MM``)."""
    left: list[str]
    next: datetime | None
    quiet: str


class Fire(TypedDict):
    """A cron job's next fire."""

    job_id: str
    name: str
    at: datetime
    once: bool


class MonitorRow(TypedDict):
    """A monitor in words (``monitor_row``)."""

    id: str
    name: str
    state: str
    level: Level
    ok: bool
    detail: str
    since: datetime | None
    checked: datetime | None
    error: str | Outside | None
    """Why it is down (words from outside: shown escaped)."""


class Glance(TypedDict):
    """Everything the overview's live part shows (``glance``)."""

    status: StatusLine
    parts: list[Part]
    pulse: PulseSummary | None
    fires: list[Fire] | None
    alerts: list[AlertCard] | None
    monitors: list[MonitorRow]


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def alert_problems(alerts: list[Alert]) -> list[Problem]:
    """Unacknowledged alerts by severity, each count saying what it counts; those the
    owner acknowledged, snoozed or muted last. A test page running is said as such, after
    every real problem, and counted in none of them: at 3 a.m. it is no critical alert."""
    found = [Problem(65, "info", f"test page #{a.code} running") for a in alerts if a.test]
    alerts = [a for a in alerts if not a.test]
    opened = [a for a in alerts if a.status == "open"]
    ranked: tuple[tuple[int, str, Level], ...] = (
        (10, "critical", "critical"),
        (45, "warning", "warn"),
    )
    for rank, severity, level in ranked:
        count = sum(a.severity == severity for a in opened)
        if count:
            text = f"{plural(count, severity + ' alert')} not acknowledged"
            found.append(Problem(rank, level, text))
    infos = sum(a.severity not in ("critical", "warning") for a in opened)
    if infos:
        found.append(Problem(70, "info", f"{plural(infos, 'info alert')} not acknowledged"))
    for status, words in (("acknowledged", "acknowledged, not resolved"), ("snoozed", "snoozed"),
                          ("muted", "muted")):  # fmt: skip
        count = sum(a.status == status for a in alerts)
        if count:
            found.append(Problem(75, "info", f"{plural(count, 'alert')} {words}"))
    return found


def health_problems(
    health: Health,
    sms_ready: bool,
    monitors: list[Monitor],
    sms_failing: str | None = None,
    chat: bool = True,
) -> list[Problem]:
    """What is not well among the parts, each with its rank (``sms_failing``: why the
    last page by SMS or call failed; ``chat``: whether any chat reaches the owner)."""
    found = []
    if not health.database_ok:
        found.append(Problem(0, "critical", f"database {health.db}"))
    # What stops a page comes first (ranks under 10), before the open alerts.
    if not chat:
        found.append(Problem(1, "bad", NO_CHAT) if sms_ready else Problem(1, "bad", NO_WAY))
    elif not sms_ready:
        found.append(Problem(6, "bad", NO_SMS))
    elif sms_failing:
        found.append(Problem(5, "bad", f"{SMS_FAILING} ({sms_failing})"))
    none_up = bool(health.channels) and all(c.state == "down" for c in health.channels.values())
    for name, comp in sorted(health.channels.items()):
        if comp.state == "down":
            found.append(Problem(3 if none_up else 25, "bad", f"{channel_name(name)} down"))
    for monitor in monitors:
        if monitor.state == "down" and not monitor.paused:
            found.append(Problem(35, "bad", f"monitor {monitor.name} down"))
    if health.scheduler.state == "down":
        engine = health.scheduler.detail.get("engine")
        late = bool(health.scheduler.detail.get("overdue"))
        found.append(Problem(30, "bad", "scheduler late" if late else f"scheduler {engine}"))
    if health.others.get("model", Component("unknown")).state == "degraded":
        found.append(Problem(2, "bad", "model unreachable"))
    servers = health.others.get("mcp", Component("off")).detail.get("servers", {})
    for name, state in sorted(servers.items()):
        if state != "connected":
            found.append(Problem(50, "warn", f"MCP server {name} {mcp_word(state)}"))
    outbox = health.others.get("outbox", Component("unknown"))
    if outbox.state == "degraded":
        pending = int(outbox.detail.get("pending") or 0)
        found.append(Problem(55, "warn", f"{plural(pending, 'message')} waiting to be sent"))
    return found


def mcp_word(state: str) -> str:
    return MCP_WORDS.get(state, "failing" if state == "failed" else state)


def status_line(problems: list[Problem]) -> StatusLine:
    """``text`` (the worst first), ``level`` and ``more`` (the rest, in order)."""
    if not problems:
        return {"text": "All clear", "level": "ok", "more": []}
    ordered = sorted(problems, key=lambda p: p.rank)
    level = min((p.level for p in ordered), key=LEVELS.index)  # the colour: the worst
    return {"text": ordered[0].text, "level": level, "more": [p.text for p in ordered[1:]]}


def moment(value: Any) -> datetime | None:
    """A time from ``Health`` (ISO text, as ``/healthz`` shows it), or None."""
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def health_parts(
    health: Health, sms: SmsPaging, monitors: list[Monitor], shown: Shown
) -> list[Part]:
    """The panel's rows; ``shown`` turns a moment into words (``human_time``)."""
    parts: list[Part] = []
    model = health.others.get("model", Component("unknown"))
    ok_at, error_at = model.detail.get("last_success_at"), model.detail.get("last_error_at")
    seen = f"last success {shown(moment(ok_at))}"
    if error_at:
        seen += f" · last error {shown(moment(error_at))}"
    if model.state == "degraded":
        parts.append(Part("Model", "unreachable", "bad", seen))
    elif model.state == "ok":
        parts.append(Part("Model", "ok", "ok", seen))
    else:
        parts.append(Part("Model", "not used yet", "muted", "no cron or pulse run so far"))
    db_level: Level = "ok" if health.database_ok else "critical"
    parts.append(Part("Database", health.db, db_level))
    for name, comp in sorted(health.channels.items()):
        up = comp.state == "ok"
        mode = str(comp.detail.get("mode") or "")
        parts.append(Part(channel_name(name), "up" if up else "down", "ok" if up else "bad", mode))
    call_text = f"phone {sms.calls.words()}" if sms.calls is not None else ""
    if sms.ready and sms.failing:
        parts.append(Part("SMS paging", "failing", "bad", f"last try: {sms.failing}"))
    elif sms.ready:
        parts.append(Part("SMS paging", "ready", "ok", call_text))
    else:
        parts.append(Part("SMS paging", "not set up", "bad", "critical alerts cannot page you"))
    mcp = health.others.get("mcp", Component("off"))
    for name, state in sorted(mcp.detail.get("servers", {}).items()):
        level: Level = "ok" if state == "connected" else "warn"
        parts.append(Part(f"MCP {name}", mcp_word(state), level))
    parts.append(scheduler_part(health.scheduler, shown))
    outbox = health.others.get("outbox", Component("unknown"))
    pending, failed = int(outbox.detail.get("pending") or 0), int(outbox.detail.get("failed") or 0)
    backlog = f"{pending} waiting" + (f", {failed} could not be sent" if failed else "")
    if outbox.detail.get("oldest_pending_at"):
        backlog += f", oldest {shown(moment(outbox.detail['oldest_pending_at']))}"
    if outbox.state == "degraded":
        parts.append(Part("Outbox", "late", "warn", backlog))
    else:
        out_level: Level = "ok" if outbox.state == "ok" else "muted"
        parts.append(Part("Outbox", outbox.state, out_level, backlog))
    parts.append(monitors_part(monitors))
    return parts


def scheduler_part(comp: Component, shown: Shown) -> Part:
    if comp.state == "off":
        return Part("Scheduler", "off", "muted")
    if comp.state == "unknown":
        return Part("Scheduler", "unknown", "muted")
    wake = moment(comp.detail.get("next_fire_at"))
    detail = f"next fire {shown(wake)}" if wake else "nothing scheduled"
    overdue = comp.detail.get("overdue") or []
    if overdue:
        first = overdue[0]
        what = "the pulse" if first.get("kind") == "pulse" else "a cron job"
        detail = f"{what} due {shown(moment(first.get('due_at')))} has not run"
        if len(overdue) > 1:
            detail += f" (and {len(overdue) - 1} more)"
        return Part("Scheduler", "late", "bad", detail)
    if comp.state != "ok":
        return Part("Scheduler", str(comp.detail.get("engine") or comp.state), "bad", detail)
    return Part("Scheduler", "on time", "ok", detail)


def monitors_part(monitors: list[Monitor]) -> Part:
    if not monitors:
        return Part("Monitors", "none", "muted", "ask in chat to watch a site or a heartbeat")
    down = [m.name for m in monitors if m.state == "down" and not m.paused]
    up = sum(m.state == "up" and not m.paused for m in monitors)
    paused = sum(m.paused for m in monitors)
    words = ([f"{up} up"] if up else []) + ([f"{paused} paused"] if paused else [])
    if down:
        return Part("Monitors", f"{len(down)} down", "bad", ", ".join(down + words))
    return Part("Monitors", "all up" if up == len(monitors) else "ok", "ok", ", ".join(words))


async def pulse_summary(dash: Dashboard, now: datetime) -> PulseSummary | None:
    pulse = dash.app.deps.pulse
    if pulse is None:
        return None
    state = await pulse.get()
    view = pulse_view(state, dash.tz, now)
    quiet = dash.app.deps.owner.current.quiet_hours
    return {
        "enabled": view["enabled"],
        "per_day": view["pulses_per_day"],
        "spacing": view["spacing"],
        "done_today": view["done_today"],
        "past": [t[11:16] for t in view["today"]["slots_passed"]],
        "left": [t[11:16] for t in view["today"]["slots_left"]],
        "next": state.next_pulse_at if state.enabled else None,
        "quiet": quiet_text(quiet),
    }


async def next_fires(dash: Dashboard, now: datetime) -> list[Fire] | None:
    """The soonest fires of enabled jobs, soonest first."""
    cron = dash.app.deps.cron
    if cron is None:
        return None
    fires: list[Fire] = []
    for job in await cron.list_jobs():
        if not job.enabled or job.done:
            continue
        when = job.next_fire_at or job.run_at
        if when is not None:
            fires.append(Fire(job_id=job.id, name=job.name, at=when, once=job.once))
    fires.sort(key=lambda f: f["at"].timestamp())
    return fires[:NEXT_FIRES]


def monitor_row(m: Monitor) -> MonitorRow:
    """A monitor in words: its state, what it watches, since when it is down."""
    first = "no ping yet" if m.kind == "heartbeat" else "not checked yet"
    state = "paused" if m.paused else first if m.state == "new" else m.state
    level: Level = "muted" if m.paused or m.state == "new" else "ok" if m.state == "up" else "bad"
    if m.kind == "http":
        watches = f"checks {m.url} every {m.interval_seconds or 0} s"
    elif m.kind == "change":
        watches = f"compares {m.url} every {m.interval_seconds or 0} s"
    else:
        watches = f"expects a ping every {m.period_seconds or 0} s"
    down = m.state == "down" and not m.paused
    return {
        "id": m.id,
        "name": m.name,
        "state": state,
        "level": level,
        "ok": m.paused or m.state != "down",
        "detail": watches,
        "since": m.down_since if down else None,
        "checked": m.last_check_at or m.last_ping_at,
        "error": m.last_error if down else None,
    }


async def monitors_of(dash: Dashboard) -> list[Monitor]:
    """Every monitor as stored (a small list; issue 30)."""
    return await MonitorRepo(dash.app.deps.db, dash.now).all()


async def glance(dash: Dashboard) -> Glance:
    """Everything the overview's live part shows."""
    now = dash.now()
    health = await dash.health.read()
    alerts = await open_alerts(dash) if health.database_ok else None
    monitors = await monitors_of(dash) if health.database_ok else []
    router = dash.app.deps.alerts
    pager = dash.app.deps.reach.pager()
    ready = pager is not None
    failing = None
    if pager is not None and pager.channel in dash.app.channels:
        failing = dash.app.channels[pager.channel].status().get("last_error")
    sms = SmsPaging(ready, router.calls.status() if router is not None else None, failing)
    opened = [card.alert for card in alerts or []]
    chat = bool(dash.app.deps.reach.chats())
    problems = alert_problems(opened) + health_problems(health, ready, monitors, failing, chat)

    def shown(at: datetime | None) -> str:
        return human_time(at, dash.tz, now)

    return {
        "status": status_line(problems),
        "parts": health_parts(health, sms, monitors, shown),
        "pulse": await pulse_summary(dash, now) if health.database_ok else None,
        "fires": await next_fires(dash, now) if health.database_ok else None,
        "alerts": alerts,
        "monitors": [monitor_row(m) for m in monitors],
    }


def register(router: web.UrlDispatcher, dash: Dashboard) -> None:
    async def overview(request: web.Request) -> web.StreamResponse:
        context = {**await glance(dash), "updated": dash.stamp(), "every": LIVE_SECONDS}
        return dash.render(request, "overview.html", context)

    async def live(request: web.Request) -> web.StreamResponse:
        return dash.live(request, "_overview_live.html", await glance(dash))

    dash.get(router, "/", overview)
    dash.get(router, "/live/overview", live)
