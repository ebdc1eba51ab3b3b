"""``GET/POST /login`` and ``POST /logout``: the only dashboard routes open without a session."""

from __future__ import annotations

from aiohttp import web

from agent.app.dashboard.auth import CSRF_FIELD, SESSION_COOKIE, SESSION_KEY, set_session
from agent.app.dashboard.context import Dashboard, plain, same_site_path, secured, see_other

MAX_TOKEN_CHARS = 1000


def register(router: web.UrlDispatcher, dash: Dashboard) -> None:
    async def login_page(request: web.Request) -> web.StreamResponse:
        if dash.sessions.token is None:
            return secured(plain("ADMIN_TOKEN is not configured", 503))
        if dash.sessions.session_of(request, dash.now()) is not None:
            return secured(see_other(same_site_path(request.query.get("next"))))
        context = {"error": None, "next": same_site_path(request.query.get("next"))}
        return secured(dash.render(request, "login.html", context))

    async def login(request: web.Request) -> web.StreamResponse:
        if dash.sessions.token is None:
            return secured(plain("ADMIN_TOKEN is not configured", 503))
        client = dash.sessions.gate.admit(request)  # held: 429, the form not even read
        form = await request.post()
        given, target = form.get("token"), same_site_path(str(form.get("next") or ""))
        if not dash.sessions.gate.form_token(client, given, MAX_TOKEN_CHARS):
            context = {"error": "That token is not right.", "next": target}
            return secured(dash.render(request, "login.html", context, status=401))
        response = see_other(target)
        set_session(response, request, dash.sessions.new_cookie(dash.now()))
        return secured(response)

    async def logout(request: web.Request) -> web.StreamResponse:
        sid = dash.sessions.session_of(request, dash.now())
        if sid is None:
            return secured(see_other("/login"))
        form = await request.post()
        given = form.get(CSRF_FIELD)
        if not isinstance(given, str) or not dash.sessions.csrf_ok(sid, given):
            return secured(plain("CSRF token missing or wrong; reload the page", 403))
        request[SESSION_KEY] = sid
        await dash.sessions.revoke(request, dash.now())
        response = see_other("/login")
        response.del_cookie(SESSION_COOKIE, path="/")
        return secured(response)

    router.add_get("/login", login_page, allow_head=False)
    router.add_post("/login", login)
    router.add_post("/logout", logout)
