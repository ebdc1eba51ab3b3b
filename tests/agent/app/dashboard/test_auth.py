"""Who gets in: bearer or session cookie; the cookie's flags and expiry; CSRF on every POST;
503 without ADMIN_TOKEN. Over HTTP with the aiohttp client (the browser tests log in too)."""

from __future__ import annotations

import re
from http.cookies import SimpleCookie
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from agent.app.http import make_web_app
from tests.agent.app.dashboard.conftest import TOKEN
from tests.fakes.alert_app import Harness

BEARER = {"Authorization": f"Bearer {TOKEN}"}


def session_cookie(resp: Any) -> SimpleCookie:
    cookie = SimpleCookie()
    for header in resp.headers.getall("Set-Cookie", []):
        cookie.load(header)
    return cookie


async def fresh_client(dash: Harness) -> TestClient[Any, Any]:
    """A client with an empty cookie jar on the same app."""
    client: TestClient[Any, Any] = TestClient(TestServer(make_web_app(dash.app)))
    await client.start_server()
    return client


async def log_in(client: TestClient[Any, Any], token: str = TOKEN) -> Any:
    return await client.post("/login", data={"token": token}, allow_redirects=False)


async def csrf_of(client: TestClient[Any, Any], path: str = "/", **kw: Any) -> str:
    page = await (await client.get(path, **kw)).text()
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page[:500]
    return found.group(1)


async def test_without_admin_token_every_page_answers_503(dash: Harness) -> None:
    dash.app.settings.admin_token = None
    for path in ("/", "/alerts", "/login"):
        resp = await dash.client.get(path, headers=BEARER, allow_redirects=False)
        assert resp.status == 503, path
        assert "ADMIN_TOKEN" in await resp.text()
    assert (await dash.client.post("/login", data={"token": TOKEN})).status == 503


async def test_logged_out_sees_the_login_page_and_no_data(dash: Harness) -> None:
    await dash.router.raise_alert(severity="warning", title="Disk almost full")
    resp = await dash.client.get("/alerts", allow_redirects=False)
    assert resp.status == 303
    assert resp.headers["Location"] == "/login?next=%2Falerts"
    page = await (await dash.client.get("/")).text()
    assert "Admin token" in page and "Disk almost full" not in page
    assert 'href="/alerts"' not in page  # no nav either


async def test_bearer_header_gets_the_page(dash: Harness) -> None:
    await dash.router.raise_alert(severity="warning", title="Disk almost full")
    resp = await dash.client.get("/", headers=BEARER)
    assert resp.status == 200
    page = await resp.text()
    assert "Disk almost full" in page and "Log out" not in page
    assert resp.headers["Content-Security-Policy"].startswith("default-src 'self'")
    wrong = await dash.client.get("/", headers={"Authorization": f"Bearer {TOKEN}x"})
    assert "Disk almost full" not in await wrong.text()


async def test_a_wrong_token_sets_nothing(dash: Harness) -> None:
    resp = await log_in(dash.client, "not-the-token-0123456789")
    assert resp.status == 401
    assert "Set-Cookie" not in resp.headers
    assert "That token is not right." in await resp.text()
    assert (await dash.client.get("/", allow_redirects=False)).status == 303


async def test_the_session_cookie_is_httponly_strict_and_expires(dash: Harness) -> None:
    resp = await log_in(dash.client)
    assert resp.status == 303 and resp.headers["Location"] == "/"
    morsel = session_cookie(resp)["wk_session"]
    assert morsel["httponly"] and morsel["samesite"] == "Strict"
    assert morsel["max-age"] == str(12 * 3600) and morsel["path"] == "/"
    assert not morsel["secure"]  # plain http (an SSH tunnel); behind TLS it is Secure
    assert (await dash.client.get("/", allow_redirects=False)).status == 200
    dash.clock.advance(hours=12, minutes=1)  # the server checks the expiry too
    assert (await dash.client.get("/", allow_redirects=False)).status == 303


async def test_the_cookie_is_secure_behind_a_tls_proxy(dash: Harness) -> None:
    resp = await dash.client.post(
        "/login",
        data={"token": TOKEN},
        headers={"X-Forwarded-Proto": "https"},
        allow_redirects=False,
    )
    assert session_cookie(resp)["wk_session"]["secure"]


async def test_a_forged_or_logged_out_cookie_is_refused(dash: Harness) -> None:
    client = await fresh_client(dash)
    try:
        value = session_cookie(await log_in(client))["wk_session"].value
        sid, expires, signature = value.split(".")
        forged = f"{sid}.{int(expires) + 86400}.{signature}"
        client.session.cookie_jar.clear()
        resp = await client.get("/", headers={"Cookie": f"wk_session={forged}"})
        assert "Admin token" in await resp.text()
        cookie = {"Cookie": f"wk_session={value}"}
        csrf = await csrf_of(client, headers=cookie)
        out = await client.post(
            "/logout", data={"csrf": csrf}, headers=cookie, allow_redirects=False
        )
        assert out.status == 303 and out.headers["Location"] == "/login"
        replay = await client.get(
            "/", headers={"Cookie": f"wk_session={value}"}, allow_redirects=False
        )
        assert replay.status == 303  # revoked, though its signature and expiry are fine
    finally:
        await client.close()


async def test_login_goes_back_only_to_a_local_path(dash: Harness) -> None:
    for target, expected in (("/alerts", "/alerts"), ("//evil.example/", "/"), ("https://x", "/")):
        resp = await dash.client.post(
            "/login", data={"token": TOKEN, "next": target}, allow_redirects=False
        )
        assert resp.headers["Location"] == expected


async def test_every_post_needs_the_csrf_token(dash: Harness) -> None:
    alert = await dash.router.raise_alert(severity="warning", title="Backup failed")
    code = alert.code
    await log_in(dash.client)
    for data in ({}, {"csrf": "x" * 43}):
        resp = await dash.client.post(f"/alerts/{code}/ack", data=data, allow_redirects=False)
        assert resp.status == 403
        assert "CSRF" in await resp.text()
    bearer_post = await dash.client.post(f"/alerts/{code}/ack", headers=BEARER)
    assert bearer_post.status == 403  # the bearer header does not excuse a missing token
    stored = await dash.router.store.by_code(code)
    assert stored is not None and stored.status == "open"
    assert (await dash.client.post("/logout", allow_redirects=False)).status == 403
    csrf = await csrf_of(dash.client)
    resp = await dash.client.post(
        f"/alerts/{code}/ack", data={"csrf": csrf, "next": "/alerts"}, allow_redirects=False
    )
    assert resp.status == 303 and resp.headers["Location"] == "/alerts"
    stored = await dash.router.store.by_code(code)
    assert stored is not None and stored.status == "acknowledged"


async def test_a_post_without_a_session_is_refused(dash: Harness) -> None:
    alert = await dash.router.raise_alert(severity="warning", title="Backup failed")
    resp = await dash.client.post(f"/alerts/{alert.code}/ack", data={"csrf": "x"})
    assert resp.status == 401
    stored = await dash.router.store.by_code(alert.code)
    assert stored is not None and stored.status == "open"


async def test_static_files_and_pages_name_no_external_url(dash: Harness) -> None:
    css = await dash.client.get("/static/dashboard.css")
    assert css.status == 200 and "text/css" in css.headers["Content-Type"]
    await log_in(dash.client)
    for path in ("/", "/alerts", "/login"):
        page = await (await dash.client.get(path)).text()
        assert not re.search(r"""(src|href|action)=["']?(https?:)?//""", page), path
