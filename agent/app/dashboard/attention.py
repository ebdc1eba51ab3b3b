"""``GET /live/attention``: what ``static/attention.js`` needs to call the owner's
attention while any dashboard page is open (issue 39, item 8).

It answers JSON: ``critical`` (how many critical alerts nobody has acknowledged yet),
``alerts`` (the newest of them: ``code`` and ``title``, so the page can tell a new one
from one it saw when it loaded) and ``updated``. The script puts the count in the tab
title, raises a browser notification for each code it has not seen since the page
loaded (once the owner allowed notifications) and beeps only when the owner turned the
sound on.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agent.app.dashboard.context import Dashboard
from storage.repos.alerts import AlertStore

ATTENTION_SHOWN = 20
"""Codes sent per poll: more new critical alerts than this at once make one notification
each for the newest; the count in the title stays exact."""


async def attention(dash: Dashboard) -> dict[str, Any]:
    """The unacknowledged critical alerts: their count and the newest codes and titles."""
    count, newest = await AlertStore(dash.app.database.db).waiting("critical", ATTENTION_SHOWN)
    return {
        "critical": count,
        "alerts": [{"code": a.code, "title": a.title} for a in newest],
        "updated": dash.stamp(),
    }


def register(router: web.UrlDispatcher, dash: Dashboard) -> None:
    async def live(_request: web.Request) -> web.StreamResponse:
        return web.json_response(await attention(dash))

    dash.get(router, "/live/attention", live)
