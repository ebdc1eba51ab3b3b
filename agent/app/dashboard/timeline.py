"""The Runs page's timeline: the last 7 days as inline SVG, drawn on the server.

One row per day (today at the top) across 24 hours in the owner's timezone; each day
has two lanes, pulse above and cron below. Every run is one mark, coloured by its
status, with a ``<title>`` and an ``aria-label`` in words, linking to ``/runs/<id>``.
The SVG has a ``viewBox`` and ``width="100%"``, so it scales to a phone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from types import MappingProxyType
from typing import Any
from zoneinfo import ZoneInfo

from markupsafe import Markup, escape

Doc = dict[str, Any]
DAYS = 7
STATUS_COLOURS: Mapping[str, str] = MappingProxyType(
    {
        "success": "#2e7d32",
        "failed": "#c62828",
        "timeout": "#ef6c00",
        "skipped": "#9e9e9e",
        "running": "#1565c0",
    }
)
"""Each status's colour; the legend shows the same ones, with words beside them."""
LANES = ("pulse", "cron")
LABEL_W = 64
HOUR_W = 26
ROW_H = 36
TOP = 22
MARK_W = 5
WIDTH = LABEL_W + 24 * HOUR_W + 8


@dataclass(frozen=True)
class Mark:
    run_id: str
    day: int
    """Rows from the top: 0 is today."""
    lane: int
    hour: float
    status: str
    label: str


def status_of(run: Doc) -> str:
    status = str(run.get("status") or "running")
    return status if status in STATUS_COLOURS else "running"


def run_label(run: Doc, tz: ZoneInfo) -> str:
    """``cron "Morning news" failed, Tue 26 Nov 07:00, 3.1 s``."""
    name = f' "{run["name"]}"' if run.get("name") else ""
    started: datetime = run["started_at"]
    text = f"{run.get('kind', 'run')}{name} {status_of(run)}, "
    text += started.astimezone(tz).strftime("%a %d %b %H:%M")
    if run.get("duration_ms") is not None and status_of(run) != "skipped":
        text += f", {float(run['duration_ms']) / 1000:.1f} s"
    return text


def marks(runs: Iterable[Doc], today: date, tz: ZoneInfo) -> list[Mark]:
    """Where each run goes: its local day's row, its kind's lane, its start's hour."""
    found: list[Mark] = []
    for run in runs:
        started = run.get("started_at")
        if not isinstance(started, datetime):
            continue
        local = started.astimezone(tz)
        row = (today - local.date()).days
        if not 0 <= row < DAYS:
            continue
        hour = local.hour + local.minute / 60 + local.second / 3600
        lane = LANES.index(run["kind"]) if run.get("kind") in LANES else 1
        found.append(Mark(str(run["_id"]), row, lane, hour, status_of(run), run_label(run, tz)))
    return found


def timeline_svg(runs: Iterable[Doc], now: datetime, tz: ZoneInfo) -> Markup:
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
    for mark in marks(runs, today, tz):
        x = LABEL_W + mark.hour * HOUR_W - MARK_W / 2
        top = TOP + mark.day * ROW_H + mark.lane * lane_h + 2
        label = escape(mark.label)
        parts.append(
            f'<a href="/runs/{escape(mark.run_id)}" aria-label="{label}">'
            f'<rect class="run run-{mark.status}" data-status="{mark.status}" '
            f'x="{x:.1f}" y="{top:.1f}" width="{MARK_W}" height="{lane_h - 4:.1f}" rx="1" '
            f'fill="{STATUS_COLOURS[mark.status]}"><title>{label}</title></rect></a>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))
