"""Runs: ``GET /runs`` (the 7-day timeline and the latest runs) and ``GET /runs/<id>``.

Read through the run store: the timeline needs a few fields of each run since the
start of the owner's day six days ago (``RunStore.started_since``, index
``started_at``); a run's page reads its one record, whose ``calls`` hold each tool
call in short (``agent.runs.runner.call_summaries``).

The timeline is inline SVG drawn on the server: one row per day (today at the top)
across 24 hours in the owner's timezone; each day has two lanes, pulse above and cron
below. Every run is one mark, coloured by its status, with a ``<title>`` and an
``aria-label`` in words, linking to ``/runs/<id>``. The SVG has a ``viewBox`` and
``width="100%"``, so it scales to a phone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from types import MappingProxyType
from typing import Any
from zoneinfo import ZoneInfo

from aiohttp import web
from bson import ObjectId
from markupsafe import Markup, escape

from agent.app.dashboard.context import Dashboard
from scheduler.views import short_time
from storage.repos.runs.record import CallSummary, Run, Tokens
from storage.repos.runs.store import RunStore

DAYS = 7
STATUS_COLOURS: Mapping[str, str] = MappingProxyType(
    {
        "success": "#2e7d32",
        "failed": "#c62828",
        "timeout": "#ef6c00",
        "skipped": "#9e9e9e",
        "missed": "#6a1b9a",
        "retrying": "#b26a00",
        "running": "#1565c0",
    }
)
"""Each status's colour; the legend shows the same ones, with words beside them."""
DRAWN_LAST = ("failed", "timeout", "missed", "retrying")
"""Drawn after (so above) every other mark, worst last: a failure at the same spot as
a success is never hidden under it."""
LANES = ("pulse", "cron")
LABEL_W = 84
HOUR_W = 26
ROW_H = 44
TOP = 22
MARK_W = 5
HIT_STROKE = 16
"""A transparent stroke this wide widens each mark's tap target (a finger is wider)."""
WIDTH = LABEL_W + 24 * HOUR_W + 8
MOST_RUNS = 3_000
"""At most this many runs on the timeline (48 pulses a day and busy cron jobs fit)."""
LISTED = 50
STATUS_BADGE = {
    "success": "ok",
    "failed": "bad",
    "timeout": "bad",
    "skipped": "muted",
    "missed": "bad",
    "retrying": "warn",
}


@dataclass(frozen=True)
class Mark:
    run_id: str
    day: int
    """Rows from the top: 0 is today."""
    lane: int
    hour: float
    status: str
    label: str


def status_of(run: Run) -> str:
    """The record's status, in one word; ``missed`` for a fire recorded ``skipped``
    because its moment passed, past its grace window, while Watchkeeper was down or
    stalled (``storage.repos.runs``); ``retrying`` for a failed try that will be
    tried again (``retry_at`` set)."""
    if run.status == "skipped" and run.reason == "missed":
        return "missed"
    if run.failed and run.retry_at is not None:
        return "retrying"
    return run.status


def shown_at(run: Run) -> datetime | None:
    """When a run is placed: its start, or for a missed fire the moment it was due."""
    if status_of(run) == "missed" and run.scheduled_for is not None:
        return run.scheduled_for
    return run.started_at


def run_label(run: Run, tz: ZoneInfo) -> str:
    """``cron "Morning news" failed, Tue 26 Nov 07:00, 3.1 s``; a missed fire names the
    moment it was due."""
    name = f' "{run.name}"' if run.name else ""
    at = shown_at(run)
    text = f"{run.kind}{name} {status_of(run)}, "
    text += at.astimezone(tz).strftime("%a %d %b %H:%M") if at is not None else "never"
    if run.duration_ms is not None and status_of(run) not in ("skipped", "missed"):
        text += f", {run.duration_ms / 1000:.1f} s"
    return text


def marks(runs: Iterable[Run], today: date, tz: ZoneInfo) -> list[Mark]:
    """Where each run goes: its local day's row, its kind's lane, its start's hour."""
    found: list[Mark] = []
    for run in runs:
        started = shown_at(run)
        if started is None:
            continue
        local = started.astimezone(tz)
        row = (today - local.date()).days
        if not 0 <= row < DAYS:
            continue
        hour = local.hour + local.minute / 60 + local.second / 3600
        lane = LANES.index(run.kind)
        found.append(Mark(str(run.id), row, lane, hour, status_of(run), run_label(run, tz)))
    return found


def drawing_order(mark: Mark) -> int:
    """0 for the marks drawn first; failures come last (see ``DRAWN_LAST``)."""
    status = mark.status
    return len(DRAWN_LAST) - DRAWN_LAST.index(status) if status in DRAWN_LAST else 0


def timeline_svg(runs: Iterable[Run], now: datetime, tz: ZoneInfo) -> Markup:
    today = now.astimezone(tz).date()
    height = TOP + DAYS * ROW_H + 4
    parts = [
        f'<svg class="timeline" viewBox="0 0 {WIDTH} {height}" width="100%" '
        'role="img" aria-labelledby="timeline-title" preserveAspectRatio="xMinYMin meet" '
        'xmlns="http://www.w3.org/2000/svg">',
        '<title id="timeline-title">Runs of the last 7 days, one mark per run</title>',
    ]
    for hour in range(0, 25, 3):
        at = LABEL_W + hour * HOUR_W
        parts.append(
            f'<line x1="{at}" y1="{TOP - 4}" x2="{at}" y2="{height - 4}" '
            'stroke="currentColor" stroke-opacity="0.18"/>'
        )
        if hour < 24:  # at the right edge "24" would be cut in half
            parts.append(
                f'<text x="{at}" y="{TOP - 8}" font-size="14" text-anchor="middle" '
                f'fill="currentColor" fill-opacity="0.75">{hour:02d}</text>'
            )
    for row in range(DAYS):
        day = today - timedelta(days=row)
        y = TOP + row * ROW_H
        label = "Today" if row == 0 else day.strftime("%a %d")
        parts.append(
            f'<rect x="{LABEL_W}" y="{y}" width="{24 * HOUR_W}" height="{ROW_H - 4}" '
            f'fill="currentColor" fill-opacity="{0.06 if row % 2 == 0 else 0.02}"/>'
            f'<text x="4" y="{y + ROW_H / 2 + 2}" font-size="14" fill="currentColor">{label}</text>'
        )
    lane_h = (ROW_H - 4) / len(LANES)
    for mark in sorted(marks(runs, today, tz), key=drawing_order):
        x = LABEL_W + mark.hour * HOUR_W - MARK_W / 2
        top = TOP + mark.day * ROW_H + mark.lane * lane_h + 2
        label = escape(mark.label)
        parts.append(
            f'<a href="/runs/{escape(mark.run_id)}" aria-label="{label}">'
            f'<rect class="run run-{mark.status}" data-status="{mark.status}" '
            f'x="{x:.1f}" y="{top:.1f}" width="{MARK_W}" height="{lane_h - 4:.1f}" rx="1" '
            f'fill="{STATUS_COLOURS[mark.status]}" stroke="transparent" '
            f'stroke-width="{HIT_STROKE}"><title>{label}</title></rect></a>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def week_start(now: datetime, tz: ZoneInfo) -> datetime:
    """Midnight (owner's time) of the oldest day on the timeline."""
    today = now.astimezone(tz).date()
    first = today - timedelta(days=DAYS - 1)
    return datetime(first.year, first.month, first.day, tzinfo=tz)


def row_of(run: Run, tz: ZoneInfo, now: datetime) -> dict[str, Any]:
    """A run as a row of the list (the template's fields)."""
    return {
        "id": str(run.id),
        "kind": run.kind,
        "name": run.name or "",
        "status": status_of(run),
        "badge": STATUS_BADGE.get(status_of(run), "info"),
        "when": short_time(shown_at(run), tz, now),
        "duration": seconds(run.duration_ms),
        "trigger": run.trigger,
        "tokens": run.tokens.total if run.tokens is not None else 0,
        "label": run_label(run, tz),
        "retry_at": run.retry_at if status_of(run) == "retrying" else None,
    }


def seconds(duration_ms: float | None) -> str:
    if duration_ms is None:
        return "—"
    value = duration_ms / 1000
    return f"{value:.1f} s" if value < 120 else f"{value / 60:.1f} min"


def run_detail(run: Run, tz: ZoneInfo, now: datetime) -> dict[str, Any]:
    """Everything the run page shows, as words and numbers."""
    tokens = run.tokens or Tokens()
    if run.calls is not None:
        calls = [call.to_doc() for call in run.calls]
    else:  # older records: names only
        calls = [CallSummary(name).to_doc() for name in run.tool_calls]
    detail = row_of(run, tz, now)
    detail.update(
        job_id=run.job_id,
        scheduled_for=run.scheduled_for,
        started_at=run.started_at,
        ended_at=run.ended_at,
        input_tokens=tokens.input,
        output_tokens=tokens.output,
        cached_input_tokens=tokens.cached_input or 0,
        calls=calls,
        result=run.result,
        error=run.error,
        reason=run.reason,
        attempts=run.attempts,
        gave_up=run.gave_up,
    )
    return detail


def register(router: web.UrlDispatcher, dash: Dashboard) -> None:
    store = RunStore(dash.app.deps.db)

    async def runs_page(request: web.Request) -> web.StreamResponse:
        runs = await store.started_since(week_start(dash.now(), dash.tz), MOST_RUNS)
        now, tz = dash.now(), dash.tz
        context = {
            "timeline": timeline_svg(runs, now, tz),
            "legend": [(status, colour) for status, colour in STATUS_COLOURS.items()],
            "rows": [row_of(run, tz, now) for run in runs[:LISTED]],
            "count": len(runs),
            "missed": sum(status_of(run) == "missed" for run in runs),
            "capped": len(runs) >= MOST_RUNS,
        }
        return dash.render(request, "runs.html", context)

    async def run_page(request: web.Request) -> web.StreamResponse:
        raw = request.match_info["run_id"]
        if not ObjectId.is_valid(raw):
            return dash.render(request, "run.html", {"run": None}, status=404)
        run = await store.get(ObjectId(raw))
        if run is None:
            return dash.render(request, "run.html", {"run": None}, status=404)
        return dash.render(request, "run.html", {"run": run_detail(run, dash.tz, dash.now())})

    dash.get(router, "/runs", runs_page)
    dash.get(router, "/runs/{run_id}", run_page)
