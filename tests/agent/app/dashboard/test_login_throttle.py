"""Guessing the admin token is slowed down per client (issue 28): after ten wrong tokens
in a minute from one client (at ``/login``, or as a bearer on ``/api/*`` or a dashboard
page) that client gets 429 with Retry-After until the minute has passed, the right
token included; the owner elsewhere is never held back, and a session already logged
in keeps working. Behind a reverse proxy listed in ``TRUSTED_PROXIES`` the client is
the rightmost untrusted ``X-Forwarded-For`` hop; from anyone else that header is
ignored, so forging it dodges nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent.app.features.scheduling import SchedulingOptions, scheduling
from tests.agent.app.dashboard.conftest import TOKEN
from tests.agent.app.dashboard.test_auth import fresh_client, log_in
from tests.databases import AppDb
from tests.fakes.alert_app import Harness, alert_app

GUESSER = "203.0.113.7"
OWNER = "198.51.100.2"
ALERT = {"severity": "info", "title": "disk", "body": "almost full"}


@pytest.fixture
async def proxied(app_db: AppDb) -> AsyncIterator[Harness]:
    """The dashboard behind a reverse proxy on 127.0.0.1 (where the test client is)."""
    feature = scheduling(SchedulingOptions(timer=False))
    async with alert_app(app_db, features=(feature,), trusted_proxies="127.0.0.1") as harness:
        yield harness


def via(client: str, forged: str = "") -> dict[str, str]:
    """What the proxy passes on: whatever the client sent, then the address it saw."""
    return {"X-Forwarded-For": f"{forged}, {client}" if forged else client}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _login(dash: Harness, token: str, headers: dict[str, str]) -> Any:
    return await dash.client.post(
        "/login", data={"token": token}, headers=headers, allow_redirects=False
    )


async def test_ten_wrong_tokens_hold_that_client_for_the_rest_of_the_minute(dash: Harness) -> None:
    owner = await fresh_client(dash)
    guesser = await fresh_client(dash)
    try:
        assert (await log_in(owner)).status == 303
        for i in range(10):
            resp = await log_in(guesser, token=f"guess-{i}")
            assert resp.status == 401, i
            dash.clock.advance(seconds=1)
        held = await log_in(guesser, token=TOKEN)
        assert held.status == 429
        assert held.headers["Retry-After"] == "50"
        assert "try again in 50 s" in await held.text()
        assert "wk_session" not in held.cookies
        page = await owner.get("/alerts", allow_redirects=False)
        assert page.status == 200  # logged in before, from the same address: not affected

        dash.clock.advance(seconds=50)  # the first wrong token leaves the window
        assert (await log_in(guesser, token=TOKEN)).status == 303
    finally:
        await owner.close()
        await guesser.close()


async def test_a_few_typos_do_not_hold_the_owner(dash: Harness) -> None:
    client = await fresh_client(dash)
    try:
        for i in range(9):
            assert (await log_in(client, token=f"typo-{i}")).status == 401
        assert (await log_in(client)).status == 303
    finally:
        await client.close()


async def test_a_guesser_behind_the_proxy_never_holds_the_owner_back(proxied: Harness) -> None:
    for i in range(10):
        assert (await _login(proxied, f"guess-{i}", via(GUESSER))).status == 401, i
    held = await _login(proxied, TOKEN, via(GUESSER))
    assert held.status == 429 and "wk_session" not in held.cookies
    # Writing the owner's address into X-Forwarded-For: the proxy adds the real one.
    forged = await _login(proxied, TOKEN, via(GUESSER, forged=OWNER))
    assert forged.status == 429 and "wk_session" not in forged.cookies

    owner = await _login(proxied, TOKEN, via(OWNER))
    assert owner.status == 303 and "wk_session" in owner.cookies
    api = await proxied.client.get("/api/status", headers=via(OWNER) | bearer(TOKEN))
    assert api.status == 200
    page = await proxied.client.get(
        "/alerts", headers=via(OWNER) | bearer(TOKEN), allow_redirects=False
    )
    assert page.status == 200


async def test_forwarded_for_from_an_untrusted_peer_is_ignored(dash: Harness) -> None:
    """No ``TRUSTED_PROXIES``: a new forged address per guess is still one client."""
    for i in range(10):
        resp = await _login(dash, f"guess-{i}", via(f"192.0.2.{i}"))
        assert resp.status == 401, i
    assert (await _login(dash, TOKEN, via("192.0.2.200"))).status == 429


async def test_wrong_bearers_on_the_api_and_the_pages_are_throttled_too(proxied: Harness) -> None:
    wrong = bearer("not-the-token-0123456789")
    for i in range(5):
        resp = await proxied.client.get("/api/status", headers=via(GUESSER) | wrong)
        assert resp.status == 401, i
        page = await proxied.client.get("/", headers=via(GUESSER) | wrong, allow_redirects=False)
        assert page.status == 303, i  # to the login page, no data
        proxied.clock.advance(seconds=2)

    api = await proxied.client.get("/api/status", headers=via(GUESSER) | bearer(TOKEN))
    assert api.status == 429
    assert api.headers["Retry-After"] == "50"
    assert "try again in 50 s" in (await api.json())["error"]
    raised = await proxied.client.post(
        "/api/alerts", json=ALERT, headers=via(GUESSER) | bearer(TOKEN)
    )
    assert raised.status == 429
    page = await proxied.client.get(
        "/alerts", headers=via(GUESSER) | bearer(TOKEN), allow_redirects=False
    )
    assert page.status == 429 and page.headers["Retry-After"] == "50"
    assert page.headers["X-Frame-Options"] == "DENY"
    assert await proxied.app.database.db["alerts"].count_documents({}) == 0

    # The owner's monitor, elsewhere, goes on raising alerts meanwhile.
    owner = await proxied.client.post("/api/alerts", json=ALERT, headers=via(OWNER) | bearer(TOKEN))
    assert owner.status == 201

    proxied.clock.advance(seconds=50)
    api = await proxied.client.get("/api/status", headers=via(GUESSER) | bearer(TOKEN))
    assert api.status == 200
