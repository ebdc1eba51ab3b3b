"""Runs: ``GET /runs`` (the 7-day timeline and the latest runs) and ``GET /runs/<id>``.

Read straight from ``runs`` with a projection: the timeline needs a few fields of each
run since the start of the owner's day six days ago (index ``started_at``); a run's
page reads its one record, whose ``calls`` hold each tool call in short
(``agent.runs.run_calls``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from aiohttp import web
from bson import ObjectId
from bson.errors import InvalidId

from agent.app.dashboard.context import Dashboard
from agent.app.dashboard.timeline import DAYS, STATUS_COLOURS, run_label, status_of, timeline_svg
from scheduler.views import short_time
from storage import collections as c

Doc = dict[str, Any]
MOST_RUNS = 3_000
"""At most this many runs on the timeline (48 pulses a day and busy cron jobs fit)."""
LISTED = 50
TIMELINE_FIELDS = {
    "kind": 1,
    "name": 1,
    "job_id": 1,
    "status": 1,
    "trigger": 1,
    "started_at": 1,
    "duration_ms": 1,
    "reason": 1,
    "tokens": 1,
}
STATUS_BADGE = {"success": "ok", "failed": "bad", "timeout": "bad", "skipped": "muted"}


def week_start(now: datetime, tz: ZoneInfo) -> datetime:
    """Midnight (owner's time) of the oldest day on the timeline."""
    today = now.astimezone(tz).date()
    first = today - timedelta(days=DAYS - 1)
    return datetime(first.year, first.month, first.day, tzinfo=tz)


async def week_runs(dash: Dashboard) -> list[Doc]:
    since = week_start(dash.now(), dash.tz)
    cursor = dash.app.deps.db[c.RUNS].find(
        {"started_at": {"$gte": since}},
        projection=TIMELINE_FIELDS,
        sort=[("started_at", -1)],
        limit=MOST_RUNS,
    )
    return await cursor.to_list()


def row_of(run: Doc, tz: ZoneInfo, now: datetime) -> Doc:
    tokens = run.get("tokens") or {}
    return {
        "id": str(run["_id"]),
        "kind": run.get("kind", "run"),
        "name": run.get("name") or "",
        "status": status_of(run),
        "badge": STATUS_BADGE.get(status_of(run), "info"),
        "when": short_time(run.get("started_at"), tz, now),
        "duration": seconds(run.get("duration_ms")),
        "trigger": run.get("trigger", "schedule"),
        "tokens": int(tokens.get("input") or 0) + int(tokens.get("output") or 0),
        "label": run_label(run, tz),
    }


def seconds(duration_ms: Any) -> str:
    if duration_ms is None:
        return "—"
    value = float(duration_ms) / 1000
    return f"{value:.1f} s" if value < 120 else f"{value / 60:.1f} min"


def run_detail(run: Doc, tz: ZoneInfo, now: datetime) -> Doc:
    """Everything the run page shows, as words and numbers."""
    tokens = run.get("tokens") or {}
    calls = run.get("calls")
    if not isinstance(calls, list):  # older records: names only
        calls = [{"name": name, "args": "", "result": ""} for name in run.get("tool_calls") or []]
    detail = row_of(run, tz, now)
    detail.update(
        job_id=run.get("job_id"),
        scheduled_for=run.get("scheduled_for"),
        started_at=run.get("started_at"),
        ended_at=run.get("ended_at"),
        input_tokens=int(tokens.get("input") or 0),
        output_tokens=int(tokens.get("output") or 0),
        calls=calls,
        result=run.get("result") or "",
        error=run.get("error"),
        reason=run.get("reason"),
        attempts=run.get("attempts"),
        gave_up=bool(run.get("gave_up")),
    )
    return detail


def register(router: web.UrlDispatcher, dash: Dashboard) -> None:
    async def runs_page(request: web.Request) -> web.StreamResponse:
        runs = await week_runs(dash)
        now, tz = dash.now(), dash.tz
        context = {
            "timeline": timeline_svg(runs, now, tz),
            "legend": [(status, colour) for status, colour in STATUS_COLOURS.items()],
            "rows": [row_of(run, tz, now) for run in runs[:LISTED]],
            "count": len(runs),
            "capped": len(runs) >= MOST_RUNS,
        }
        return dash.render(request, "runs.html", context)

    async def run_page(request: web.Request) -> web.StreamResponse:
        try:
            run_id = ObjectId(request.match_info["run_id"])
        except (InvalidId, TypeError):
            return dash.render(request, "run.html", {"run": None}, status=404)
        run = await dash.app.deps.db[c.RUNS].find_one({"_id": run_id})
        if run is None:
            return dash.render(request, "run.html", {"run": None}, status=404)
        return dash.render(request, "run.html", {"run": run_detail(run, dash.tz, dash.now())})

    dash.get(router, "/runs", runs_page)
    dash.get(router, "/runs/{run_id}", run_page)
