"""``manage_monitor``: uptime checks, heartbeats and page changes, without the model.

A thin shell over ``scheduler.monitors.Monitors``, which validates, stores and runs
them; the tool is made by the monitors feature around its running service (it
exists only while that service runs). ``monitor_view`` is what the tool, the HTTP API
and the dashboard show of a monitor.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.config import Settings
from agent.context import RunContext
from agent.llm.untrusted import for_model
from agent.tools.base import Tool, ToolError, ToolResult
from scheduler.monitors.service import Monitors
from storage.repos.monitor_record import Monitor, MonitorError

SETTINGS = (
    "name",
    "url",
    "interval_seconds",
    "expect_status",
    "keyword",
    "selector",
    "period_seconds",
    "grace_seconds",
    "severity",
    "failures_before_alert",
)
"""The fields of a monitor one may set (the API's ``POST`` takes these and ``kind``)."""


class MonitorArgs(BaseModel):
    action: Literal["create", "list", "update", "delete", "pause", "resume"]
    monitor_id: str | None = Field(default=None, description="id (or name)")
    name: str | None = None
    kind: Literal["http", "heartbeat", "change"] | None = None
    url: str | None = Field(default=None, description="http(s) URL; LAN hosts allowed")
    interval_seconds: int | None = Field(
        default=None, description="http: >= 30, default 60; change: >= 300, default 900"
    )
    expect_status: int | None = Field(
        default=None, description="http: the status wanted; default any 2xx/3xx (0 = that)"
    )
    keyword: str | None = Field(
        default=None,
        description="http: text the body must hold; change: compare ~200 chars around it "
        "(a label that stays, not the value watched)",
    )
    selector: str | None = Field(
        default=None,
        description="change: CSS selector of the part compared (tag .class #id, descendants; "
        "fetch_url shows no markup)",
    )
    period_seconds: int | None = Field(default=None, description="heartbeat: ping every")
    grace_seconds: int | None = Field(default=None, description="heartbeat: extra wait")
    severity: Literal["info", "warning", "critical"] | None = Field(
        default=None, description="of its alert; default warning (change: info)"
    )
    failures_before_alert: int | None = Field(
        default=None, description="http: failed checks in a row before alerting; default 2"
    )


PING_NOTE = (
    "PUBLIC_BASE_URL is not set, so this is a path: put this server's address, as the "
    "pinging job reaches it, before it (or set PUBLIC_BASE_URL)"
)
ONCE_NOTE = "shown only now: only a hash of its token is kept, so note the ping_url"


def ping_base(settings: Settings) -> str:
    """Where pings reach this server: ``PUBLIC_BASE_URL``, else nothing (the ping_url
    is then a path): never a host taken from a request, which its sender chooses."""
    return (settings.public_base_url or "").rstrip("/")


def ping_url(base: str, token: str) -> str:
    return f"{base.rstrip('/')}/ping/{token}"


def monitor_view(monitor: Monitor, base: str) -> dict[str, Any]:
    """A monitor as the tool, the API and the dashboard show it (fields as
    ``manage_monitor`` names them). A heartbeat's ``ping_url`` is shown once, on the
    monitor ``create`` returns (the only one that knows its token); absolute with
    ``base``, else a path with a note."""
    view: dict[str, Any] = {
        "id": monitor.id,
        "name": monitor.name,
        "kind": monitor.kind,
        "severity": monitor.severity,
        "status": "paused" if monitor.paused else monitor.state,
    }
    if monitor.kind == "http":
        view |= {
            "url": monitor.url,
            "interval_seconds": monitor.interval_seconds,
            "expect_status": monitor.expect_status,
            "keyword": monitor.keyword,
            "failures_before_alert": monitor.failures_before_alert,
            "last_check_at": monitor.last_check_at,
        }
    elif monitor.kind == "change":
        view |= {
            "url": monitor.url,
            "interval_seconds": monitor.interval_seconds,
            "selector": monitor.selector,
            "keyword": monitor.keyword,
            "failures_before_alert": monitor.failures_before_alert,
            "last_check_at": monitor.last_check_at,
            "changed_at": monitor.changed_at,
        }
        if not monitor.page_found:
            view["page"] = "the selector or keyword finds nothing on the page"
    else:
        view |= {
            "period_seconds": monitor.period_seconds,
            "grace_seconds": monitor.grace_seconds,
        }
        if monitor.token is not None:
            view["ping_url"] = ping_url(base, monitor.token)
            view["ping_note"] = ONCE_NOTE if base else f"{PING_NOTE}; {ONCE_NOTE}"
        view |= {
            "last_ping_at": monitor.last_ping_at,
            "late_after": None if monitor.paused else monitor.deadline(),
        }
    if monitor.state == "down" and not monitor.paused:
        view |= {"down_since": monitor.down_since, "alert_code": monitor.alert_code}
    if monitor.told == "flapping" and not monitor.paused:  # one alert until it is steady
        view |= {"flapping": True, "alert_code": monitor.alert_code}
    if monitor.last_error and monitor.state != "up" and not monitor.paused:
        view["last_error"] = for_model(monitor.last_error)  # the site's words in a block
    view["created_at"] = monitor.created_at
    return view


def manage_monitor(monitors: Monitors, base: str) -> Tool[MonitorArgs]:
    """The tool over the running ``monitors``; ``base`` is where pings reach us."""

    async def manage(args: MonitorArgs, ctx: RunContext) -> ToolResult:
        given = {name: getattr(args, name) for name in SETTINGS}
        try:
            if args.action == "list":
                shown = [monitor_view(m, base) for m in monitors.all()]
                return {"monitors": shown, "count": len(shown)}
            if args.action == "create":
                monitor = await monitors.create(args.kind, given)
                return {"created": monitor_view(monitor, base)}
            if args.action == "update":
                monitor = await monitors.update(args.monitor_id, {**given, "kind": args.kind})
                return {"updated": monitor_view(monitor, base)}
            if args.action == "pause":
                return {"paused": monitor_view(await monitors.pause(args.monitor_id), base)}
            if args.action == "resume":
                return {"resumed": monitor_view(await monitors.resume(args.monitor_id), base)}
            monitor = await monitors.delete(args.monitor_id)
            return {"deleted": monitor.id, "name": monitor.name}
        except MonitorError as exc:
            raise ToolError(str(exc)) from None

    return Tool(
        name="manage_monitor",
        guidance=(
            "manage_monitor for uptime checks (http: a URL checked every interval_seconds, "
            "at least 30), heartbeats (a job pings its ping_url; alert when it stops) and "
            "page changes (change); they run without you, alert when down and tell the owner "
            "when back up."
        ),
        description=(
            "Monitors run with no model call. create: name, kind; http: url, optional "
            "interval_seconds, expect_status, keyword, failures_before_alert; heartbeat: "
            "period_seconds, optional grace_seconds (the create answer gives its ping_url, "
            "once: pass it on; GET or POST it, /fail for a failure; a lost one means delete "
            "and create again); change: url, optional interval_seconds, selector or keyword "
            "(the part compared); optional severity. list. update: "
            "monitor_id + fields to change. delete, pause, resume: monitor_id. At most 50 monitors."
        ),
        args=MonitorArgs,
        handler=manage,
    )
