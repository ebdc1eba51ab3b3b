"""The web dashboard at ``GET /``: server-rendered pages, nothing loaded from the internet.

Auth (``auth.py``): ``Authorization: Bearer <ADMIN_TOKEN>`` or the session cookie from
``POST /login``; without ``ADMIN_TOKEN`` every page answers 503 like ``/api/*``. Every
POST behind the login checks the CSRF token.

Adding a page (how ``runs``, ``jobs`` and ``spend`` plug in):

1. A module ``agent/app/dashboard/<name>.py`` with
   ``def register(router: web.UrlDispatcher, dash: Dashboard) -> None`` that adds its
   routes through the guard: ``dash.get(router, "/runs", handler)`` for a page,
   ``dash.post(router, "/jobs/{job_id}/pause", handler)`` for an action (auth and the
   CSRF check are done before ``handler`` runs). ``Dashboard`` is in ``context.py``.
2. Its name in ``PAGES`` below (all five are listed already; a listed module that does
   not exist yet is skipped with a warning, so pages can land one at a time).
3. Templates in ``templates/<name>.html`` that ``{% extends "base.html" %}`` and fill
   ``{% block title %}`` and ``{% block content %}``. Render with
   ``dash.render(request, "runs.html", {...})``; the context always has ``request``,
   ``now``, ``tz`` (the owner's), ``flash``; ``{{ moment | when }}`` formats a datetime
   in the owner's timezone; every POST form includes ``{{ csrf_field(request) }}``.
   After an action answer ``dash.done(request, "/jobs", outcome_text)`` (a redirect
   that shows the text as a flash). Actions go through the same code as chat
   directives and tools, recorded with ``by="dashboard"`` (``BY``).
4. Styles: classes from ``static/dashboard.css`` (``card``, ``table``, ``badge``
   + ``ok``/``bad``/``warn``/``muted``, ``actions``, ``btn``); charts are inline SVG
   built on the server (presentation attributes or ``style=`` are fine under the CSP;
   no external URL, no inline ``<script>``). A table that should stack on a phone gets
   class ``stack`` and a ``data-label`` on each cell.
5. A live page (the overview, alerts) puts its changing part in a template of its
   own, included inside ``<div data-live="/live/<name>" data-every="15">``, and
   registers ``/live/<name>`` answering ``dash.live(request, template, context)``;
   ``static/live.js`` (in ``{% block scripts %}``) swaps it in while the tab is visible.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

from aiohttp import web

from agent.app.access import AdminGate
from agent.app.application import App
from agent.app.dashboard.auth import Sessions
from agent.app.dashboard.context import BY, DASHBOARD_KEY, Dashboard
from agent.app.healthcheck import HealthBoard
from storage.repos.dashboard_sessions import RevokedStore

log = logging.getLogger(__name__)
PAGES: tuple[str, ...] = (
    "login", "overview", "alerts", "runs", "jobs", "monitors", "spend", "memory",
)  # fmt: skip
"""Page modules in this package; each has ``register(router, dash)``."""
STATIC = Path(__file__).parent / "static"

__all__ = ["BY", "PAGES", "Dashboard", "setup_dashboard"]


def setup_dashboard(
    web_app: web.Application, app: App, gate: AdminGate, health: HealthBoard
) -> Dashboard:
    """Mount the dashboard's routes and static files on ``web_app``; its templates load on
    the first page rendered (``Dashboard.render``). ``gate`` checks admin tokens, with
    the same per-client throttle as ``/api/*``; ``health`` is the board ``/healthz``
    reads too, so a page and a probe at once share one collection."""
    sessions = Sessions(app.settings, gate, RevokedStore(app.database.db))
    dash = Dashboard(app, sessions, health)
    web_app[DASHBOARD_KEY] = dash

    async def load_logouts(_web_app: web.Application) -> None:
        await dash.sessions.load(dash.now())

    web_app.on_startup.append(load_logouts)
    web_app.router.add_static("/static/", STATIC, append_version=False)
    for name in PAGES:
        module_name = f"{__name__}.{name}"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            log.warning("dashboard: page %s is not there yet", name)
            continue
        module.register(web_app.router, dash)
    return dash
