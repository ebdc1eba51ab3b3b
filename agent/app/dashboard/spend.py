"""Spend: ``GET /spend``, input and output tokens per day for 30 days, by chat, cron and
pulse, as two stacked bar charts (inline SVG) with totals and a table of every day.

Read from ``usage`` (``storage.usage``): at most 90 small documents for the month.
"""

from __future__ import annotations

from aiohttp import web

from agent.app.dashboard.context import Dashboard
from agent.app.dashboard.spend_chart import DAYS, KIND_COLOURS, first_day, spend_svg, spend_table
from storage.usage import KINDS


def register(router: web.UrlDispatcher, dash: Dashboard) -> None:
    async def spend_page(request: web.Request) -> web.StreamResponse:
        today = dash.now().astimezone(dash.tz).date()
        counts = await dash.app.deps.usage.since(first_day(today))
        spend = spend_table(counts, today)
        context = {
            "days": DAYS,
            "kinds": KINDS,
            "colours": KIND_COLOURS,
            "spend": spend,
            "rows": list(reversed(spend.rows)),
            "input_chart": spend_svg(spend, "input"),
            "output_chart": spend_svg(spend, "output"),
        }
        return dash.render(request, "spend.html", context)

    dash.get(router, "/spend", spend_page)
