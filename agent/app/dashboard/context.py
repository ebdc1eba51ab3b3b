"""``Dashboard``: what every page module gets to register routes and render templates."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit
from zoneinfo import ZoneInfo

from aiohttp import web
from markupsafe import Markup, escape

from agent.app.application import App
from agent.app.dashboard.auth import (
    BEARER_SESSION,
    CSRF_FIELD,
    FLASH_COOKIE,
    SESSION_KEY,
    Sessions,
    set_flash,
)
from agent.app.healthcheck import HealthBoard
from channels.registry import ChannelName

if TYPE_CHECKING:  # jinja2 loads on the first page rendered (``template_env``)
    import jinja2

BY = "dashboard"
"""``by`` of every change made from the dashboard (alert history, job changes)."""
PageHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]
NAV: tuple[tuple[str, str], ...] = (
    ("Overview", "/"),
    ("Runs", "/runs"),
    ("Alerts", "/alerts"),
    ("Jobs", "/jobs"),
    ("Monitors", "/monitors"),
    ("Spend", "/spend"),
    ("Memory", "/memory"),
)
SECURITY_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "style-src 'self' 'unsafe-inline'; script-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def secured(response: web.StreamResponse) -> web.StreamResponse:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


MAX_TARGET_CHARS = 2000
ASCII_PRINTABLE = "".join(map(chr, range(0x21, 0x7F)))
"""Kept as they are by ``same_site_path``; anything else in a path is percent-encoded."""


def same_site_path(raw: str | None) -> str:
    """Where a redirect may go: ``raw`` when it is a path on this site, else ``/`` (no
    open redirect, no header injection). ``see_other`` applies it to every redirect the
    dashboard answers, so a target taken from a form or a query (``next``) is safe
    whichever handler passes it on.

    A path starts with one ``/``, not ``//`` or ``/\\``; it has no backslash, scheme
    or host, and no control character or whitespace, before or after percent-decoding:
    browsers drop tabs and newlines from a ``Location``, so ``/%09/evil.example`` would
    turn into ``//evil.example``, and a raw newline cannot go in a header at all.
    Characters beyond ASCII are sent percent-encoded."""
    if not raw or len(raw) > MAX_TARGET_CHARS or not raw.startswith("/"):
        return "/"
    for text in (raw, unquote(raw)):
        if text.startswith("//") or "\\" in text:
            return "/"
        if any(ch.isspace() or not ch.isprintable() for ch in text):
            return "/"
    parts = urlsplit(raw)
    if parts.scheme or parts.netloc:
        return "/"
    return quote(raw, safe=ASCII_PRINTABLE)


def see_other(location: str) -> web.Response:
    """A 303 redirect to ``location`` as ``same_site_path`` lets it through (returned, not
    raised: so the security headers go on it). The dashboard's only way to redirect."""
    return web.Response(status=303, headers={"Location": same_site_path(location)})


def plain(text: str, status: int) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/plain")


CHANNEL_NAMES: Mapping[str, str] = {
    ChannelName.TELEGRAM: "Telegram",
    ChannelName.WHATSAPP: "WhatsApp",
    ChannelName.SMS: "SMS",
    ChannelName.CONSOLE: "Terminal",
}


def channel_name(channel: str) -> str:
    """``Telegram`` for ``telegram``: a channel as the owner calls it."""
    return CHANNEL_NAMES.get(channel, channel)


LIVE_SECONDS = 15
"""How often ``static/live.js`` asks a live page for its news (the page's ``data-every``)."""
RELATIVE_HOURS = 6
"""Within this many hours of now, a time today also says how far off it is."""


def span(delta: timedelta) -> str:
    """``20 min``, ``3 h 5 min``: a stretch of time as a person says it."""
    minutes = int(abs(delta).total_seconds() // 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    return f"{hours} h {rest} min" if rest and hours < 3 else f"{hours} h"


def human_time(moment: datetime | None, tz: ZoneInfo, now: datetime) -> str:
    """A moment as a person reads it, in ``tz``: ``08:15, in 20 min`` and ``07:40, 35 min
    ago`` near now, ``yesterday 22:10``, ``tomorrow 07:00``, ``Tue 14:00`` within a week,
    ``3 Nov 14:00`` this year, else ``3 Nov 2025``; ``never`` for None. Never ISO: the
    pages are for people (``/api/*`` keeps ISO)."""
    if moment is None:
        return "never"
    local = moment.astimezone(tz)
    days = (local.date() - now.astimezone(tz).date()).days
    clock = local.strftime("%H:%M")
    if days == 0:
        delta = moment - now
        if abs(delta) < timedelta(minutes=1):
            return f"{clock}, now"
        if abs(delta) < timedelta(hours=RELATIVE_HOURS):
            ahead = delta > timedelta(0)
            return f"{clock}, in {span(delta)}" if ahead else f"{clock}, {span(delta)} ago"
        return clock
    if days in (-1, 1):
        return f"{'yesterday' if days < 0 else 'tomorrow'} {clock}"
    if -6 <= days <= 6:
        return local.strftime(f"%a {clock}")
    day = f"{local.day} {local:%b}"
    if local.year == now.astimezone(tz).year:
        return f"{day} {clock}"
    return f"{day} {local.year}"


def when(ctx: jinja2.runtime.Context, moment: datetime | None) -> str:
    """``{{ x | when }}``: ``human_time`` in the owner's timezone. ``template_env`` marks
    it ``pass_context``."""
    return human_time(moment, ctx["tz"], ctx["now"])


@dataclass
class Dashboard:
    app: App
    sessions: Sessions
    health: HealthBoard
    """Every part's health (``agent.app.healthcheck``), shared by the pages' readers."""
    _env: jinja2.Environment | None = field(default=None, init=False, repr=False)

    def now(self) -> datetime:
        return self.app.clock()

    @property
    def tz(self) -> ZoneInfo:
        return self.app.deps.owner.tz

    def stamp(self) -> str:
        """``08:01``: now in the owner's time, for a live page's "updated" stamp."""
        return self.now().astimezone(self.tz).strftime("%H:%M")

    def live(self, request: web.Request, template: str, context: Mapping[str, Any]) -> web.Response:
        """A live page's news for ``static/live.js``: ``html`` (its live part, rendered by
        ``template``) and ``updated`` (the stamp)."""
        html = self.fragment(request, template, context)
        return web.json_response({"updated": self.stamp(), "html": html})

    # -- routes ------------------------------------------------------------------------

    def get(self, router: web.UrlDispatcher, path: str, handler: PageHandler) -> None:
        """A page behind the login (bearer or session cookie)."""
        router.add_get(path, self.guard(handler, post=False), allow_head=False)

    def post(self, router: web.UrlDispatcher, path: str, handler: PageHandler) -> None:
        """An action behind the login; its form must carry ``csrf_field(request)``."""
        router.add_post(path, self.guard(handler, post=True))

    def guard(self, handler: PageHandler, *, post: bool) -> PageHandler:
        async def guarded(request: web.Request) -> web.StreamResponse:
            if self.sessions.token is None:
                return secured(plain("ADMIN_TOKEN is not configured", 503))
            sid = self.sessions.session_of(request, self.now())
            if sid is None:
                if post:
                    return secured(plain("not logged in", 401))
                target = "/login?next=" + quote(request.path_qs, safe="")
                return secured(see_other(target))
            request[SESSION_KEY] = sid
            if post:
                form = await request.post()
                given = form.get(CSRF_FIELD)
                if not isinstance(given, str) or not self.sessions.csrf_ok(sid, given):
                    return secured(plain("CSRF token missing or wrong; reload the page", 403))
            return secured(await handler(request))

        return guarded

    # -- responses ---------------------------------------------------------------------

    def render(
        self, request: web.Request, template: str, context: Mapping[str, Any], status: int = 200
    ) -> web.Response:
        """Render ``template`` with the common context: ``request``, ``now``, ``tz``,
        ``nav``, ``active`` (the nav path), ``flash`` (the last action's outcome),
        ``logged_in``; the ``when`` filter and ``csrf_field(request)`` are globals."""
        flash = self.sessions.flash_of(request)
        text = self.fragment(request, template, {"flash": flash, **context})
        response = web.Response(text=text, status=status, content_type="text/html", charset="utf-8")
        if flash is not None:
            response.del_cookie(FLASH_COOKIE, path="/")
        return response

    def fragment(self, request: web.Request, template: str, context: Mapping[str, Any]) -> str:
        """``template`` rendered to text with the common context (a page, or the part of
        one that ``live.js`` swaps in)."""
        base = {
            "request": request,
            "now": self.now(),
            "tz": self.tz,
            "nav": NAV,
            "active": request.path,
            "flash": None,
            "logged_in": SESSION_KEY in request,
            "bearer": request.get(SESSION_KEY) == BEARER_SESSION,
        }
        if self._env is None:
            self._env = template_env()
        return self._env.get_template(template).render({**base, **context})

    def done(self, request: web.Request, path: str, text: str) -> web.StreamResponse:
        """POST-redirect-GET: back to ``path`` (a path on this site, else ``/``: see
        ``same_site_path``), showing ``text`` there."""
        response = see_other(path)
        set_flash(response, request, self.sessions.flash_cookie(text))
        return response


def csrf_field(request: web.Request) -> Markup:
    """The hidden form field every POST form behind the login must carry."""
    sid = request.get(SESSION_KEY)
    if not isinstance(sid, str):
        return Markup("")
    token = request.config_dict[DASHBOARD_KEY].sessions.csrf_token(sid)
    return Markup('<input type="hidden" name="{}" value="{}">').format(CSRF_FIELD, escape(token))


def template_env() -> jinja2.Environment:
    """The dashboard's templates, filter and global. jinja2 is imported here, on the first
    page rendered, so a ``watchkeeper run`` whose dashboard is never opened does not carry
    it (about 2 MiB resident and tens of ms of start-up)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("agent.app.dashboard", "templates"),
        autoescape=jinja2.select_autoescape(default=True),
    )
    env.filters["when"] = jinja2.pass_context(when)
    env.globals["csrf_field"] = csrf_field
    return env


DASHBOARD_KEY: web.AppKey[Dashboard] = web.AppKey("dashboard", Dashboard)
